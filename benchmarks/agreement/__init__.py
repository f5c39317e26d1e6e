"""``python -m benchmarks agreement``: the probe's figures beside a plain training loop's,
for the default loader and autotune's choice of every workload."""
