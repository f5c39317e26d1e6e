"""Does the choice hold on workloads nobody tuned for, seed after seed?

For each workload: three searches as a user runs them (``autotune.search(config,
seed=s)``, seeds 1, 2, 3, the default budget), then the plain-loop checker
(:mod:`benchmarks.common._checker`, independent of the probe) measures, in one interleaved
set of rounds:

- the grid: num_workers {0, 1, 2, 4, 8, 16} x training threads {1, every CPU} x
  persistent_workers {no, yes} (persistence only with workers), prefetch_factor at
  the DataLoader's default, each worker's native threads capped at 1 as the search's
  default space caps them, at the user's batch size with AMP off, and again at each
  other (batch size, AMP) a search chose;
- the default loader (``Settings(batch_size=user's)``, threads left to torch);
- each search's choice;
- with ``peer``, the choice of the peer, loadtune (:mod:`benchmarks.peer`), run once
  with its own defaults;
- with ``peer_budget`` too, the choice of one more search (seed 1) given the peer's own
  wall time as its ``budget``: autotune with no more time than the peer took.

Then a final set of rounds (:mod:`benchmarks.generalise._rounds`) measures again the
default loader, the choices and the grid's leaders, side by side; the targets are judged
on ratios taken within each of those rounds (:mod:`benchmarks.generalise._targets`).
This module reads the searches through ``autotune.search``'s public result only: it
imports nothing of the probe, the exploration or the decision
(``tests/benchmarks/test_generalise.py`` checks that in a fresh interpreter).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from autotune import Settings
from autotune.settings._settings import TORCH_PREFETCH, WORKER_THREADS
from benchmarks.agreement._check import Searched, run_search, study_folder
from benchmarks.common._checker import CheckerError
from benchmarks.common._device_limits import data_ceiling
from benchmarks.common._verdicts import Verdict
from benchmarks.common._workloads import BenchWorkload
from benchmarks.generalise._device import assess_device, on_device
from benchmarks.generalise._rounds import (
    FINAL_ROUNDS,
    LEADERS,
    RoundsOptions,
    measure_final,
    measure_rounds,
    summary,
)
from benchmarks.generalise._targets import assess, space_size
from benchmarks.peer._run import run_peer

if TYPE_CHECKING:
    from autotune import Machine
    from autotune.settings._settings import AmpMode

Say = Callable[[str], None]

GRID_WORKERS = (0, 1, 2, 4, 8, 16)
ALL_CPUS = "all"
"""A training-thread count in a grid: every CPU the machine gives this process."""
DEFAULT_SEEDS = 3
DEFAULT_ROUNDS = 3
MIN_ROUNDS = 3
"""The checker's medians come from at least this many interleaved rounds (the protocol's
least: the median of two rounds is only their mean)."""
GRID_KNOBS = ("num_workers", "threads", "persistent_workers", "worker_threads")


@dataclasses.dataclass(frozen=True, kw_only=True)
class GridSpec:
    """Which grid the checker measures at each (batch size, AMP)."""

    workers: tuple[int, ...] = GRID_WORKERS
    threads: tuple[int | str, ...] = (1, ALL_CPUS)
    """Training threads; ``"all"``: every CPU."""
    persistent: tuple[bool, ...] = (False, True)
    """persistent_workers, for the points with workers."""
    worker_threads: tuple[int | None, ...] = (WORKER_THREADS,)
    """The native threads of each worker, for the points with workers: capped as
    autotune's default space caps them (``None``: as the libraries start them, one per
    core in every worker). Only a dataset that calls numpy's BLAS or OpenMP in its
    workers tells the two apart, so the full grid measures the cap alone."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "num_workers": list(self.workers),
            "threads": list(self.threads),
            "persistent_workers": list(self.persistent),
            "worker_threads": list(self.worker_threads),
        }


NAMED_GRIDS = {
    "full": GridSpec(),
    "small": GridSpec(workers=(0, 2), persistent=(True,)),
}
"""``--grid`` by name: the protocol's grid, and four points for a run that only shows the
mode works (workers 0 and 2, persistent, 1 thread and every CPU)."""


def parse_grid(text: str | None) -> GridSpec:
    """``--grid``: a name from :data:`NAMED_GRIDS`, or a JSON object narrowing the full
    grid's knobs, e.g. ``{"num_workers": [0, 2], "threads": ["all"]}``.

    Raises:
        ValueError: not a name nor a JSON object, an unknown knob, or a value of the
            wrong kind.
    """
    if text is None:
        return GridSpec()
    if text in NAMED_GRIDS:
        return NAMED_GRIDS[text]
    try:
        given = json.loads(text)
    except json.JSONDecodeError:
        given = None
    if not isinstance(given, dict):
        raise ValueError(
            f"--grid is {text!r}; expected {' or '.join(NAMED_GRIDS)}, or a JSON object "
            f"of {', '.join(GRID_KNOBS)}, e.g. '{{\"num_workers\": [0, 2]}}'."
        )
    unknown = sorted(set(given) - set(GRID_KNOBS))
    if unknown:
        raise ValueError(f"--grid has unknown knobs {unknown}; the grid's are {list(GRID_KNOBS)}.")
    values = {knob: _as_list(knob, raw) for knob, raw in given.items()}
    return GridSpec(
        workers=tuple(_checked(values, "num_workers", _is_workers, GRID_WORKERS)),
        threads=tuple(_checked(values, "threads", _is_threads, (1, ALL_CPUS))),
        persistent=tuple(_checked(values, "persistent_workers", _is_flag, (False, True))),
        worker_threads=tuple(
            _checked(values, "worker_threads", _is_worker_threads, (WORKER_THREADS,))
        ),
    )


def _as_list(knob: str, raw: Any) -> list[Any]:
    values = raw if isinstance(raw, list) else [raw]
    if not values:
        raise ValueError(f"--grid's {knob} is empty; give at least one value.")
    return values


def _is_workers(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_threads(value: Any) -> bool:
    return value == ALL_CPUS or (_is_workers(value) and value >= 1)


def _is_flag(value: Any) -> bool:
    return isinstance(value, bool)


def _is_worker_threads(value: Any) -> bool:
    return value is None or (_is_workers(value) and value >= 1)


_EXPECTED = {
    "num_workers": "integers >= 0",
    "threads": f'integers >= 1 or "{ALL_CPUS}"',
    "persistent_workers": "true or false",
    "worker_threads": "integers >= 1 or null",
}


def _checked(
    values: Mapping[str, list[Any]],
    knob: str,
    valid: Callable[[Any], bool],
    default: Sequence[Any],
) -> list[Any]:
    chosen = values.get(knob, list(default))
    wrong = [v for v in chosen if not valid(v)]
    if wrong:
        raise ValueError(f"--grid's {knob} has {wrong}; expected {_EXPECTED[knob]}.")
    return list(dict.fromkeys(chosen))


def grid_points(batch_size: int, amp: str, cpus: int, spec: GridSpec) -> list[Settings]:
    """The grid at one batch size and AMP mode: workers x threads x persistence x the
    workers' native threads (the last two only with workers), prefetch_factor at the
    DataLoader's default, spelt out: a search's choice of that depth is then the same
    point, measured once (left unset, it was measured twice, and the two medians of one
    loader differed by up to 22% in one run)."""
    threads = sorted({cpus if t == ALL_CPUS else int(t) for t in spec.threads})
    points = []
    for workers in spec.workers:
        for count in threads:
            for persistent in spec.persistent if workers > 0 else (False,):
                for capped in spec.worker_threads if workers > 0 else (None,):
                    points.append(
                        Settings(
                            batch_size=batch_size,
                            num_workers=workers,
                            prefetch_factor=TORCH_PREFETCH if workers > 0 else None,
                            persistent_workers=persistent,
                            amp=cast("AmpMode", amp),  # off, or a mode a search chose
                            threads=count,
                            worker_threads=capped,
                        )
                    )
    return points


@dataclasses.dataclass(frozen=True, kw_only=True)
class Planned:
    """One config the checker measures, and what it stands for."""

    settings: Settings
    default: bool = False
    """The default loader."""
    seeds: tuple[int, ...] = ()
    """The searches that chose it."""
    grid: bool = False
    """A point of a grid."""
    peer: bool = False
    """The peer's choice (loadtune's)."""
    budgeted: bool = False
    """The choice of the search given the peer's wall time as its budget."""


def plan(
    user_batch: int,
    choices: Sequence[tuple[int, Settings]],
    cpus: int,
    spec: GridSpec,
    peer: Settings | None = None,
    budgeted: Settings | None = None,
) -> tuple[list[tuple[int, str]], list[Planned]]:
    """The grids' (batch size, AMP), and every distinct config to measure: the default
    loader, the choices (by seed), the ``peer``'s choice where given, then the grid at the
    user's batch size without AMP and at each other (batch size, AMP) a search chose; a
    config that stands for several (a choice on a grid point) is measured once. The
    peer's choice adds no grid: autotune's searches and the peer are read against the
    same grid best."""
    grids = [(user_batch, "off")]
    for _, settings in choices:
        if (settings.batch_size, settings.amp) not in grids:
            grids.append((settings.batch_size, settings.amp))
    roles: dict[str, dict[str, Any]] = {}

    def add(settings: Settings, **role: Any) -> None:
        entry = roles.setdefault(
            settings.key(),
            {
                "settings": settings,
                "default": False,
                "seeds": (),
                "grid": False,
                "peer": False,
                "budgeted": False,
            },
        )
        for name, value in role.items():
            entry[name] = entry[name] + value if name == "seeds" else value

    add(Settings(batch_size=user_batch), default=True)
    for seed, settings in choices:
        add(settings, seeds=(seed,))
    if peer is not None:
        add(peer, peer=True)
    if budgeted is not None:
        add(budgeted, budgeted=True)
    for batch, amp in grids:
        for point in grid_points(batch, amp, cpus, spec):
            add(point, grid=True)
    return grids, [Planned(**entry) for entry in roles.values()]


@dataclasses.dataclass(frozen=True, kw_only=True)
class GeneraliseOptions:
    """How many searches, and how long the checker measures."""

    seeds: int = DEFAULT_SEEDS
    """Searches per workload, seeded 1, 2, ... seeds."""
    rounds: int = DEFAULT_ROUNDS
    seconds: float = 1.5
    """Timed part of one plain-loop measurement."""
    warmup: float = 0.5
    grid: GridSpec = dataclasses.field(default_factory=GridSpec)
    trials: int | None = None
    """autotune's exploration trials; None: its default budget (the benchmark's protocol)."""
    plain_seed: int = 0
    """Seeds the plain loop's data order."""
    study_dir: Path | None = None
    final_rounds: int = FINAL_ROUNDS
    """Rounds of the final set, over the default, the choices and the grid's leaders."""
    leaders: int = LEADERS
    """Grid points the first set passes on to the final set."""
    peer: bool = False
    """Also run the peer, loadtune, once per workload and measure its choice beside the
    searches' (the ``bench-peer`` extra)."""
    peer_budget: bool = False
    """With ``peer``, also search once (seed 1) with the peer's wall time as the budget,
    and measure that choice beside the others."""

    def rounds_options(self, rounds: int) -> RoundsOptions:
        """How the checker measures, for a set of ``rounds`` rounds."""
        return RoundsOptions(
            rounds=rounds, seconds=self.seconds, warmup=self.warmup, plain_seed=self.plain_seed
        )

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["grid"] = self.grid.to_dict()
        data["study_dir"] = None if self.study_dir is None else str(self.study_dir)
        return data


def search_row(seed: int, searched: Searched, keep_study: bool) -> dict[str, Any]:
    """One search, as the results keep it: its choice and what it printed for it."""
    result = searched.result
    return {
        "seed": seed,
        "settings": result.settings.to_dict(),
        "describe": result.settings.describe(),
        "samples_per_s": result.samples_per_s,
        "rates": list(result.rates),
        "interval": list(result.interval) if result.interval else None,
        "speedup": result.speedup,
        "speedup_rounds": list(result.speedup_rounds),
        "speedup_interval": list(result.speedup_interval) if result.speedup_interval else None,
        "printed": result.rate_text() + (f", {result.speedup_text()}" if result.speedup else ""),
        "is_default": result.is_default,
        "confirmed": result.confirmed,
        "rounds": result.rounds,
        "noise": result.noise,
        "user_batch": result.user_batch,
        "device": result.device,
        "space": result.space,
        "space_size": space_size(result.space),
        "options": searched.options,
        "study": str(searched.study) if keep_study else None,
        "wall_s": searched.wall_s,
        "search_time": result.search_time.to_dict() if result.search_time else None,
    }


def _at_peer_time(
    workload: BenchWorkload,
    folder: Path,
    options: GeneraliseOptions,
    machine: Machine,
    say: Say,
    peer: Mapping[str, Any],
) -> Searched:
    """One search (seed 1) given the peer's wall time as its budget."""
    return run_search(
        workload,
        folder,
        seed=1,
        trials=options.trials,
        machine=machine,
        say=say,
        tag="generalise-budget",
        budget=float(peer["wall_s"]),
    )


def _budgeted_row(
    budgeted: Searched, peer: Mapping[str, Any], options: GeneraliseOptions
) -> dict[str, Any]:
    """The record of the search at the peer's time: its row, and the budget it was given."""
    return {
        **search_row(1, budgeted, options.study_dir is not None),
        "budget_s": float(peer["wall_s"]),
    }


def run_workload(
    workload: BenchWorkload, options: GeneraliseOptions, machine: Machine, say: Say
) -> dict[str, Any]:
    """Search one workload ``options.seeds`` times, measure the grid, the default loader
    and the choices with the plain loop, judge the targets; returns its section of the
    results (JSON types only)."""
    began = time.perf_counter()
    seeds = list(range(1, options.seeds + 1))
    with study_folder(options.study_dir) as folder:
        searched = [
            run_search(
                workload,
                folder,
                seed=seed,
                trials=options.trials,
                machine=machine,
                say=say,
                tag="generalise",
            )
            for seed in seeds
        ]
        first = searched[0].result
        peer = (
            run_peer(workload.config, user_batch=first.user_batch, device=first.device, say=say)
            if options.peer
            else None
        )
        budgeted = (
            _at_peer_time(workload, folder, options, machine, say, peer)
            if peer is not None and options.peer_budget
            else None
        )
    searches = [
        search_row(s, r, options.study_dir is not None)
        for s, r in zip(seeds, searched, strict=True)
    ]
    grids, planned = plan(
        first.user_batch,
        [(s, r.result.settings) for s, r in zip(seeds, searched, strict=True)],
        machine.cpus,
        options.grid,
        peer=Settings.from_dict(peer["settings"]) if peer else None,
        budgeted=budgeted.result.settings if budgeted else None,
    )
    peers = ", the peer's" if peer else ""
    say(
        f"plain loop: {len(planned)} configs ({len(grids)} grid(s), the default, "
        f"{len(seeds)} choice(s){peers}), {options.rounds} interleaved rounds"
    )
    measured = measure_rounds(
        workload.config,
        [p.settings for p in planned],
        options.rounds_options(options.rounds),
        first.device,
        say,
    )
    measurements = [
        _measurement(p, rates, errors, devices)
        for p, rates, errors, devices in zip(
            planned, measured.rates, measured.errors, measured.devices, strict=True
        )
    ]
    section: dict[str, Any] = {
        "name": workload.name,
        "config": workload.config.relative_to(workload.config.parents[2]).as_posix(),
        "device": first.device,
        "user_batch": first.user_batch,
        "cpus": machine.cpus,
        "searches": searches,
        **({"peer": peer} if peer else {}),
        **(
            {"budgeted": _budgeted_row(budgeted, peer, options)}
            if budgeted is not None and peer is not None
            else {}
        ),
        "grids": [{"batch_size": b, "amp": a} for b, a in grids],
        "measurements": measurements,
        "checker": {
            "rounds": options.rounds,
            "seconds": options.seconds,
            "warmup": options.warmup,
            "measurements": len(measured.walls),
            "wall_s": sum(measured.walls),
            "mean_measurement_s": sum(measured.walls) / len(measured.walls),
        },
    }
    if on_device(measurements):
        try:
            section["data_ceiling"] = data_ceiling(workload.config, first.user_batch)
            say(f"data ceiling with every CPU: {section['data_ceiling']:,.0f} samples/s")
        except CheckerError as error:  # the device's target goes unjudged, the rest stands
            say(f"data ceiling: FAILED: {error}")
    judged = judge_again(section, workload.config, options, say)
    judged["wall_s"] = time.perf_counter() - began
    return judged


def add_budgeted(
    section: Mapping[str, Any],
    workload: BenchWorkload,
    options: GeneraliseOptions,
    machine: Machine,
    say: Say,
) -> dict[str, Any]:
    """A workload's section (an earlier run's, with the peer's record) with one more search
    (seed 1) given the peer's wall time as its budget, its choice flagged among the
    measurements (a new one, which the final set of rounds measures first, where it is no
    config measured already); the section as it was where the peer did not run."""
    peer = section.get("peer")
    if peer is None:
        say("at the peer's time: no peer in this section; nothing searched")
        return dict(section)
    with study_folder(options.study_dir) as folder:
        budgeted = _at_peer_time(workload, folder, options, machine, say, peer)
    chosen = budgeted.result.settings
    measurements = [dict(m) for m in section["measurements"]]
    found = next((m for m in measurements if m["settings"] == chosen.to_dict()), None)
    if found is None:
        found = _measurement(Planned(settings=chosen), [], [])
        measurements.append(found)
    found["budgeted"] = True
    return {
        **section,
        "measurements": measurements,
        "budgeted": _budgeted_row(budgeted, peer, options),
    }


def judge_again(
    section: Mapping[str, Any], config: Path, options: GeneraliseOptions, say: Say
) -> dict[str, Any]:
    """A workload's section with the checker's final set of rounds measured now (the
    default, the choices and the grid's leaders, picked by the section's first rounds)
    and the targets judged on it; the section's searches and first rounds are kept."""
    measurements, walls = measure_final(
        config,
        section["measurements"],
        options.rounds_options(options.final_rounds),
        section["device"],
        say,
        options.leaders,
        section["cpus"],
    )
    checker = {
        **section["checker"],
        "final_rounds": options.final_rounds,
        "leaders": options.leaders,
        "final_measurements": len(walls),
        "final_wall_s": sum(walls),
    }
    judged = {**section, "measurements": measurements, "checker": checker}
    judged.update(
        assess(
            measurements,
            section["searches"],
            rounds=checker["rounds"],
            measurement_s=checker["mean_measurement_s"],
            cpus=section["cpus"],
        )
    )
    judged.update(assess_device(measurements, section["searches"], section.get("data_ceiling")))
    for verdict in judged["verdicts"]:
        say(Verdict(**verdict).line())
    if "simulated_device" in judged:
        say(Verdict(**judged["simulated_device"]["verdict"]).line())
    return judged


def _measurement(
    planned: Planned,
    rates: list[float | None],
    errors: list[str],
    devices: Sequence[Mapping[str, Any] | None] = (),
) -> dict[str, Any]:
    middle, half_range = summary(rates)
    readings = {"device_readings": list(devices)} if any(devices) else {}
    return {
        **readings,
        "settings": planned.settings.to_dict(),
        "describe": planned.settings.describe(),
        "default": planned.default,
        "seeds": list(planned.seeds),
        "grid": planned.grid,
        "peer": planned.peer,
        "budgeted": planned.budgeted,
        "rounds": rates,
        "median": middle,
        "spread": half_range,
        "errors": errors,
    }
