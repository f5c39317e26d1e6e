"""``python -m benchmarks suite``: every strategy on every workload, re-measured side by side.

::

    workloads (config files)  ->  Harness (run_probe: train / compute / data)
        -> ceilings (compute, data)  -> strategies (defaults ... autotune, oracle)
        -> interleaved re-measurement  -> verdicts  -> tables and results files
"""
