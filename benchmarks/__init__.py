"""The benchmark suite: how good are the settings autotune finds, and how cheaply.

Run it with ``python -m benchmarks`` (``--quick`` for a short run); see
``benchmarks/README.md`` for what is measured and how.

::

    workloads (config files)  ->  Harness (run_probe: train / compute / data)
        -> ceilings (compute, data)  -> strategies (defaults ... autotune, oracle)
        -> interleaved re-measurement  -> verdicts  -> tables and results files
"""
