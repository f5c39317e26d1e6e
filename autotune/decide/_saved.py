"""A study's choice read back: the result a search saved, or the cheapest config
within tolerance of its best trial when the search never finished.

Here rather than in ``output`` so that every stage above ``decide`` (``output``,
``online``) reads a study's choice the same way.
"""

from __future__ import annotations

import dataclasses

import optuna

from autotune._errors import StudyError
from autotune._noise import DEFAULT_TOLERANCE
from autotune.decide._choose import Candidate, cheapest_within
from autotune.machine import Machine
from autotune.result import SearchResult
from autotune.study import Attr, StudyLocation, read_meta, records


def result_of(study: optuna.Study, *, where: StudyLocation | None = None) -> SearchResult:
    """The study's saved result; for a search that never finished, the cheapest
    config within tolerance of its best trial (not re-measured, ``confirmed=False``)."""
    meta = read_meta(study)
    saved = study.user_attrs.get(Attr.RESULT)
    if saved:
        result = SearchResult.from_dict(saved)
        if not result.space and meta.get("space"):
            # Saved before results carried their space: the study's is the one searched.
            result = dataclasses.replace(result, space=dict(meta["space"]))
        return result
    measured = [
        r
        for r in records(study)
        if r.state in ("COMPLETE", "PRUNED")
        and r.settings is not None
        and r.figures is not None
        and r.value is not None
        and r.role != "baseline"
    ]
    if not measured:
        raise StudyError(
            f"study {study.study_name!r} has no finished trial to take settings from; "
            "run `autotune search` on it first."
        )
    tolerance = float(meta.get("options", {}).get("tolerance", DEFAULT_TOLERANCE))
    user_batch = int(meta.get("batch_size") or 32)
    pick = cheapest_within(
        [Candidate(r.settings, r.value) for r in measured if r.settings and r.value],
        tolerance,
        user_batch=user_batch,
    )
    chosen = next(
        m for r in measured if (m := r.measurement) is not None and m.settings == pick.settings
    )
    return SearchResult(
        settings=chosen.settings,
        figures=chosen.figures,
        device=str(meta.get("device", "cpu")),
        machine=Machine.from_dict(meta.get("machine", {})),
        finalists=(chosen,),
        tolerance=tolerance,
        confirmed=False,
        user_batch_size=user_batch,
        space=dict(meta.get("space") or {}),
        workload=dict(meta.get("workload", {})),
        study_path=str(where) if where is not None else None,
        study_name=study.study_name,
    )
