"""A study's earlier answer measured again before a new search spends anything.

A second search of a workload on the machine that measured its study first re-measures
the earlier choice beside the default loader, in one interleaved round (D C D). Where the
choice still beats the default beyond the noise, and by no less than the earlier rounds
predicted (the low end of their 95% prediction interval), the earlier answer holds: the
search ends there, its rounds extended by the new one. Otherwise the search goes on from
that study's trials, as a resumed one does. Where the earlier answer was the default
loader, its fastest finalist is measured instead, and the answer holds while that
finalist still does not beat the default beyond the noise.

One round, not the search's ``rounds``: the earlier rounds already measured the spread,
and the question is only whether the machine still gives what they measured.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import optuna

from autotune._stages import Stage
from autotune.decide._confirm import measure_rounds, round_order
from autotune.explore import Backend, ExplorePlan
from autotune.probe import Measurement
from autotune.progress import Progress
from autotune.result import SearchResult
from autotune.settings import Settings
from autotune.study import Attr, read_meta

ROUNDS = 1
"""Interleaved rounds of the recheck: the default loader, the earlier choice, the default."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Recheck:
    """What re-measuring a study's earlier answer found."""

    reason: str
    """One line that says what was measured against what was expected."""
    result: SearchResult | None = None
    """Where the earlier answer holds: the earlier result with the new round added to its
    rounds; None where it no longer does."""

    @property
    def held(self) -> bool:
        """Whether the earlier answer still holds."""
        return self.result is not None


def earlier_answer(study: optuna.Study) -> SearchResult | None:
    """The result the last finished search of ``study`` saved when its choice was confirmed
    in rounds beside the default loader; None otherwise (no search finished, or its choice
    came from exploration figures alone)."""
    saved = study.user_attrs.get(Attr.RESULT)
    if not saved:
        return None
    result = SearchResult.from_dict(saved)
    if not result.space:  # saved before results carried their space: the study's
        result = dataclasses.replace(result, space=dict(read_meta(study).get("space") or {}))
    if not result.confirmed or result.baseline is None or result.ddp is not None:
        return None
    return result


def earlier_finalists(result: SearchResult) -> tuple[Settings, ...]:
    """The chosen config and the finalists of ``result``, fastest first, each once."""
    ordered = [result.settings]
    ordered += [m.settings for m in sorted(result.finalists, key=lambda m: -m.samples_per_s)]
    return tuple({s.key(): s for s in ordered}.values())


def recheck(
    runner: Backend,
    plan: ExplorePlan,
    earlier: SearchResult,
    baseline: Settings,
    progress: Progress,
    *,
    later: int = 0,
) -> Recheck | None:
    """Measure ``earlier``'s choice (or, where that was the default loader, its fastest
    finalist) beside the default loader ``baseline`` in :data:`ROUNDS` round, and tell
    whether the earlier answer holds.

    Returns:
        None when there is nothing to re-measure in the current space (no finalist beside
        the default, or the space no longer holds the earlier choice).
    """
    if _knobs(earlier.space) != _knobs(plan.space.to_dict()):
        return Recheck(reason="it was chosen in another space than this search's")
    contender = _contender(earlier, baseline)
    if contender is None or contender == baseline or not plan.space.contains(contender):
        return None
    order = round_order(runner, plan, [contender], baseline)
    progress.phase(
        Stage.RECHECK,
        f"this study's earlier answer ({earlier.settings.describe()}): its "
        f"{'fastest finalist' if earlier.is_default else 'choice'} measured again beside "
        "the default loader, in one interleaved round",
    )
    progress.plan(Stage.RECHECK, len(order) * ROUNDS, None, later=later)
    (rounds,), default = measure_rounds(runner, plan, order, baseline, ROUNDS)
    if not rounds.complete or not default.complete or not rounds.speedups:
        return Recheck(
            reason=f"{contender.describe()} or the default loader failed to measure again"
        )
    speedup = rounds.speedups[0]
    holds, reason = _judge(earlier, contender, speedup)
    if not holds:
        return Recheck(reason=reason)
    return Recheck(
        reason=reason,
        result=_extended(earlier, rounds.typical(), default.typical(), speedup),
    )


def _contender(earlier: SearchResult, baseline: Settings) -> Settings | None:
    """What to measure again: ``earlier``'s choice, or its fastest finalist other than
    ``baseline`` where it chose the default loader (None where it has none)."""
    if earlier.is_default:
        others = [s for s in earlier_finalists(earlier) if s != baseline]
        return others[0] if others else None
    return earlier.settings


def _judge(earlier: SearchResult, contender: Settings, speedup: float) -> tuple[bool, str]:
    """Whether ``earlier``'s answer holds with ``contender`` at ``speedup`` over the
    default loader, and why."""
    band = max(earlier.tolerance, earlier.noise)
    if earlier.is_default:
        if speedup > 1 + band:
            return False, (
                f"{contender.describe()} now reads {speedup:.2f}x the default loader, "
                f"beyond the noise ({band:.0%}) that the earlier rounds left it within"
            )
        reason = (
            f"the default loader still holds: its fastest finalist reads {speedup:.2f}x it, "
            f"within the noise ({band:.0%})"
        )
    else:
        interval = earlier.speedup_interval
        low = max(1 + band, interval[0] if interval else 0.0)
        if speedup < low:
            expected = (
                f"the earlier rounds predicted {interval[0]:.2f}-{interval[1]:.2f}x"
                if interval
                else f"it must beat the default by more than the noise ({band:.0%})"
            )
            return False, (
                f"{contender.describe()} reads {speedup:.2f}x the default loader now; {expected}"
            )
        predicted = f", as predicted ({interval[0]:.2f}-{interval[1]:.2f}x)" if interval else ""
        reason = f"it reads {speedup:.2f}x the default loader again{predicted}"
    return True, reason


def _knobs(space: Mapping[str, Any]) -> str:
    """A space's knobs and their domains as canonical JSON (its notes left out)."""
    return json.dumps({k: v for k, v in space.items() if k != "notes"}, sort_keys=True)


def _extended(
    earlier: SearchResult, measured: Measurement, default: Measurement, speedup: float
) -> SearchResult:
    """``earlier`` with one more round: the new figures of the choice (the default loader's
    where that was the answer, its speedup then 1) and of the default loader, the round's
    rate and speedup after the earlier rounds'."""
    chosen = default if earlier.is_default else measured
    return dataclasses.replace(
        earlier,
        figures=chosen.figures,
        baseline=default,
        rounds=earlier.rounds + ROUNDS,
        rates=(*earlier.rates, chosen.samples_per_s),
        speedup_rounds=(*earlier.speedup_rounds, 1.0 if earlier.is_default else speedup),
    )
