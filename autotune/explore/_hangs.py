"""Hangs in DataLoader workers: the region of the space that must hang the same way.

A probe silent for the stall timeout is killed and recorded as a timeout, and a
timeout alone says little: one slow start-up, on a loaded machine, times out too.
But once :data:`HUNG_CONFIGS` distinct configs with workers have timed out and no
config with as many workers (the fewest of theirs) or more has delivered a batch,
the loader's workers hang (a dataset or collate_fn that blocks in a forked
process, a worker start-up slower than the timeout): every such config would
wait out the timeout again, for nothing. They are ruled out, the search goes on
with fewer workers, and when the space holds no config with fewer, it ends.

The loader alone timing out with workers before exploring (the worker sweep) counts
as one such config. The evidence is read from the study, so a resumed search, and
the confirming rounds after exploration, rule out the same region.
"""

from __future__ import annotations

import dataclasses

import optuna

from autotune.explore._worker_range import WORKER_RANGE, WorkerRange, stall_of
from autotune.probe import Failure
from autotune.settings import Settings
from autotune.space import Choices, Domain, Fixed, IntRange, Space
from autotune.study import TrialRecord

HUNG_CONFIGS = 2
"""Distinct configs with workers that must time out before their region is ruled out:
one may only have started slowly."""
_FINISHED = ("COMPLETE", "PRUNED")


@dataclasses.dataclass(frozen=True)
class WorkerHang:
    """Configs with ``workers`` or more DataLoader workers hang: what showed it."""

    workers: int
    """The fewest workers among the configs that hung."""
    trials: tuple[int, ...]
    """The numbers of the trials that hung, one per config, oldest first."""
    stall: str
    """What the first of them timed out on ("no first batch within 60 s")."""
    loader_alone: tuple[int, ...] = ()
    """The worker counts at which the loader alone hung, before exploring (the sweep of
    :mod:`autotune.explore._worker_range`)."""

    def covers(self, settings: Settings) -> bool:
        """Whether ``settings`` has workers enough to hang the same way."""
        return settings.num_workers >= self.workers

    def region(self, space: Space) -> str:
        """The configs of ``space`` ruled out, in words."""
        if self.workers <= min((w for w in _workers(space.num_workers) if w > 0), default=0):
            return "configs with workers"
        return f"configs with {self.workers} or more workers"

    def evidence(self) -> str:
        """Which probes hung, and how."""
        probes = [f"the loader alone with {n} worker{'s' * (n > 1)}" for n in self.loader_alone]
        if self.trials:
            trials = "trial" if len(self.trials) == 1 else "trials"
            probes.append(f"{trials} {_listed([f'#{n}' for n in self.trials])}")
        return f"{_listed(probes)} hung in DataLoader workers ({self.stall})"

    def ruling(self, space: Space) -> str:
        """The line a search of ``space`` shows when it rules the region out and goes on."""
        narrowed = self.narrow(space)
        most = max(_workers(narrowed.num_workers), default=0) if narrowed else 0
        rest = "without workers" if most == 0 else f"with at most {most} worker{'s' * (most > 1)}"
        return (
            f"{self.evidence()} and no config with as many workers delivered a batch: "
            f"{self.region(space)} would hang the same way, so the search goes on {rest}"
        )

    def blocks(self, settings: Settings) -> Failure | None:
        """Why ``settings`` is not run (it has workers enough to hang); None if it may."""
        if not self.covers(settings):
            return None
        return Failure(kind="infeasible", message=f"not run: {self.evidence()}")

    def nothing_left(self) -> Failure:
        """The failure a search ends with when every config of its space would hang."""
        return Failure(
            kind="timeout",
            message=(
                f"{self.evidence()}, and so would every config of the space: let it try "
                "fewer workers (space['num_workers']), or find what blocks in a worker (a "
                "lock, a connection or a thread pool made before the fork)"
            ),
        )

    def narrow(self, space: Space) -> Space | None:
        """``space`` without the configs that hang; None when none is left."""
        domain = _fewer(space.num_workers, self.workers)
        return None if domain is None else dataclasses.replace(space, num_workers=domain)


def _listed(items: list[str]) -> str:
    """The items as one phrase: a; a and b; a, b and c."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}"


def _workers(domain: Domain) -> list[int]:
    """The worker counts of a num_workers ``domain``."""
    return [v for v in domain.values() if isinstance(v, int)]


def _fewer(domain: Domain, workers: int) -> Domain | None:
    """``domain`` of num_workers below ``workers``; None when no value is."""
    below = [v for v in _workers(domain) if v < workers]
    if not below:
        return None
    if len(below) == 1:
        return Fixed(below[0])
    if isinstance(domain, IntRange):
        return IntRange(domain.low, max(below))
    return Choices(tuple(below))


class HangWatch:
    """The configs with workers that hung and those that delivered a batch, probe by probe."""

    def __init__(self) -> None:
        self._hung: dict[str, tuple[int, int, str]] = {}
        """By config: the first trial that timed out (-1: the loader alone, before every
        trial), its workers, and on what."""
        self._delivered: list[int] = []
        """The workers of every config that finished a probe (complete or pruned)."""
        self.found: WorkerHang | None = None
        """The region ruled out so far; None while nothing proves a hang."""

    @classmethod
    def from_study(cls, study: optuna.Study) -> HangWatch:
        """The watch as a study's worker sweep and trials left it (a resumed search's, or
        exploration's for the confirming rounds)."""
        watch = cls()
        stored = study.user_attrs.get(WORKER_RANGE)
        if stored:
            found = WorkerRange.from_dict(stored)
            watch._delivered.extend(found.rates)
            for workers, stall in found.hung.items():
                watch._hung[f"loader alone, {workers} workers"] = (-1, workers, stall)
        for trial in study.get_trials(deepcopy=False):
            watch.observe(TrialRecord.from_trial(trial))
        return watch

    def observe(self, record: TrialRecord) -> WorkerHang | None:
        """Count a finished trial; the region it newly proves to hang, else None."""
        settings = record.settings
        if settings is None or not record.probed:
            return None
        if record.state in _FINISHED:
            self._delivered.append(settings.num_workers)
        elif (
            record.failure is not None
            and record.failure.kind == "timeout"
            and settings.num_workers > 0
            and settings.key() not in self._hung
        ):
            stall = stall_of(record.failure)
            self._hung[settings.key()] = (record.number, settings.num_workers, stall)
        before, self.found = self.found, self._ruling()
        return self.found if self.found is not None and self.found != before else None

    def _ruling(self) -> WorkerHang | None:
        if len(self._hung) < HUNG_CONFIGS:
            return None
        workers = min(w for _, w, _ in self._hung.values())
        if any(delivered >= workers for delivered in self._delivered):
            return None
        hung = sorted(self._hung.values())
        return WorkerHang(
            workers=workers,
            trials=tuple(n for n, _, _ in hung if n >= 0),
            stall=hung[0][2],
            loader_alone=tuple(sorted(w for n, w, _ in hung if n < 0)),
        )


def worker_hang(study: optuna.Study) -> WorkerHang | None:
    """The configs of ``study`` ruled out as hanging in their workers; None if none are."""
    return HangWatch.from_study(study).found
