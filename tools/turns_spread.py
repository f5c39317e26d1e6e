"""How closely configs measured in turns in one probe process read against each other:
the spread, over several such processes, of each config's speedup over the first (the
default loader), the order of the turns reversed every other process as a search's
confirming rounds reverse it. With ``--alone``, each round also measures every config
in a probe of its own (nine windows, as a confirming probe of its own runs), right
after the round in turns, so the two ways are read side by side.

Each line is one round: its wall seconds, each config's samples/s and each one's
speedup over the first. Then, per config and way, the median speedup and the standard
deviation of its logarithm over the rounds: what a confirming round's speedup moves by.

::

    python tools/turns_spread.py examples/quickstart.py --rounds 6 --passes 4 \\
        --config '{"batch_size": 64, "num_workers": 1, "persistent_workers": true,
                   "amp": "bf16", "threads": 1}'
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune import Settings
from autotune._noise import pooled_log_spread
from autotune.probe import ProbeRequest, WorkloadSource, run_probe, start_probe_server
from autotune.workload import load_config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", help="a config file")
    parser.add_argument(
        "--config",
        dest="configs",
        action="append",
        default=[],
        help="a config beside the default loader, as JSON settings (repeat the flag)",
    )
    parser.add_argument("--rounds", type=int, default=6, help="probe processes (default 6)")
    parser.add_argument("--passes", type=int, default=4, help="windows of each (default 4)")
    parser.add_argument("--window", type=float, default=0.5, help="window seconds")
    parser.add_argument(
        "--alone", action="store_true", help="also each config in a probe of its own"
    )
    args = parser.parse_args(argv)
    workload = load_config(args.config).workload
    default = Settings(batch_size=workload.batch_size)
    configs = [default, *(Settings.from_dict(json.loads(text)) for text in args.configs)]
    template = ProbeRequest(
        source=WorkloadSource(config_path=str(Path(args.config).resolve())),
        settings=default,
        device=workload.device or "cpu",
        window_seconds=args.window,
        warmup_seconds=0.5,
    )
    start_probe_server()
    ways = ("in turns", "alone") if args.alone else ("in turns",)
    speedups: dict[str, list[list[float]]] = {way: [[] for _ in configs[1:]] for way in ways}
    for number in range(args.rounds):
        order = configs if number % 2 == 0 else configs[::-1]
        for way in ways:
            began = time.perf_counter()
            rates = _round(template, order, args.passes, alone=way == "alone")
            wall = time.perf_counter() - began
            if rates is None:
                print(f"round {number} {way}: a probe failed")
                continue
            if number % 2:
                rates = rates[::-1]
            ratios = [rate / rates[0] for rate in rates[1:]]
            for found, ratio in zip(speedups[way], ratios, strict=True):
                found.append(ratio)
            print(
                f"round {number} {way}: {wall:.1f} s, samples/s "
                + " ".join(f"{rate:,.0f}" for rate in rates)
                + ", speedups "
                + " ".join(f"{ratio:.3f}" for ratio in ratios)
            )
    for way in ways:
        for settings, found in zip(configs[1:], speedups[way], strict=True):
            spread = pooled_log_spread([found])
            if spread is None:
                continue
            print(
                f"{way}: {settings.describe()}: median {statistics.median(found):.3f}x, "
                f"sd of log {spread.sd:.3f} over {len(found)} rounds"
            )
    return 0


def _round(
    template: ProbeRequest, order: list[Settings], passes: int, *, alone: bool
) -> list[float] | None:
    """samples/s of each config of ``order``: in turns in one process for ``passes``
    passes, or each in a probe of its own of nine windows; None where one failed."""
    if alone:
        results = [
            run_probe(dataclasses.replace(template, settings=settings, max_windows=9))
            for settings in order
        ]
    else:
        request = dataclasses.replace(
            template, settings=order[0], turns=tuple(order), max_windows=passes
        )
        results = list(run_probe(request).turns)
    if any(result.failure is not None for result in results):
        return None
    return [result.figures.samples_per_s for result in results]


if __name__ == "__main__":
    raise SystemExit(main())
