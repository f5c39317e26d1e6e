"""How much of a config's speed is the C allocator's? One plain loop, two allocator rules.

On small-in-ram the probe read batch 64 at 1.18x batch 32 and the plain-loop checker at
0.84x. Timing the same training in new processes showed why: at batch 64 the training
process often takes hundreds of minor page faults a step. glibc's ``malloc`` hands the
freed top of its heap back to the system once it passes a threshold it adjusts as the
process runs (``M_TRIM_THRESHOLD``, moved with ``M_MMAP_THRESHOLD``), and each step
takes the memory again, zeroed page by page. Whether a process falls into that depends
on what it allocated and freed before, and in which thread: two processes built the
same way can differ by a quarter in speed. A fork server, a zygote and a new
interpreter each start from another heap.

This tool times each config with the checker's plain loop (``benchmarks.common._checker``) in
a new interpreter for every measurement, as ``python train.py`` would start, under:

- ``dynamic``: glibc's own rule (``AUTOTUNE_FIX_ALLOCATOR=0``, so that autotune's
  loader leaves it);
- ``fixed``: ``MALLOC_MMAP_THRESHOLD_`` at glibc's largest dynamic value (32 MiB) and
  ``MALLOC_TRIM_THRESHOLD_`` at twice that, as glibc sets them when it raises them itself,
  from the interpreter's start: freed memory stays in the heap, and the thresholds no
  longer move;
- ``autotune``: nothing set; the thresholds are fixed as autotune's loaders fix them, in
  the process, when the loader is built (:mod:`autotune.settings._allocator`);
- ``forkserver`` (with ``--forkserver``): glibc's rule, but in a child of autotune's
  probe fork server, where every probe starts, rather than in a new interpreter.

For each measurement it prints samples/s and the training process's minor page faults
per step (timed part only; a DataLoader's worker processes are not counted). Then per
config the medians, ``fixed`` over ``dynamic`` paired within rounds, and each config
over the first, paired within rounds, under each rule::

    python tools/allocator_state.py benchmarks/workloads/small_in_ram.py \\
        '{"num_workers": 0, "batch_size": 32}' '{"num_workers": 0, "batch_size": 64, "threads": 2}'

glibc only: elsewhere (musl, macOS) the variables do nothing and both rules read alike.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autotune.settings._allocator import ENVIRONMENT, SWITCH  # noqa: E402

RULES: dict[str, dict[str, str]] = {
    "dynamic": {SWITCH: "0"},
    "fixed": ENVIRONMENT,
    "autotune": {},
}
"""Each allocator rule: the environment a measurement's new interpreter gets on top of
the checker's, less the allocator's variables."""


def measure_here(plan_json: str) -> tuple[float, float]:
    """One measurement in this process: samples/s of the plain loop, and the minor page
    faults a step of its timed part."""
    from benchmarks.common import _checker

    counted: dict[str, int] = {"steps": 0, "faults": 0}
    time_span = _checker._time_span

    def counting_span(batches: Any, train: Callable[[Any], None], *args: Any, **kw: Any) -> Any:
        def counted_train(batch: Any) -> None:
            counted["steps"] += 1
            train(batch)

        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        try:
            return time_span(batches, counted_train, *args, **kw)
        finally:
            counted["faults"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    _checker._time_span = counting_span
    rate = _checker.run_plan(_checker.Plan(**json.loads(plan_json)))
    return rate, counted["faults"] / counted["steps"] if counted["steps"] else 0.0


def _child(plan_json: str) -> int:
    """``--child PLAN_JSON``: one measurement in this new interpreter, printed as
    ``{"samples_per_s", "faults_per_step"}``."""
    rate, per_step = measure_here(plan_json)
    print(json.dumps({"samples_per_s": rate, "faults_per_step": per_step}))
    return 0


def measure(plan: dict[str, Any], rule: str) -> tuple[float, float]:
    """samples/s and minor page faults a step of ``plan``, in a new interpreter."""
    from benchmarks.common import _checker

    # PYTHONPATH: this tree, as the checker's.
    base = {k: v for k, v in _checker._environment().items() if k not in {*ENVIRONMENT, SWITCH}}
    env = {**base, **RULES[rule]}
    done = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(plan)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"a measurement failed ({rule}, {plan['settings']}):\n{done.stderr}")
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return float(answer["samples_per_s"]), float(answer["faults_per_step"])


def _forkserver_child(plan_json: str, answer: Connection) -> None:
    answer.send(measure_here(plan_json))
    answer.close()


def measure_in_forkserver(plan: dict[str, Any]) -> tuple[float, float]:
    """samples/s and minor page faults a step of ``plan``, in a child of the probes'
    fork server (this process's, started at its first use), under glibc's rule."""
    import os

    from autotune.probe import _forkserver

    os.environ[SWITCH] = "0"  # before the fork server starts; measure() drops it

    context: Any = _forkserver.probe_context()
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_forkserver_child, args=(json.dumps(plan), send))
    child.start()
    send.close()
    rate, per_step = receive.recv()
    child.join()
    return float(rate), float(per_step)


def paired(top: list[float], bottom: list[float]) -> str:
    """The median of ``top / bottom`` round by round, and each round's."""
    ratios = [a / b for a, b in zip(top, bottom, strict=True)]
    return f"{statistics.median(ratios):.3f} (rounds: {', '.join(f'{r:.2f}' for r in ratios)})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("settings", nargs="+", help="each config's settings, as JSON")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument(
        "--forkserver", action="store_true", help="also time each config in the probes' fork server"
    )
    options = parser.parse_args(argv)
    from autotune import Settings
    from autotune.workload._workload import load_config

    config_path = str(options.config.resolve())
    batch = load_config(options.config).workload.batch_size  # the user's, where not given
    configs = [{"batch_size": batch, **json.loads(text)} for text in options.settings]
    labels = [Settings.from_dict(config).describe() for config in configs]
    rules = [*RULES, "forkserver"] if options.forkserver else list(RULES)
    entries = [(index, rule) for index in range(len(configs)) for rule in rules]
    rates: dict[tuple[int, str], list[float]] = {entry: [] for entry in entries}
    faults: dict[tuple[int, str], list[float]] = {entry: [] for entry in entries}
    for round_index in range(options.rounds):
        shift = round_index % len(entries)  # the order turns, round by round
        for index, rule in entries[shift:] + entries[:shift]:
            plan = {
                "config": config_path,
                "settings": configs[index],
                "seconds": options.seconds,
                "warmup": options.warmup,
            }
            if rule == "forkserver":
                rate, fault = measure_in_forkserver(plan)
            else:
                rate, fault = measure(plan, rule)
            rates[index, rule].append(rate)
            faults[index, rule].append(fault)
        print(
            f"round {round_index + 1}: "
            + ", ".join(
                f"{index + 1}:{rule} {rates[index, rule][-1]:,.0f} "
                f"({faults[index, rule][-1]:.0f} faults/step)"
                for index, rule in entries
            ),
            flush=True,
        )
    for index, label in enumerate(labels):
        print(f"config {index + 1}: {label}")
        for rule in rules:
            print(
                f"  {rule}: median {statistics.median(rates[index, rule]):,.0f} samples/s, "
                f"{statistics.median(faults[index, rule]):.0f} faults/step"
            )
        for rule in rules[1:]:
            print(f"  {rule} / dynamic: {paired(rates[index, rule], rates[index, 'dynamic'])}")
    for index in range(1, len(configs)):
        for rule in rules:
            print(
                f"config {index + 1} / config 1, {rule}: "
                f"{paired(rates[index, rule], rates[0, rule])}"
            )
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.exit(_child(sys.argv[2]))
    sys.exit(main())
