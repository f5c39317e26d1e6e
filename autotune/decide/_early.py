"""An early answer: when the default loader already trains within the tolerance of the
highest compute ceiling of the space, no setting can beat it by more than the tolerance
(a ceiling is the model alone on batches in memory, which no loader outruns), so the
search measures the default loader in two rounds and keeps it, in seconds rather than
minutes.

Two checks cost nothing and come first, since most workloads fail them: the default's
own combination (batch size, AMP, threads) must have a ceiling within the tolerance of
the highest, and the preflight's first batch must have loaded fast enough for the
default to come near it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from autotune._format import format_rate
from autotune._noise import pooled_log_spread
from autotune._stages import Stage
from autotune.decide._confirm import Confirmed, measure_rounds
from autotune.explore import Backend, Bounds, ExplorePlan
from autotune.progress import Progress
from autotune.settings import Settings

ROUNDS = 2
"""Rounds the default loader is measured in: two give its figure a spread."""


def near_ceiling(
    runner: Backend,
    plan: ExplorePlan,
    baseline: Settings,
    info: Mapping[str, Any],
    progress: Progress,
) -> Confirmed | None:
    """The default loader, confirmed as the answer, when it trains within the tolerance
    of the highest compute ceiling of ``plan``'s bounds; None when the bounds or the
    preflight (``info``) say it cannot, or its rounds read it below that.

    Args:
        info: what the preflight learned of the workload: its first batch's loading time
            and samples, and the threads torch trains with by default.
    """
    bounds = plan.bounds
    tolerance = plan.options.tolerance
    if bounds is None or not bounds.ceilings:
        return None
    need = (1 - tolerance) * bounds.highest
    own = _own_ceiling(bounds, baseline, info.get("torch_threads"))
    loading = _first_batch_rate(info)
    if own is None or own < need or loading is None or loading < need:
        return None
    progress.phase(
        Stage.EARLY,
        f"the default loader's model alone trains within {tolerance:.0%} of the fastest "
        f"combination's {format_rate(bounds.highest)} samples/s: measuring the default "
        f"loader in {ROUNDS} rounds",
    )
    progress.plan(Stage.EARLY, ROUNDS, None)
    _, default = measure_rounds(runner, plan, [baseline], baseline, ROUNDS)
    if not default.complete:
        progress.message("the default loader failed a round: searching as usual")
        return None
    if default.median < need:
        progress.message(
            f"the default loader trains {format_rate(default.median)} samples/s, below the "
            f"{format_rate(need)} that would leave no setting room to beat it: searching"
        )
        return None
    progress.message(
        f"the default loader trains {format_rate(default.median)} samples/s, within "
        f"{tolerance:.0%} of the highest compute ceiling: no loader setting can speed it "
        "up beyond the tolerance, so it is the answer"
    )
    typical = default.typical()
    return Confirmed(
        winner=typical,
        finalists=(),
        baseline=typical,
        confirmed=True,
        rounds=ROUNDS,
        rates=default.rates,
        rates_spread=pooled_log_spread([default.rates]),
        is_default=True,
        at_ceiling=bounds.highest,
    )


def _own_ceiling(bounds: Bounds, baseline: Settings, threads: int | None) -> float | None:
    """The compute ceiling of the default loader's combination: its threads unset, or
    the ones torch trains with by default; where the space measured neither (its thread
    counts fitted to a step that hardly uses the CPU), the highest of its batch size and
    AMP at any thread count."""
    own = bounds.ceiling(baseline)
    if own is None and threads is not None:
        own = bounds.ceiling(dataclasses.replace(baseline, threads=threads))
    if own is None:
        alike = [
            bounds.ceilings[key]
            for key, model in bounds.models.items()
            if key in bounds.ceilings
            and model.batch_size == baseline.batch_size
            and model.amp == baseline.amp
        ]
        own = max(alike, default=None)
    return own


def _first_batch_rate(info: Mapping[str, Any]) -> float | None:
    """samples/s at which the preflight loaded its first batch in the training process:
    the default loader trains no faster than it loads."""
    seconds, samples = info.get("first_batch_s"), info.get("batch_samples")
    if not isinstance(seconds, int | float) or not isinstance(samples, int) or seconds <= 0:
        return None
    return samples / seconds
