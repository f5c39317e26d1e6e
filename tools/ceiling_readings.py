"""How far apart two readings of one compute ceiling can be on this machine: the bounds
stage's probe (the model alone on batches held in memory, probe mode "compute"), taken
again and again in probes of their own, the thread counts alternating.

Each line is one probe: when it ended, its thread count, its samples/s, its windows'
samples/s and the share of the CPUs' time stolen by the hypervisor while it ran. A
reading whose windows agree with one another but not with the next probe's is what
:data:`autotune.explore._bounds.READINGS` guards against: one probe process trained
the model far below the next.

::

    python tools/ceiling_readings.py benchmarks/workloads/padded_text.py --batch 64 --pairs 30
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune import Settings
from autotune.probe import ProbeRequest, WorkloadSource, reference_windows, run_probe
from autotune.workload._options import SearchOptions


def cpu_times() -> list[int]:
    """The machine's CPU times (/proc/stat's first line), in clock ticks."""
    with open("/proc/stat", encoding="ascii") as stat:
        return [int(value) for value in stat.readline().split()[1:]]


def reading(config: str, batch: int, threads: int) -> tuple[float, list[float]]:
    """One compute probe of ``config`` as the bounds stage of a search with the default
    options takes it: samples/s, and each window's."""
    options = SearchOptions()
    request = ProbeRequest(
        source=WorkloadSource(config_path=config),
        settings=Settings(batch_size=batch, threads=threads),
        device="cpu",
        mode="compute",
        window_seconds=options.window_seconds,
        max_windows=reference_windows(options.max_windows),
        warmup_seconds=options.warmup_seconds,
    )
    result = run_probe(request)
    if result.failure is not None:
        raise SystemExit(f"the compute probe failed: {result.failure.message}")
    return result.figures.samples_per_s, [w.samples_per_s for w in result.figures.windows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="a workload config file")
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--pairs", type=int, default=10, help="rounds over the thread counts")
    args = parser.parse_args()
    began = time.monotonic()
    rates: dict[int, list[float]] = {threads: [] for threads in args.threads}
    for _ in range(args.pairs):
        for threads in args.threads:
            before = cpu_times()
            rate, windows = reading(args.config, args.batch, threads)
            spent = [after - earlier for earlier, after in zip(before, cpu_times(), strict=True)]
            steal = spent[7] / max(1, sum(spent)) if len(spent) > 7 else 0.0
            rates[threads].append(rate)
            shown = ", ".join(f"{w:,.0f}" for w in windows)
            print(
                f"{time.monotonic() - began:7.1f} s  threads={threads}  {rate:8,.0f} samples/s"
                f"  windows {shown}  steal {steal:.3f}",
                flush=True,
            )
    for threads, found in rates.items():
        print(
            f"threads={threads}: median {statistics.median(found):,.0f}, "
            f"lowest {min(found):,.0f}, highest {max(found):,.0f} ({len(found)} probes)"
        )


if __name__ == "__main__":
    main()
