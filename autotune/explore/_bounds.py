"""Bounds: what the model can train at all, for each batch size, AMP mode and thread
count, measured before exploring.

The compute ceiling of a config is the model trained on batches already in
memory (probe mode "compute") with its batch size, AMP mode and threads; the
loader knobs cannot lift a config above it. Read in a few short probes per such
combination, the ceilings let the search

- skip a config whose ceiling lies below the band of the best measured so far
  (no loader setting can bring it into contention), and
- stop exploring once the best config is within the finalist band of the
  highest ceiling (no config can do much better).

Both act on a ceiling unrun configs never get a chance to contradict, so one low
reading could hide the best combination. Each combination is read in
:data:`READINGS` probe processes, one pass over every combination after another,
and its ceiling is the highest reading: noise only ever slows a reading down. A
pass is one probe process that measures its combinations in turns
(:mod:`autotune.probe._turns`): the model is built and the batches are held once, and
each combination's windows lie beside the others', so a pass costs about what two
probes of their own did. A combination read far below the highest
(:data:`OUT_OF_REACH`) is read once, unless it is that far below a neighbour too (a
combination that differs from it in one knob): one knob rarely costs that much, and
one probe process read a combination at a quarter of its neighbours'.

The ceilings are kept in the study, so a resumed search does not measure them again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import optuna

from autotune._format import format_rate
from autotune._stages import Stage
from autotune.probe import Figures, ProbeRequest, ProbeResult, run_probe
from autotune.progress import Progress
from autotune.settings import Settings
from autotune.space import Space

COMPUTE_CEILINGS = "autotune.compute_ceilings"
"""Study attribute: by :func:`compute_key`, the figures of the highest reading."""
COMPUTE_READINGS = "autotune.compute_readings"
"""Study attribute: by :func:`compute_key`, the samples/s of every reading taken."""
READINGS = 2
"""Probe processes that read each compute ceiling. One process may run the model well
below the next, however steady its own windows, and with one reading a low one rules
out every config of that combination unrun (the runs: ``docs/decisions.md``)."""
OUT_OF_REACH = 0.6
"""A combination whose first reading is below this share of the highest is not read
again, unless it is below this share of a neighbour's too: a combination slow for what
it is (more threads than pay, AMP the CPU runs slowly) is slow beside its neighbours
as well, where one low probe process stands out from them."""
MAX_COMBINATIONS = 16
"""Above this many (batch size, AMP, threads) combinations, no bounds are measured."""
NOISE_MARGIN = 0.05
"""A ceiling measured in a few short windows may read this much low."""
TURN_WINDOWS = 2
"""Windows of each combination in one pass."""
TURN_WINDOW_SHARE = 0.5
"""A pass's windows last this share of a trial's ``window_seconds``: the model on
batches held in memory steps evenly, with no loader's bursts to average over."""
TURN_WARMUP_SHARE = 0.2
"""A combination's first turn warms up this share of a trial's ``warmup_seconds``: no
workers start, only the model's first steps at a batch size and precision."""


def bounds_request(template: ProbeRequest, todo: list[Settings]) -> ProbeRequest:
    """The probe of one pass: ``todo``'s combinations in turns, the model on batches in
    memory."""
    return dataclasses.replace(
        template,
        mode="compute",
        settings=todo[0],
        turns=tuple(todo),
        max_windows=TURN_WINDOWS,
        window_seconds=template.window_seconds * TURN_WINDOW_SHARE,
        warmup_seconds=template.warmup_seconds * TURN_WARMUP_SHARE,
        steady=None,
    )


def compute_key(settings: Settings) -> str:
    """What a compute ceiling depends on: batch size, AMP mode and training threads."""
    return f"batch={settings.batch_size} amp={settings.amp} threads={settings.threads}"


def compute_configs(space: Space) -> list[Settings]:
    """One config per (batch size, AMP, threads) combination of the space, no workers."""
    return [
        Settings(batch_size=batch, amp=amp, threads=threads)  # type: ignore[arg-type]
        for batch in space.batch_size.values()
        for amp in space.amp.values()
        for threads in space.threads.values()
    ]


@dataclasses.dataclass(frozen=True)
class Bounds:
    """Compute ceilings (samples/s) by :func:`compute_key`."""

    ceilings: Mapping[str, float]
    models: Mapping[str, Settings] = dataclasses.field(default_factory=dict)
    """The config measured for each key (no workers)."""

    def ceiling(self, settings: Settings) -> float | None:
        """The compute ceiling of ``settings``'s combination, if measured."""
        return self.ceilings.get(compute_key(settings))

    @property
    def highest(self) -> float:
        """The highest ceiling of the space."""
        return max(self.ceilings.values(), default=0.0)

    def fastest_model(self) -> Settings | None:
        """The (batch size, AMP, threads) combination with the highest ceiling."""
        if not self.ceilings:
            return None
        return self.models.get(max(self.ceilings, key=lambda k: self.ceilings[k]))

    def rules_out(self, settings: Settings, best: float | None, tolerance: float) -> str | None:
        """Why ``settings`` cannot come within ``tolerance`` of ``best``; None if it might."""
        ceiling = self.ceiling(settings)
        if ceiling is None or best is None:
            return None
        if ceiling * (1 + NOISE_MARGIN) >= best * (1 - tolerance):
            return None
        return (
            f"not run: the model alone trains {format_rate(ceiling)} samples/s with "
            f"{compute_key(settings)}, below the {format_rate(best * (1 - tolerance))} a "
            "config needs to be within the tolerance of the best so far"
        )

    def saturated(self, best: float | None, tolerance: float) -> bool:
        """Whether ``best`` is within the finalist band (twice the tolerance) of the
        highest ceiling, so that no config can do much better."""
        if best is None or not self.ceilings:
            return False
        return best >= (1 - 2 * tolerance) * self.highest


@dataclasses.dataclass(frozen=True)
class BoundsLeft:
    """What :func:`measure_bounds` has still to measure: the readings (a combination's
    windows in one pass) and the passes (probe processes) they take."""

    readings: int = 0
    passes: int = 0

    def seconds(
        self,
        *,
        start_s: float,
        step_s: float,
        hold_s: float,
        warmup_seconds: float,
        window_seconds: float,
    ) -> float:
        """The time these take: each pass a probe's start and ``hold_s`` to hold its
        batches in memory, each reading a shortened warm-up and :data:`TURN_WINDOWS`
        shortened windows (as :func:`bounds_request` asks for), none shorter than a step."""
        window = max(window_seconds * TURN_WINDOW_SHARE, step_s)
        warmup = max(warmup_seconds * TURN_WARMUP_SHARE, step_s)
        return self.passes * (start_s + hold_s) + self.readings * (warmup + TURN_WINDOWS * window)


def readings_left(space: Space, study: optuna.Study | None = None) -> BoundsLeft:
    """What :func:`measure_bounds` would measure for ``space`` into ``study`` (None: a new
    one): nothing for the readings the study holds, nothing at all above
    :data:`MAX_COMBINATIONS`."""
    configs = compute_configs(space)
    if len(configs) > MAX_COMBINATIONS:
        return BoundsLeft()
    readings = _stored_readings(study, _stored_figures(study)) if study is not None else {}
    passes = [_pass(configs, readings, done) for done in range(READINGS)]
    return BoundsLeft(
        readings=sum(len(todo) for todo in passes), passes=sum(1 for todo in passes if todo)
    )


def _stored_figures(study: optuna.Study) -> dict[str, Figures]:
    """The figures of each combination's highest reading the study holds, by key."""
    stored: dict[str, Any] = dict(study.user_attrs.get(COMPUTE_CEILINGS) or {})
    return {key: Figures.from_dict(data) for key, data in stored.items()}


def _stored_readings(study: optuna.Study, figures: Mapping[str, Figures]) -> dict[str, list[float]]:
    """The samples/s of every reading the study holds, by key."""
    readings: dict[str, list[float]] = {
        key: [float(rate) for rate in rates]
        for key, rates in (study.user_attrs.get(COMPUTE_READINGS) or {}).items()
    }
    for key, found in figures.items():  # a study from before readings were counted
        readings.setdefault(key, [found.samples_per_s])
    return readings


def _out_of_reach(
    key: str, readings: Mapping[str, list[float]], neighbours: Mapping[str, list[str]]
) -> bool:
    """Whether combination ``key`` needs no further reading: it was read, its highest
    reading lies below :data:`OUT_OF_REACH` of the highest of all, and not below that
    share of any of its ``neighbours``' highest (:func:`_neighbours`)."""
    taken = readings.get(key, [])
    if not taken:
        return False
    highest = max((rate for rates in readings.values() for rate in rates), default=0.0)
    near = max(
        (rate for other in neighbours.get(key, ()) for rate in readings.get(other, ())),
        default=0.0,
    )
    return max(taken) < OUT_OF_REACH * highest and max(taken) >= OUT_OF_REACH * near


def _neighbours(configs: list[Settings]) -> dict[str, list[str]]:
    """By :func:`compute_key`, the combinations that differ from each in exactly one of
    batch size, AMP and threads."""

    def knobs(settings: Settings) -> tuple[object, ...]:
        return (settings.batch_size, settings.amp, settings.threads)

    return {
        compute_key(config): [
            compute_key(other)
            for other in configs
            if sum(a != b for a, b in zip(knobs(config), knobs(other), strict=True)) == 1
        ]
        for config in configs
    }


def _pass(
    configs: list[Settings], readings: Mapping[str, list[float]], done: int
) -> list[Settings]:
    """The combinations pass ``done`` (from 0) reads: those read no more than ``done``
    times so far."""
    return [c for c in configs if len(readings.get(compute_key(c), ())) <= done]


def measure_bounds(
    template: ProbeRequest,
    space: Space,
    study: optuna.Study,
    progress: Progress,
) -> tuple[Bounds | None, dict[str, Figures]]:
    """Measure (or read from the study) the compute ceiling of every combination:
    :data:`READINGS` passes over them, each pass one probe process that reads its
    combinations in turns; a combination's ceiling is its highest reading.

    Returns the bounds (None when the space has too many combinations) and the
    figures of each combination's highest reading by key, for the ceilings stage to
    reuse.
    """
    configs = compute_configs(space)
    if len(configs) > MAX_COMBINATIONS:
        progress.message(
            f"{len(configs)} (batch size, AMP, threads) combinations: too many to measure "
            "their compute ceilings first; exploring without bounds"
        )
        return None, {}
    figures = _stored_figures(study)
    readings = _stored_readings(study, figures)
    neighbours = _neighbours(configs)
    announced = False
    skipped: set[str] = set()
    for done in range(READINGS):
        todo = []
        for settings in _pass(configs, readings, done):
            key = compute_key(settings)
            if _out_of_reach(key, readings, neighbours):
                skipped.add(key)
            else:
                todo.append(settings)
        if not todo:
            continue
        if not announced:
            announced = True
            progress.phase(
                Stage.BOUNDS,
                f"the model alone on batches in memory, for {len(todo)} combination(s) of "
                f"batch size, AMP and threads, in turns in one process, {READINGS - done} "
                "pass(es)",
            )
            progress.plan(Stage.BOUNDS, READINGS - done, None)
        result = run_probe(bounds_request(template, todo))
        for settings, part in zip(todo, result.turns, strict=True):
            _take_reading(compute_key(settings), part, readings, figures, progress)
        # Kept after every pass: an interrupted search resumes with what it read.
        study.set_user_attr(COMPUTE_CEILINGS, {k: f.to_dict() for k, f in figures.items()})
        study.set_user_attr(COMPUTE_READINGS, readings)
    if skipped:
        progress.message(
            f"{len(skipped)} combination(s) read below {OUT_OF_REACH:.0%} of the highest "
            "ceiling, and not that far below any combination one knob away: not read again"
        )
    models = {compute_key(c): c for c in configs}
    rates = {k: f.samples_per_s for k, f in figures.items() if k in models and f.samples_per_s > 0}
    return (Bounds(rates, models) if rates else None), figures


def _take_reading(
    key: str,
    part: ProbeResult,
    readings: dict[str, list[float]],
    figures: dict[str, Figures],
    progress: Progress,
) -> None:
    """Add one combination's reading of a pass to ``readings`` and, where it is its
    highest, its figures to ``figures``; say what it read."""
    if part.failure is not None:
        progress.message(f"compute ceiling, {key}: not measured ({part.failure.message})")
        return
    taken = readings.setdefault(key, [])
    taken.append(part.figures.samples_per_s)
    best = figures.get(key)
    if best is None or part.figures.samples_per_s > best.samples_per_s:
        figures[key] = part.figures
    shown = format_rate(figures[key].samples_per_s)
    also = (
        f" (the highest of {', '.join(format_rate(rate) for rate in taken)})"
        if len(taken) > 1
        else ""
    )
    progress.message(f"compute ceiling, {key}: {shown} samples/s{also}")
