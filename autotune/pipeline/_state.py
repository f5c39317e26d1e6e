"""What the stages of one search hand on to each other: one record, made before the
first stage and filled in by each stage in turn (:mod:`autotune.pipeline._stages`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

import optuna

from autotune.decide import Ceilings, Confirmed
from autotune.explore import Backend, Bounds, ExplorePlan, WorkerRange
from autotune.machine import Machine
from autotune.pipeline._budget import Deadline
from autotune.pipeline._setup import Setup
from autotune.probe import Measurement, Placement, ProbeRequest
from autotune.progress import StageClock
from autotune.result import DdpResult, SearchResult
from autotune.settings import Settings
from autotune.space import Space
from autotune.study import StudyLocation
from autotune.workload import SearchOptions, Workload


@dataclasses.dataclass(kw_only=True)
class SearchState:
    """One search under way. The fields before ``info`` are known before any stage
    runs; each later one is set by the stage its comment names, and read only by the
    stages after it."""

    workload: Workload
    user_space: Mapping[str, Any]
    options: SearchOptions
    """The options in force: the user's, then as the budget plans them stage by stage."""
    setup: Setup
    runner: Backend
    progress: StageClock
    started: float
    """When the search was called (``time.monotonic``): a budget counts from it."""
    study: optuna.Study
    meta: dict[str, Any]
    """The study's record of its workload and machine, as it was before this search."""
    template: ProbeRequest
    """The probe every trial starts from, on every rank."""
    single: ProbeRequest
    """The template on one rank's share of the node."""
    space: Space

    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    """What the preflight learned of the workload (PREFLIGHT)."""
    deadline: Deadline | None = None
    """The budget in force (PREFLIGHT)."""
    bounds: Bounds | None = None
    """The compute ceilings by batch size, AMP and threads (BOUNDS; None: not measured)."""
    compute_figures: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The bounds' figures the ceilings stage reuses (BOUNDS)."""
    worker_range: WorkerRange | None = None
    """The worker counts worth sampling (WORKERS; None: not swept)."""
    plan: ExplorePlan | None = None
    """What exploring and confirming run on (RECHECK, which measures with it first)."""
    confirmed: Confirmed | None = None
    """The finalists' rounds and the winner (EARLY or CONFIRM)."""
    winner: Measurement | None = None
    """The chosen config (CONFIRM, then DDP where it chooses another)."""
    ddp: DdpResult | None = None
    """The DDP stage's figures (DDP; None with one rank)."""
    ceilings: Ceilings | None = None
    """The winner's and the default's ceilings (CEILINGS)."""
    result: SearchResult | None = None
    """The answer; a stage that sets it ends the search (RECHECK, DONE)."""

    @property
    def where(self) -> StudyLocation:
        return self.setup.study

    @property
    def machine(self) -> Machine:
        return self.setup.machine

    @property
    def placement(self) -> Placement:
        return self.setup.placement

    @property
    def baseline(self) -> Settings:
        """The default loader at the user's batch size: what every answer is measured
        against."""
        return Settings(batch_size=self.workload.batch_size)

    def budget(self) -> Deadline:
        """The deadline the preflight set."""
        return _known(self.deadline, "deadline", "PREFLIGHT")

    def exploring(self) -> ExplorePlan:
        """The plan the RECHECK stage made."""
        return _known(self.plan, "plan", "RECHECK")

    def chosen(self) -> tuple[Confirmed, Measurement]:
        """The confirmation and the winner that EARLY or CONFIRM set."""
        confirmed = _known(self.confirmed, "confirmation", "CONFIRM")
        return confirmed, _known(self.winner, "winner", "CONFIRM")


_T = TypeVar("_T")


def _known(value: _T | None, what: str, stage: str) -> _T:
    """``value``, which the stage ``stage`` sets before any stage that reads it runs."""
    if value is None:
        raise RuntimeError(f"the search's {what} is read before the {stage} stage set it")
    return value
