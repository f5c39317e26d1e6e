"""What several suites share: the workloads and their profiles, the plain-loop checker and
the zygote it forks from, the verdicts, the flags, and the loop that runs a check workload
by workload and writes its results."""
