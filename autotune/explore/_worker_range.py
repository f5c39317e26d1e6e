"""Worker range: how many DataLoader workers the search may try, measured before exploring.

The default space stops at 4 workers per CPU (:func:`default_max_workers`), which
is right while loading costs CPU: past the cores, more workers only contend. A
loader that waits on something else (storage, the network, a stream that hands
out records at its own pace) gains from every worker it is given, until the model
is the bottleneck, so on few CPUs the default bound can hold it to half of what
twice the workers would give.

So before exploring, the loader alone (probe mode "data": batches fetched and
dropped) is measured at the space's upper bound. While it delivers less than the
model can train (the highest compute ceiling of the bounds stage), it is measured
again with twice the workers; the bound moves up as long as doubling the workers
raises the loader's rate by at least :data:`GAIN`. A loader bound by its CPU
stops at the first doubling, for one extra short probe.

Only a range the user did not give moves. The figures are kept in the study, so a
resumed search explores the same range without measuring it again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import optuna

from autotune._format import format_rate
from autotune._stages import Stage
from autotune.explore._bounds import Bounds
from autotune.probe import Failure, ProbeRequest, reference_windows, run_probe
from autotune.progress import Progress
from autotune.settings import Settings
from autotune.space import IntRange, Space

WORKER_RANGE = "autotune.worker_range"
"""Study attribute: the loader-alone rates by worker count and the bound they set."""
GAIN = 1.25
"""Doubling the workers must raise the loader's rate this much for the bound to follow:
more than a short data probe's noise, far less than the 2x of a loader that waits."""
MOST_WORKERS = 64
"""The sweep never goes above this many workers (each is a process with its own memory)."""
LOADER_BOUND = 0.5
"""A model config whose compute ceiling is over the loader's best by more than 1/this is
bound by the loader: the ceilings of such configs say nothing of which trains fastest."""


@dataclasses.dataclass(frozen=True)
class WorkerRange:
    """What the sweep measured and the upper bound it chose."""

    rates: Mapping[int, float]
    """The loader alone, samples/s, by worker count (a failed probe is left out)."""
    bound: int
    """The space's num_workers upper bound after the sweep."""
    ceiling: float
    """The highest compute ceiling the rates were compared with."""
    hung: Mapping[int, str] = dataclasses.field(default_factory=dict)
    """By worker count, what the loader alone timed out on ("no first batch within 60 s"):
    evidence that the workers hang (:mod:`autotune.explore._hangs`)."""

    def widened(self) -> int | None:
        """The new bound if the sweep moved it, else None."""
        start = min(self.rates, default=self.bound)
        return self.bound if self.bound > start else None

    def fastest(self) -> int | None:
        """The worker count, within the bound, at which the loader alone delivered the
        most; None when nothing was measured."""
        inside = {count: rate for count, rate in self.rates.items() if count <= self.bound}
        return max(inside, key=lambda count: inside[count]) if inside else None

    def leading_model(self, bounds: Bounds) -> Settings | None:
        """The (batch size, AMP, threads) the search starts from: the fastest compute
        ceiling's, except where the loader bounds the training.

        There the largest batch size among the model configs whose ceiling is over
        1/:data:`LOADER_BOUND` times the loader's best (with the AMP and threads of its
        highest ceiling), since their ceilings differ by the noise of a few short
        windows, and at equal speed a larger batch spends less CPU per sample on each
        step's fixed work and each batch's hand-off from a worker, CPU the workers need
        (the runs: ``docs/decisions.md``). The starts at the user's own batch size stay
        (see ``warm_starts``)."""
        fastest = bounds.fastest_model()
        if fastest is None or not self.rates:
            return fastest
        loader = max(self.rates.values())
        bound = {
            key: rate
            for key, rate in bounds.ceilings.items()
            if key in bounds.models and rate * LOADER_BOUND > loader
        }
        if not bound:
            return fastest
        largest = max(bounds.models[key].batch_size for key in bound)
        at_largest = {k: r for k, r in bound.items() if bounds.models[k].batch_size == largest}
        return bounds.models[max(at_largest, key=at_largest.__getitem__)]

    def to_dict(self) -> dict[str, object]:
        return {
            "rates": {str(n): r for n, r in self.rates.items()},
            "bound": self.bound,
            "ceiling": self.ceiling,
            "hung": {str(n): stall for n, stall in self.hung.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> WorkerRange:
        rates, hung = data["rates"], data.get("hung") or {}  # none kept before hangs were
        bound, ceiling = data["bound"], data["ceiling"]
        assert isinstance(rates, Mapping) and isinstance(hung, Mapping)
        assert isinstance(bound, int) and isinstance(ceiling, (int, float))
        return cls(
            {int(n): float(r) for n, r in rates.items()},
            bound,
            float(ceiling),
            {int(n): str(stall) for n, stall in hung.items()},
        )

    def note(self, start: int) -> str:
        """One line for the space's notes: the range and why it moved (or did not)."""
        if not self.rates:
            return f"num_workers: up to {start}: the loader alone could not be measured."
        measured = ", ".join(
            f"{format_rate(rate)} with {count}" for count, rate in sorted(self.rates.items())
        )
        model = f"{format_rate(self.ceiling)} samples/s the model trains"
        if self.bound > start:
            return (
                f"num_workers: up to {self.bound}, not {start}: the loader alone delivered "
                f"{measured} workers, short of the {model}; loading waits on something "
                "other than the CPU, so workers beyond the cores pay."
            )
        if len(self.rates) == 1:
            return (
                f"num_workers: up to {start}: the loader alone delivered {measured} "
                f"workers, enough for the {model}."
            )
        return (
            f"num_workers: up to {start}: the loader alone delivered {measured} workers; "
            "doubling them did not pay."
        )


def stall_of(failure: Failure) -> str:
    """What a timed-out probe waited for, from its failure: "no first batch within 60 s"."""
    return failure.message.partition(":")[0]


def sweep(start: int, ceiling: float, rate_of: Callable[[int], float | None]) -> WorkerRange:
    """Double the workers from ``start`` while the loader alone stays below ``ceiling``
    and doubling raises its rate by :data:`GAIN`; ``rate_of(n)`` measures n workers
    (None: the probe failed, and the sweep stops there)."""
    rates: dict[int, float] = {}
    first = rate_of(start)
    if first is None:
        return WorkerRange(rates, start, ceiling)
    rates[start] = first
    bound = start
    while rates[bound] < ceiling and bound * 2 <= MOST_WORKERS:
        more = rate_of(bound * 2)
        if more is None:
            break
        rates[bound * 2] = more
        if more < rates[bound] * GAIN:
            break
        bound *= 2
    return WorkerRange(rates, bound, ceiling)


def sweepable(space: Space, user_space: Mapping[str, object], bounds: Bounds | None) -> bool:
    """Whether the worker range is the default one and there is a ceiling to compare with."""
    return (
        "num_workers" not in user_space
        and isinstance(space.num_workers, IntRange)
        and bounds is not None
        and bounds.highest > 0
    )


SWEEP_PROBES = 2
"""The probes a sweep usually runs: the bound, then twice the workers, which did not pay
or stopped below the model."""


def sweep_left(
    space: Space, user_space: Mapping[str, object], study: optuna.Study | None = None
) -> int:
    """About the probes :func:`measure_worker_range` will run into ``study`` (None: a new
    one), before the bounds it needs are known: none when the user fixed the range or
    the study holds the sweep."""
    if "num_workers" in user_space or not isinstance(space.num_workers, IntRange):
        return 0
    stored = study is not None and study.user_attrs.get(WORKER_RANGE)
    return 0 if stored else SWEEP_PROBES


def measure_worker_range(
    template: ProbeRequest,
    space: Space,
    bounds: Bounds,
    study: optuna.Study,
    progress: Progress,
) -> tuple[Space, WorkerRange]:
    """Sweep the loader alone (or read the sweep from the study) and return the space
    with its num_workers range widened where the loader waits, and the sweep."""
    assert isinstance(space.num_workers, IntRange)
    start = space.num_workers.high
    stored = study.user_attrs.get(WORKER_RANGE)
    if stored:
        found = WorkerRange.from_dict(stored)
    else:
        batch_size = (bounds.fastest_model() or template.settings).batch_size
        short = dataclasses.replace(
            template, mode="data", max_windows=reference_windows(template.max_windows)
        )
        # Workers as the space's configs run them: the smallest cap it holds, if any.
        caps = [v for v in space.worker_threads.values() if isinstance(v, int)]
        capped = min(caps) if caps else None
        hung: dict[int, str] = {}
        progress.phase(
            Stage.WORKERS,
            f"the loader alone with {start} workers and more, while it is below what the "
            "model trains",
        )

        def rate_of(count: int) -> float | None:
            settings = Settings(
                batch_size=batch_size,
                num_workers=count,
                prefetch_factor=2,
                persistent_workers=True,
                worker_threads=capped,
            )
            result = run_probe(dataclasses.replace(short, settings=settings))
            if result.failure is not None:
                progress.message(
                    f"loader alone, {count} workers: not measured ({result.failure.message})"
                )
                if result.failure.kind == "timeout":
                    hung[count] = stall_of(result.failure)
                return None
            rate = result.figures.samples_per_s
            progress.message(f"loader alone, {count} workers: {format_rate(rate)} samples/s")
            return rate

        found = dataclasses.replace(sweep(start, bounds.highest, rate_of), hung=hung)
        study.set_user_attr(WORKER_RANGE, found.to_dict())
    widened = dataclasses.replace(
        space,
        num_workers=IntRange(space.num_workers.low, max(start, found.bound)),
        notes=(*space.notes, found.note(start)),
    )
    return widened, found
