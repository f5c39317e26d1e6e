"""Does a measurement forked from the checker's zygote read what a new Python reads?

The plain-loop checker forks each measurement from a process that imported torch once
(:mod:`benchmarks.common._zygote`) instead of starting a new interpreter. This times the same
configs both ways, interleaved within each round (fresh, zygote; then zygote, fresh),
and prints per config the two medians, the paired ratio zygote/fresh round by round,
and what one measurement cost each way (wall seconds, start-up included).

The new-interpreter way is ``python -m benchmarks.common._checker PLAN ANSWER`` in a session of
its own, as the checker ran every measurement before the zygote.

::

    python tools/zygote_vs_fresh.py benchmarks/workloads/dict_batches.py \\
        '{"batch_size": 32}' '{"num_workers": 2, "batch_size": 64, "threads": 1}' --rounds 6
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune import Settings
from benchmarks.common import _checker


def fresh(plan: _checker.Plan) -> float:
    """One measurement in a new interpreter (``python -m benchmarks.common._checker``)."""
    env = _checker._environment()  # the tree's PYTHONPATH, as the zygote's
    with tempfile.TemporaryDirectory(prefix="zygote-vs-fresh-") as folder:
        answer = Path(folder) / "answer.json"
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.common._checker",
                json.dumps(vars(plan)),
                str(answer),
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            code = child.wait(timeout=_checker.STARTUP_ALLOWANCE_S)
        finally:
            _checker._stop_group(child.pid)
            child.wait()
        if code != 0 or not answer.exists():
            raise _checker.CheckerError(f"the new interpreter exited with {code}")
        rate: float = json.loads(answer.read_text())["samples_per_s"]
    return rate


def forked(plan: _checker.Plan) -> float:
    """One measurement forked from the zygote, as the checker runs it."""
    answer = _checker.run_measurement(
        "benchmarks.common._checker", dataclasses.asdict(plan), limit=300.0, what="zygote"
    )
    rate: float = answer["samples_per_s"]
    return rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("settings", nargs="+", help="configs' settings, as JSON")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--warmup", type=float, default=0.5)
    options = parser.parse_args(argv)
    ways: dict[str, Callable[[_checker.Plan], float]] = {"fresh": fresh, "zygote": forked}
    _checker.zygote()  # started before the first round, as in a run of the suite
    for text in options.settings:
        settings = Settings.from_dict(json.loads(text))
        plan = _checker.Plan(
            config=str(options.config.resolve()),
            settings=settings.to_dict(),
            seconds=options.seconds,
            warmup=options.warmup,
        )
        rates: dict[str, list[float]] = {name: [] for name in ways}
        walls: dict[str, list[float]] = {name: [] for name in ways}
        for number in range(options.rounds):
            order = list(ways) if number % 2 == 0 else list(ways)[::-1]
            for name in order:
                began = time.perf_counter()
                rates[name].append(ways[name](plan))
                walls[name].append(time.perf_counter() - began)
        pairs = [z / f for f, z in zip(rates["fresh"], rates["zygote"], strict=True)]
        print(f"{options.config.name} {settings.describe()}, {options.rounds} rounds:")
        for name in ways:
            print(
                f"  {name:6}: median {statistics.median(rates[name]):,.0f} samples/s "
                f"(range {min(rates[name]):,.0f}-{max(rates[name]):,.0f}), "
                f"{statistics.median(walls[name]):.1f} s a measurement"
            )
        print(
            f"  zygote/fresh, paired within rounds: median {statistics.median(pairs):.3f} "
            f"(rounds: {', '.join(f'{p:.3f}' for p in pairs)})"
        )
    _checker.close_zygote()
    return 0


if __name__ == "__main__":
    sys.exit(main())
