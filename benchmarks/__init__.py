"""The benchmarks of autotune: how good are the settings it finds, and how cheaply.

One package per suite, each a subcommand of ``python -m benchmarks`` (see
``benchmarks/README.md``)::

    suite/       every strategy (defaults ... autotune, oracle) on every workload
    agreement/   the probe's figures beside a plain training loop's
    online/      autotune.online against the default and the best static loader, one epoch
    generalise/  searches of every workload judged by the plain loop on a grid
    common/      what several suites share: the workloads, the plain-loop checker and its
                 zygote, the verdicts, the loop that runs a check workload by workload
    _page.py     RESULTS.md, generated from the results files
"""
