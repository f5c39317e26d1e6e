"""A search of a study that already has an answer measures that answer again first, and
ends with it while it holds (:func:`autotune.decide.recheck`)."""

from __future__ import annotations

import dataclasses

from autotune._stages import Stage
from autotune.decide import earlier_answer, recheck
from autotune.pipeline._starts import record_start
from autotune.pipeline._state import SearchState
from autotune.pipeline._summary import summary
from autotune.result import SearchResult
from autotune.study import Attr


def recheck_earlier_answer(state: SearchState) -> SearchResult | None:
    """The study's earlier answer measured again, unless the search resumes exploring or
    runs trials side by side: the result to end the search with when it holds (saved in
    the study), None when the search must go on (saying why)."""
    plan = state.exploring()
    if plan.options.resume or plan.slots:
        return None
    earlier = earlier_answer(plan.study)
    if earlier is None:
        return None
    checked = recheck(state.runner, plan, earlier, state.baseline, state.progress)
    if checked is None:
        return None
    if checked.result is None:
        note = f"the earlier answer no longer holds: {checked.reason}; the search goes on"
    else:
        note = f"the earlier answer holds: {checked.reason}; nothing else measured"
    state.progress.message(note)
    entry = {"source": "earlier answer", "held": checked.held, "reason": checked.reason}
    record_start(plan.study, {**entry, "note": note})
    if checked.result is None:
        return None
    result = dataclasses.replace(
        checked.result,
        workload=state.info,
        collate_fn=state.workload.collate_fn,
        search_time=state.progress.stop(continued=True),
        budget=state.budget().plan,
    )
    plan.study.set_user_attr(Attr.RESULT, result.to_dict())
    state.progress.phase(Stage.DONE, summary(result))
    return result
