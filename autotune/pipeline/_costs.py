"""What a search's stages cost in time: a probe's seconds from the probe settings (its
start, its warm-up, its windows), times the probes each stage runs. The dry run's
estimate and a time budget's plan both read it, so that the two cannot disagree."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from autotune._stages import Stage
from autotune.decide import RUNOFF, most_finalists, most_in_runoff, planned_probes, round_length
from autotune.explore import (
    PASSES,
    BoundsLeft,
)
from autotune.probe import reference_windows, rewarm_seconds
from autotune.workload import SearchOptions

PROBE_START_S = 1.0
"""About what a probe costs before its first batch, when no preflight has measured it:
its process, the workload built, the first batches."""
HOLD_S = 1.0
"""About what a pass of the bounds takes to load the batches it holds in memory."""
CEILING_PROBES = 5
"""Compute and data ceilings of the winner and the default, and the loader limit."""


@dataclasses.dataclass(frozen=True)
class ProbeCost:
    """Seconds of one probe: before its first batch, its warm-up, and one window."""

    start_s: float
    warmup_s: float
    window_s: float
    step_s: float = 0.0
    """One training step: the least a warm-up or a window lasts."""
    loader_start_s: float = 0.0
    """A config's loader, from its start to its first batch (its workers started): a
    probe in turns starts one for each of its configs, where ``start_s`` counts one."""

    @classmethod
    def of(
        cls, options: SearchOptions, *, start_s: float = PROBE_START_S, step_s: float = 0.0
    ) -> ProbeCost:
        """The probe of ``options``, with ``start_s`` before its first batch and training
        steps of ``step_s``: a window and the warm-up end on a whole step, so a step
        longer than either sets its length."""
        return cls(
            start_s=start_s,
            warmup_s=max(options.warmup_seconds, step_s),
            window_s=max(options.window_seconds, step_s),
            step_s=step_s,
        )

    def seconds(self, windows: float) -> float:
        """A probe of ``windows`` windows, start and warm-up included."""
        return self.start_s + self.warmup_s + windows * self.window_s

    def turns(self, configs: int, passes: int = PASSES) -> float:
        """A probe that measures ``configs`` configs in turns for ``passes`` passes: one
        start, the loader of each config after the first, each config's warm-up and
        window in the first pass, a shorter warm-up again and a window in each later one."""
        later = max(rewarm_seconds(self.warmup_s), self.step_s) + self.window_s
        each = self.warmup_s + self.window_s + (passes - 1) * later
        return self.start_s + max(0, configs - 1) * self.loader_start_s + configs * each

    def bounds(self, left: BoundsLeft, options: SearchOptions) -> float:
        """The bounds' passes still to measure (:meth:`BoundsLeft.seconds`), at this probe
        start and step."""
        return left.seconds(
            start_s=self.start_s,
            step_s=self.step_s,
            hold_s=HOLD_S,
            warmup_seconds=options.warmup_seconds,
            window_seconds=options.window_seconds,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchShape:
    """What the stages' sizes depend on besides the options: the probes the bounds and
    the worker sweep still need (with bounds on), the slots that run trials side by side,
    and with several ranks the preflight's figures the DDP stage's size reads."""

    bounds: BoundsLeft = dataclasses.field(default_factory=BoundsLeft)
    sweep_probes: int = 0
    slots: int = 1
    in_turns: bool = True
    """Confirming rounds measure their configs in turns in one process each (trials run
    one at a time, on the embedded backend)."""
    ddp_info: Mapping[str, Any] | None = None
    """The preflight's figures with several ranks; None: one rank, no DDP stage."""
    batches: bool = False
    """The space samples the batch size: the DDP stage also runs a larger batch."""
    round_configs: int | None = None
    """A confirming round's configs, the default loader's included, once the finalists
    are known; None: estimated from the ``finalists`` option."""
    done: frozenset[Stage] = frozenset()
    """Stages that have run: they cost nothing more."""


def trial_windows(options: SearchOptions) -> float:
    """The windows an explored trial runs on average where ASHA prunes: every trial runs
    to the second rung (the first trials are judged only from there, and a rung holding
    few figures promotes most of them), and each rung after keeps
    1/``reduction_factor`` of those that reached the one before."""
    factor, last = options.reduction_factor, options.max_windows
    reached = min(options.min_windows * factor, last)
    windows, share, rung = float(reached), 1.0, reached
    while reached < last:
        share /= factor
        rung *= factor
        windows += share * (min(rung, last) - reached)
        reached = min(rung, last)
    return windows


def stage_seconds(
    shape: SearchShape, options: SearchOptions, cost: ProbeCost, *, at_most: bool = False
) -> dict[Stage, float]:
    """Seconds of each stage after the preflight (:data:`~autotune._stages.PLANNED`).

    ``at_most``: every trial run in full and the widest confirming round, the most the
    search should take (the dry run's figure); otherwise what pruning and the usual
    finalists make of it, which a budget plans with. The runoff counts in full either
    way, though it runs only when the rounds leave a close race.
    """
    full = cost.seconds(options.max_windows)
    short = cost.seconds(reference_windows(options.max_windows))
    slots = max(1, shape.slots)
    windows = options.max_windows if at_most else trial_windows(options)
    explore = options.trials * cost.seconds(windows) / slots
    if options.timeout is not None:
        explore = min(explore, options.timeout + full)
    if shape.round_configs is not None:
        configs = shape.round_configs - 1
    elif at_most:
        configs = most_finalists(options.finalists)
    else:  # the finalists and the fastest config measured in full, beside the default
        configs = options.finalists + 1
    if shape.in_turns and slots == 1:
        confirm = cost.turns(configs + 1) * options.rounds
        runoff = cost.turns(RUNOFF + 1) * options.runoff_rounds
    else:
        confirm = round_length(configs) * options.rounds * full / slots
        runoff = most_in_runoff() * options.runoff_rounds * full / slots
    ddp = 0
    if shape.ddp_info is not None:
        ddp = planned_probes(
            dict(shape.ddp_info), options, options.finalists, batches=shape.batches
        )
    seconds = {
        Stage.BOUNDS: cost.bounds(shape.bounds, options) if options.bounds else 0.0,
        Stage.WORKERS: shape.sweep_probes * short if options.bounds else 0.0,
        Stage.EXPLORE: explore,
        Stage.CONFIRM: confirm,
        Stage.RUNOFF: runoff,
        Stage.DDP: ddp * full,
        Stage.CEILINGS: CEILING_PROBES * short if options.ceilings else 0.0,
    }
    return {stage: 0.0 if stage in shape.done else s for stage, s in seconds.items()}
