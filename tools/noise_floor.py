"""How steady this machine is, before any loader: one process trains a small MLP on one
batch held in memory, in back-to-back windows, and says how far apart windows of the
same work read.

No DataLoader, no worker, no other process: whatever moves here moves under the probe
and the plain-loop checker too. For each thread count it prints the median samples/s, the
coefficient of variation over windows, the spread of the ratio of each window to the
next (an A/A pair: the same config measured twice, side by side), and how many of those
pairs fall within autotune's default tolerance and within 5% of each other.

::

    python tools/noise_floor.py                       # 1 and every CPU's threads, 1.5 s windows
    python tools/noise_floor.py --seconds 0.3 --windows 100 --threads 1
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import statistics
import time

import torch
from torch import nn

from autotune._noise import DEFAULT_TOLERANCE


def windows(threads: int, seconds: float, count: int, batch: int) -> list[float]:
    """``count`` windows of ``seconds`` each (after one of warm-up), samples/s each."""
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, targets = torch.randn(batch, 256), torch.randint(0, 10, (batch,))

    def window(length: float) -> float:
        began, steps = time.perf_counter(), 0
        while time.perf_counter() - began < length:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(inputs), targets)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            steps += 1
        return steps * batch / (time.perf_counter() - began)

    window(min(seconds, 1.0))
    return [window(seconds) for _ in range(count)]


def summary(rates: list[float]) -> str:
    """The line of one thread count: level, spread, and the A/A pairs."""
    pairs = [b / a for a, b in itertools.pairwise(rates)]
    logs = [math.log(p) for p in pairs]
    within = {bound: sum(abs(p - 1) <= bound for p in pairs) for bound in (DEFAULT_TOLERANCE, 0.05)}
    return (
        f"median {statistics.median(rates):,.0f} samples/s (range {min(rates):,.0f}-"
        f"{max(rates):,.0f}), CV {statistics.pstdev(rates) / statistics.mean(rates):.1%}; "
        f"window over the one before: sd of log {statistics.pstdev(logs):.3f}, "
        f"within {DEFAULT_TOLERANCE:.0%}: {within[DEFAULT_TOLERANCE]}/{len(pairs)}, "
        f"within 5%: {within[0.05]}/{len(pairs)}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="one window (default 1.5)")
    parser.add_argument("--windows", type=int, default=20, help="windows per thread count")
    parser.add_argument("--batch", type=int, default=32, help="samples a step (default 32)")
    parser.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=sorted({1, os.cpu_count() or 1}),
        help="training thread counts, in turn (default: 1 and every CPU)",
    )
    args = parser.parse_args()
    if args.seconds <= 0 or args.windows < 2 or args.batch < 1 or min(args.threads) < 1:
        parser.error("expected --seconds > 0, --windows >= 2, --batch >= 1, --threads >= 1")
    print(
        f"{os.cpu_count()} CPUs, torch {torch.__version__}; {args.windows} windows of "
        f"{args.seconds:g} s, batch {args.batch}"
    )
    for threads in args.threads:
        rates = windows(threads, args.seconds, args.windows, args.batch)
        print(f"threads={threads}: {summary(rates)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
