"""What exploration's budget counts, and when exploration ends before it is spent.

The budget (``--trials``) counts the trials that ran a probe. A repeat of a config
already measured, or a config ruled out without running, spends none of it: a
sampler that re-proposes what it has measured would otherwise end a search
having measured fewer configs than the user paid for. Such free proposals are
capped at the budget itself (:func:`budget_left`).

Exploration ends early, because more trials would learn nothing, when:

- every config of the space has been measured;
- the sampler proposed :data:`MAX_REPEATS` configs in a row that were already
  measured (or ruled out), so it has nothing new to propose;
- the best config is within the finalist band of the highest compute ceiling
  (once the warm starts have run), so no config can do much better;
- :data:`PATIENCE` trials in a row after the warm starts found no config faster than
  the best before them by more than the tolerance (:func:`stalled`): the sampler's
  model of the space has stopped paying, and the confirming rounds, not more single
  windows, tell the finalists apart.

Each rule answers with the line that says why exploration ends, or None.
"""

from __future__ import annotations

from collections.abc import Iterable

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune._format import format_rate
from autotune.explore._bounds import Bounds
from autotune.explore._trials import best_record
from autotune.study import Attr, TrialRecord

MAX_REPEATS = 10
"""Proposals in a row of configs already measured, after which exploration stops."""
PATIENCE = 8
"""Probed trials in a row after the warm starts that beat no earlier config by more than
the tolerance, after which exploration stops: more than the sampler's random start, so
its model of the space has proposed some of them."""


def budget_left(trials: int, probed: int, proposed: int) -> int:
    """How many more trials exploration may propose.

    Args:
        trials: the budget: trials that run a probe.
        probed: proposals so far that ran (or are running) a probe.
        proposed: proposals so far, repeats and ruled-out configs included; at most
            ``2 * trials`` in all, so that free proposals number at most ``trials``.
    """
    return max(0, min(trials - probed, 2 * trials - proposed))


def exhausted(repeats: int, measured: int, size: int) -> str | None:
    """Why exploration ends with nothing new left to measure; None while it goes on.

    Args:
        repeats: trials in a row that measured nothing new.
        measured: configs of the space settled so far.
        size: configs in the space.
    """
    if repeats >= MAX_REPEATS:
        return f"the sampler proposed {repeats} measured configs in a row; exploration ends early"
    if measured >= size:
        return "every config of the space has been measured; exploration ends early"
    return None


def probed_count(trials: Iterable[FrozenTrial]) -> int:
    """Explored trials among ``trials`` whose probe ran and completed or was pruned: not
    the repeats, nor the configs a bound ruled out."""
    return sum(
        1
        for t in trials
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
        and t.user_attrs.get(Attr.ROLE, "explore") == "explore"
        and Attr.DUPLICATE_OF not in t.user_attrs
        and Attr.BOUNDED not in t.user_attrs
    )


def ceiling_message(best: float, highest: float, tolerance: float) -> str:
    """The line that says exploration ends because ``best`` nears the ``highest``
    compute ceiling."""
    return (
        f"the best config trains {format_rate(best)} samples/s, within "
        f"{2 * tolerance:.0%} of the most the model trains with no "
        f"loader at all ({format_rate(highest)}): exploration ends early"
    )


def near_the_ceiling(
    study: optuna.Study, bounds: Bounds | None, tolerance: float, warm_starts: int
) -> str | None:
    """Why exploration ends because the best explored config of ``study`` is within the
    finalist band of the highest compute ceiling; None while another config could do
    much better, or while fewer than ``warm_starts`` trials have been probed."""
    if bounds is None:
        return None
    best = best_record(study, role="explore")
    if best is None or best.value is None or not bounds.saturated(best.value, tolerance):
        return None
    finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
    if probed_count(finished) < warm_starts:
        return None
    return ceiling_message(best.value, bounds.highest, tolerance)


def stalled(study: optuna.Study, tolerance: float, warm_starts: int) -> str | None:
    """Why exploration ends because the last :data:`PATIENCE` probed trials of ``study``
    after its first ``warm_starts`` each read no faster than every trial before them by
    more than ``tolerance``; None while fewer have, or one of them did."""
    finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
    probed = [t for t in finished if probed_count([t])]
    best = 0.0
    since = 0
    for index, trial in enumerate(sorted(probed, key=lambda t: t.number)):
        record = TrialRecord.from_trial(trial)
        value = record.value or 0.0
        if index >= warm_starts:
            since = 0 if value > best * (1 + tolerance) else since + 1
        best = max(best, value)
    if since < PATIENCE:
        return None
    return (
        f"the last {since} trials found no config faster than the best before them by more "
        f"than the tolerance ({tolerance:.0%}): exploration ends early"
    )
