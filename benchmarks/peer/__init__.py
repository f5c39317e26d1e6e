"""The peer: ``loadtune``, the tuner a user would pick instead of autotune, run on a
benchmark workload with its own defaults and its choice turned into the settings the
plain-loop checker measures. It is an optional extra of the benchmarks only
(``pip install -e '.[bench-peer]'``), never a dependency of the package."""
