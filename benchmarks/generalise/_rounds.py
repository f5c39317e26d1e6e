"""The checker's rounds for the generalisation benchmark: the first set over every
planned config, then the final set over the configs the verdicts compare.

Why two sets. The first set measures every grid point once a round, and a round of 44-88
configs lasts minutes. On 2 shared CPUs the machine's speed moves by 10-50% over such
spans (docs/benchmark-history.md, "A final set of rounds for the judge"). A median taken
per config mixes those states, and the grid's best point is the highest of many noisy
medians, so it sits above what that loader measures again (the winner's curse). The
first set only picks the leaders: the few grid points with the highest medians. The
final set measures them again, beside the default loader and each search's choice, in
rounds of their own a minute long, and every verdict is a ratio taken within one round
(:mod:`benchmarks.generalise._targets`): the leaders were picked on other measurements
than the ones that grade them. The final set also measures the grid point that is the
default under another name (:func:`default_twin`): the same config twice, whose ratio
says how far apart the checker reads two loaders that train alike.

Nothing here imports the probe, the exploration or the decision.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune import Settings
from benchmarks.common._checker import CheckerError, measure, median, round_order, spread

Say = Callable[[str], None]

FINAL_ROUNDS = 15
"""Rounds of the final set. On 2 shared CPUs a round's ratio strays by 10-15% (the
default over its twin, ``tools/checker_resolution.py``), and a median narrows only by
the square root of the rounds: 15 are 5's spread over 1.7. Measurements forked from the
zygote, a third of a new interpreter's cost, pay for them: 7 configs in 15 rounds take
about as long as in 5 rounds of new interpreters."""
LEADERS = 3
"""Grid points the first set passes on to the final set."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RoundsOptions:
    """How the checker measures one config, and how many rounds."""

    rounds: int
    seconds: float = 1.5
    """Timed part of one plain-loop measurement."""
    warmup: float = 0.5
    plain_seed: int = 0
    """Seeds the plain loop's data order."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Measured:
    """The checker's rounds of every config, and what each measurement cost."""

    rates: list[list[float | None]]
    """``rates[config][round]``; None where the measurement failed."""
    errors: list[list[str]]
    walls: list[float]
    """Wall seconds of every measurement, failed ones included."""
    devices: list[list[dict[str, Any] | None]] = dataclasses.field(default_factory=list)
    """``devices[config][round]``: the simulated device's reading (busy time, utilisation,
    ceiling); None off a simulated device or where the measurement failed."""


def summary(rates: Sequence[float | None]) -> tuple[float, float]:
    """The median and the spread of a config's rounds, failed rounds left out."""
    figures = [r for r in rates if r is not None]
    return median(figures), spread(figures)


def measure_rounds(
    config: Path,
    settings_list: Sequence[Settings],
    options: RoundsOptions,
    device: str,
    say: Say,
    label: str = "plain loop",
) -> Measured:
    """Interleaved rounds (A B C, C B A, ...), as ``measure_interleaved`` runs them,
    keeping a failed measurement as a gap instead of ending the set, and timing each
    measurement (for the cost of measuring a whole space)."""
    rates: list[list[float | None]] = [[] for _ in settings_list]
    errors: list[list[str]] = [[] for _ in settings_list]
    devices: list[list[dict[str, Any] | None]] = [[] for _ in settings_list]
    walls: list[float] = []
    total = len(settings_list) * options.rounds
    for round_number in range(1, options.rounds + 1):
        for index in round_order(len(settings_list), round_number):
            settings = settings_list[index]
            began = time.perf_counter()
            readings: list[dict[str, Any]] = []
            try:
                rate: float | None = measure(
                    config,
                    settings,
                    seconds=options.seconds,
                    warmup=options.warmup,
                    device=device,
                    seed=options.plain_seed,
                    readings=readings,
                )
                figure = f"{rate:,.0f}/s"
                reading = readings[0] if readings else None
                if reading:
                    figure += f", device busy {reading['utilisation']:.0%}"
            except CheckerError as error:
                rate, figure, reading = None, f"FAILED: {error}", None
                errors[index].append(f"round {round_number}: {error}")
            walls.append(time.perf_counter() - began)
            rates[index].append(rate)
            devices[index].append(reading)
            count = f"{label} {len(walls)}/{total}, round {round_number}"
            say(f"{count}: {settings.describe()}: {figure}")
    return Measured(rates=rates, errors=errors, walls=walls, devices=devices)


def default_twin(measurements: Sequence[Mapping[str, Any]], cpus: int) -> int | None:
    """The grid point that is the default loader under another name, by index: its
    settings with the training threads torch takes when nobody sets them, one per CPU
    (the default leaves them unset, the grid names them). None when the grid has no such
    point (a default with workers: the grid caps their native threads, the default does
    not).

    The two are the same config, measured as two, so their ratio within a round is the
    checker set against itself: how far apart it reads two loaders that train alike.
    Where torch takes fewer threads than CPUs (one per physical core on some machines)
    the twin is a config with more threads, not the default; this 2-CPU machine's torch
    takes 2.
    """
    default = next((m for m in measurements if m["default"]), None)
    if default is None or default["settings"].get("threads") is not None:
        return None
    wanted = {**default["settings"], "threads": cpus}
    return next(
        (i for i, m in enumerate(measurements) if m["grid"] and m["settings"] == wanted), None
    )


def finalists(
    measurements: Sequence[Mapping[str, Any]], leaders: int = LEADERS, cpus: int | None = None
) -> list[int]:
    """Which measurements the final set takes again, by index: the default loader, every
    search's choice, the peer's and the choice at its time (where they were measured), the
    ``leaders`` grid points with
    the highest first-set medians (a point that is also the default or a choice counts
    among the leaders) and, given the ``cpus``, the default's twin in the grid
    (:func:`default_twin`)."""
    grid = sorted(
        (i for i, m in enumerate(measurements) if m["grid"]),
        key=lambda i: -measurements[i]["median"],
    )
    chosen = {
        i
        for i, m in enumerate(measurements)
        if m["default"] or m["seeds"] or m.get("peer") or m.get("budgeted")
    }
    twin = default_twin(measurements, cpus) if cpus is not None else None
    return sorted(chosen | set(grid[:leaders]) | ({twin} if twin is not None else set()))


def measure_final(
    config: Path,
    measurements: Sequence[Mapping[str, Any]],
    options: RoundsOptions,
    device: str,
    say: Say,
    leaders: int = LEADERS,
    cpus: int | None = None,
) -> tuple[list[dict[str, Any]], list[float]]:
    """The final set: the finalists (:func:`finalists`) measured again in
    ``options.rounds`` interleaved rounds of their own. Returns the measurements, the
    finalists with ``final`` (their rounds, None where one failed), ``final_median``,
    ``final_spread`` and ``final_errors`` added, and the wall seconds of each
    measurement of the set."""
    picked = finalists(measurements, leaders, cpus)
    has_twin = cpus is not None and default_twin(measurements, cpus) is not None
    twin = " and the default's twin" if has_twin else ""
    peer = ", the peer's" if any(m.get("peer") for m in measurements) else ""
    say(
        f"final rounds: {len(picked)} configs (the default, the choices{peer}, the {leaders} "
        f"leading grid points{twin}), {options.rounds} interleaved rounds"
    )
    measured = measure_rounds(
        config,
        [Settings.from_dict(measurements[i]["settings"]) for i in picked],
        options,
        device,
        say,
        label="final rounds",
    )
    updated = [dict(m) for m in measurements]
    for index, rates, errors, devices in zip(
        picked, measured.rates, measured.errors, measured.devices, strict=True
    ):
        middle, half_range = summary(rates)
        updated[index].update(
            final=rates, final_median=middle, final_spread=half_range, final_errors=errors
        )
        if any(devices):
            updated[index]["final_device_readings"] = devices
    return updated, measured.walls
