"""Where does the probe part from the plain loop? One config, several ways of timing it.

The agreement check (``python -m benchmarks agreement``) found two rows where the
probe read 5-8% below the plain-loop checker in every round. This tool times one
config, round after round (the order rotating), by:

- ``probe``: autotune's probe, as the agreement check runs it (a fork-server child);
- ``probe-spawn``: the same probe started by ``spawn`` (a new interpreter);
- ``probe-nowatch``: the probe with the search's memory watch replaced by a no-op;
- ``probe-bare``: the probe's own process alone, its parent only reading its windows
  (no memory watch, no device monitor, no polling);
- ``probe-bare+PIECES``: the bare probe with pieces of its process replaced, ``+``-joined:
  ``plainloop`` (the measuring loop replaced by the plain loop's ``timed_loop``, the same
  warm-up and one span as long as the windows), ``plainstep`` (the plain loop's training
  step instead of the probe's ``Trainer``), ``noseed`` (no seeding of random, numpy and
  torch); for example ``probe-bare+plainloop`` or ``probe-bare+noseed+plainstep``;
- ``plain``: the plain-loop checker (a fork of its zygote, `benchmarks/common/_zygote.py`: no
  autotune code);
- ``plain-forkserver``: the plain loop's code run in a child of the probes' fork server.

::

    python tools/probe_vs_plain.py benchmarks/workloads/hdf5_chunked.py \\
        '{"num_workers": 6, "prefetch_factor": 1, "batch_size": 64, "threads": 1}' \\
        --rounds 9 --variants probe plain plain-forkserver

Several configs at once (each a JSON argument): every variant times every config in each
round, and for each variant the tool prints each config over the first, paired within
the round (median and round by round): do the probe and the plain loop rank them alike?
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import multiprocessing
import os
import statistics
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import autotune.probe._child as probe_child
from autotune import Settings
from autotune.probe import Figures, ProbeRequest, Window, _forkserver, _memory_watch, _runner
from autotune.probe._child import child_main
from benchmarks.agreement._side_by_side import probe_rate, probe_request
from benchmarks.common import _checker


class _NoWatch:
    """A memory watch that reads nothing."""

    def __init__(self, pid: int, *, limit: int | None) -> None:
        self.limit = limit
        self.peak = 0
        self.exceeded_at: int | None = None
        self.pids: set[int] = set()

    def sample(self, *, force: bool = False) -> int:
        return 0

    def stop(self) -> None: ...

    def collect(self) -> None: ...

    def kill_all(self) -> None: ...


def _plain_child(plan: dict[str, Any], answer: Connection) -> None:
    os.setsid()
    multiprocessing.set_start_method("fork", force=True)  # the DataLoader's, as in a probe
    answer.send(_checker.run_plan(_checker.Plan(**plan)))
    answer.close()


def _plain_in_forkserver(plan: _checker.Plan) -> float:
    context: Any = _forkserver.probe_context()
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_plain_child, args=(dataclasses.asdict(plan), send))
    child.start()
    send.close()
    rate: float = receive.recv()
    child.join()
    return rate


PIECES = ("plainloop", "plainstep", "noseed")
"""Pieces of the probe process that ``probe-bare+PIECE`` replaces (see the module docstring)."""


def _plain_timing(pace: Any, steps: Any, *, max_windows: int, device: Any) -> None:
    """The probe's measuring loop replaced by the plain loop's: ``_checker.timed_loop``
    over the probe's batches and training step, as long as the probe's windows, its
    figure sent as one ``("rate", samples/s)`` event. The copy to the device is the plain
    loop's own (the steps' ``copy``, ``timer`` and ``beat`` go unused: the signature is
    ``measure``'s)."""
    plan = _checker.Plan(
        config="",
        settings={},
        seconds=pace.window_seconds * max_windows,
        warmup=pace.warmup_seconds,
    )

    def train(batch: Any) -> None:
        for _ in range(steps.echo):
            steps.work(batch)

    # The plain loop counts a batch's samples from its tensors, else as a full batch:
    # the first batch's count from the sampler stands for that full batch.
    first, full = steps.next_batch()
    rate = _checker.timed_loop(
        itertools.chain([first], (steps.next_batch()[0] for _ in itertools.count())),
        train,
        plan,
        device=device,
        non_blocking=False,
        default_n=full,
        queued=pace.queued,
    )
    pace.send(("rate", rate))


class _PlainTrainer:
    """The plain loop's training step where the probe has its ``Trainer``."""

    def __init__(self, workload: Any, model: Any, device: Any, amp: Any) -> None:
        self.step = _checker.make_train_step(workload, model, device, amp)


def _patched_child(
    request: ProbeRequest, events: Connection, control: Connection, pieces: frozenset[str]
) -> None:
    """The probe process with ``pieces`` (of :data:`PIECES`) replaced."""
    if "noseed" in pieces:
        probe_child.seed = lambda seed: None  # type: ignore[attr-defined]
    if "plainloop" in pieces:
        probe_child.measure = _plain_timing  # type: ignore[attr-defined]
    if "plainstep" in pieces:
        probe_child.Trainer = _PlainTrainer  # type: ignore[attr-defined,assignment]
    child_main(request, events, control)


def _bare_probe(request: ProbeRequest, pieces: frozenset[str] = frozenset()) -> float:
    """samples/s of a probe whose parent does nothing but read its events; ``pieces``
    of its process replaced (:data:`PIECES`)."""
    context: Any = _forkserver.probe_context()
    events, events_child = context.Pipe(duplex=False)
    control_child, control = context.Pipe(duplex=False)
    child = context.Process(
        target=_patched_child, args=(request, events_child, control_child, pieces)
    )
    child.start()
    events_child.close()
    control_child.close()
    windows: list[Window] = []
    rate: float | None = None
    while True:
        kind, payload = events.recv()
        if kind == "window":
            windows.append(payload)
        elif kind == "rate":
            rate = payload
        elif kind == "error":
            raise RuntimeError(f"the bare probe failed: {payload.message}")
        elif kind == "done":
            break
    control.close()
    child.join()
    return rate if rate is not None else Figures(windows=tuple(windows)).samples_per_s


def canonical(name: str) -> str:
    """A variant's name with its replaced pieces in :data:`PIECES`' order
    (``probe-bare+noseed+plainloop`` is ``probe-bare+plainloop+noseed``)."""
    base, *pieces = name.split("+")
    if base != "probe-bare" or not set(pieces) <= set(PIECES):
        return name
    return "+".join([base, *(piece for piece in PIECES if piece in pieces)])


def _bare_with(request: ProbeRequest, pieces: frozenset[str]) -> Callable[[], float]:
    """The bare probe of ``request`` with ``pieces`` replaced, as a variant."""
    return lambda: _bare_probe(request, pieces)


def variants(
    config: Path, settings: Settings, warmup: float, seconds: float
) -> dict[str, Callable[[], float]]:
    """Each way of timing ``settings``, by name."""
    forkserver = _forkserver.probe_context()
    real_watch = _memory_watch.TreeWatch

    def probe(context: Any = forkserver, watch: Any = real_watch) -> Callable[[], float]:
        def run() -> float:
            _forkserver._context, _runner.TreeWatch = context, watch  # type: ignore[attr-defined]
            try:
                return probe_rate(
                    config, settings, seconds=seconds, warmup=warmup, device="cpu", seed=0
                )
            finally:
                _forkserver._context, _runner.TreeWatch = forkserver, real_watch  # type: ignore[attr-defined]

        return run

    plan = _checker.Plan(
        config=str(config), settings=settings.to_dict(), seconds=seconds, warmup=warmup
    )
    # The probe's request as ``probe_rate`` makes it; ``run_probe`` would set the
    # workers' start method, which the bare probe skips.
    bare = dataclasses.replace(
        probe_request(config, settings, seconds=seconds, warmup=warmup, device="cpu", seed=0),
        worker_start_method=multiprocessing.get_start_method(),
    )
    return {
        "probe": probe(),
        "probe-bare": lambda: _bare_probe(bare),
        **{
            f"probe-bare+{'+'.join(combination)}": _bare_with(bare, frozenset(combination))
            for size in range(1, len(PIECES) + 1)
            for combination in itertools.combinations(PIECES, size)
        },
        "probe-spawn": probe(context=multiprocessing.get_context("spawn")),
        "probe-nowatch": probe(watch=_NoWatch),
        "plain": lambda: _checker.measure(
            config, settings, seconds=seconds, warmup=warmup, device="cpu"
        ),
        "plain-forkserver": lambda: _plain_in_forkserver(plan),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("settings", nargs="+", help="each config's settings, as JSON")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--variants", nargs="+", default=["probe", "plain", "plain-forkserver"])
    options = parser.parse_args(argv)
    configs = [Settings.from_dict(json.loads(text)) for text in options.settings]
    every = [
        variants(options.config.resolve(), settings, options.warmup, options.seconds)
        for settings in configs
    ]
    options.variants = [canonical(name) for name in options.variants]
    unknown = sorted(set(options.variants) - set(every[0]))
    if unknown:
        parser.error(f"unknown variants {unknown}; expected some of {sorted(every[0])}")
    names: list[str] = options.variants
    # (config index, variant) in a turning order: every config by every way, each round.
    entries = [(index, name) for index in range(len(configs)) for name in names]
    rates: dict[tuple[int, str], list[float]] = {entry: [] for entry in entries}
    for round_index in range(options.rounds):
        shift = round_index % len(entries)
        for index, name in entries[shift:] + entries[:shift]:
            rates[index, name].append(every[index][name]())
        print(
            f"round {round_index + 1}: "
            + ", ".join(f"{_label(i, n, configs)} {rates[i, n][-1]:,.0f}" for i, n in entries)
        )
    for index, settings in enumerate(configs):
        print(f"config {index + 1}: {settings.describe()}")
        plain = statistics.median(rates[index, "plain"]) if "plain" in names else None
        for name in names:
            middle = statistics.median(rates[index, name])
            versus = f" ({middle / plain:.3f} of plain)" if plain else ""
            print(f"  median {name}: {middle:,.0f} samples/s{versus}")
    for index in range(1, len(configs)):
        for name in names:
            paired = [a / b for a, b in zip(rates[index, name], rates[0, name], strict=True)]
            print(
                f"config {index + 1} / config 1, {name}: {statistics.median(paired):.3f} "
                f"(rounds: {', '.join(f'{r:.2f}' for r in paired)})"
            )
    return 0


def _label(index: int, name: str, configs: list[Settings]) -> str:
    return name if len(configs) == 1 else f"{index + 1}:{name}"


if __name__ == "__main__":
    sys.exit(main())
