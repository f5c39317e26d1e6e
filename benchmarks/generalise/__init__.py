"""``python -m benchmarks generalise``: searches of every workload, as a user runs them,
judged by the plain-loop checker on a grid of workers, threads and persistence."""
