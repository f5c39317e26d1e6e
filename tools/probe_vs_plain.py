"""Where does the probe part from the plain loop? One config, several ways of timing it.

The agreement check (``python -m benchmarks --agreement``) found two rows where the
probe read 5-8% below the plain-loop checker in every round. This tool times one
config, round after round (the order rotating), by:

- ``probe``: autotune's probe, as the agreement check runs it (a fork-server child);
- ``probe-spawn``: the same probe started by ``spawn`` (a new interpreter);
- ``probe-nowatch``: the probe with the search's memory watch replaced by a no-op;
- ``probe-bare``: the probe's own process alone, its parent only reading its windows
  (no memory watch, no device monitor, no polling);
- ``plain``: the plain-loop checker (a new interpreter, no autotune code);
- ``plain-forkserver``: the plain loop's code run in a child of the probes' fork server.

::

    python tools/probe_vs_plain.py benchmarks/workloads/hdf5_chunked.py \\
        '{"num_workers": 6, "prefetch_factor": 1, "batch_size": 64, "threads": 1}' \\
        --rounds 9 --variants probe plain plain-forkserver
"""

from __future__ import annotations

import argparse
import dataclasses
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

from autotune import Settings
from autotune.probe import Figures, ProbeRequest, Window, _runner
from autotune.probe._child import child_main
from benchmarks import _checker
from benchmarks._side_by_side import probe_rate, probe_request


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
    context: Any = _runner.probe_context()
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_plain_child, args=(dataclasses.asdict(plan), send))
    child.start()
    send.close()
    rate: float = receive.recv()
    child.join()
    return rate


def _bare_probe(request: ProbeRequest) -> float:
    """samples/s of a probe whose parent does nothing but read its events."""
    context: Any = _runner.probe_context()
    events, events_child = context.Pipe(duplex=False)
    control_child, control = context.Pipe(duplex=False)
    child = context.Process(target=child_main, args=(request, events_child, control_child))
    child.start()
    events_child.close()
    control_child.close()
    windows: list[Window] = []
    while True:
        kind, payload = events.recv()
        if kind == "window":
            windows.append(payload)
        elif kind == "error":
            raise RuntimeError(f"the bare probe failed: {payload.message}")
        elif kind == "done":
            break
    control.close()
    child.join()
    return Figures(windows=tuple(windows)).samples_per_s


def variants(
    config: Path, settings: Settings, warmup: float, seconds: float
) -> dict[str, Callable[[], float]]:
    """Each way of timing ``settings``, by name."""
    forkserver = _runner.probe_context()
    real_watch = _runner.TreeWatch

    def probe(context: Any = forkserver, watch: Any = real_watch) -> Callable[[], float]:
        def run() -> float:
            _runner._context, _runner.TreeWatch = context, watch  # type: ignore[misc]
            try:
                return probe_rate(
                    config, settings, seconds=seconds, warmup=warmup, device="cpu", seed=0
                )
            finally:
                _runner._context, _runner.TreeWatch = forkserver, real_watch  # type: ignore[misc]

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
    parser.add_argument("settings", help="the config's settings, as JSON")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--variants", nargs="+", default=["probe", "plain", "plain-forkserver"])
    options = parser.parse_args(argv)
    settings = Settings.from_dict(json.loads(options.settings))
    every = variants(options.config.resolve(), settings, options.warmup, options.seconds)
    unknown = sorted(set(options.variants) - set(every))
    if unknown:
        parser.error(f"unknown variants {unknown}; expected some of {sorted(every)}")
    names: list[str] = options.variants
    rates: dict[str, list[float]] = {name: [] for name in names}
    for index in range(options.rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            rates[name].append(every[name]())
        print(f"round {index + 1}: " + ", ".join(f"{n} {rates[n][-1]:,.0f}" for n in names))
    plain = statistics.median(rates["plain"]) if "plain" in rates else None
    for name in names:
        middle = statistics.median(rates[name])
        versus = f" ({middle / plain:.3f} of plain)" if plain else ""
        print(f"median {name}: {middle:,.0f} samples/s{versus}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
