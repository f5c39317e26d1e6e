"""``python -m benchmarks online``: one epoch from a cold start of the default loader, the
best static config of a grid and ``autotune.online``."""
