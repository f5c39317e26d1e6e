"""Loading tuned settings later: from a study, a study name, or exported JSON."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import optuna

from autotune._errors import FingerprintWarning, StudyError
from autotune.decide._choose import Candidate, cheapest_within
from autotune.machine._machine import Machine, detect_machine
from autotune.result._result import SearchResult
from autotune.study._study import RESULT, open_study, read_meta, records, resolve


def load(source: str | Path | optuna.Study, *, check_machine: bool = True) -> SearchResult:
    """The settings a search chose, read back without searching again.

    Args:
        source: a study file (``studies/quickstart.db``), a study name
            (``quickstart``), an ``optuna.Study``, or JSON written by ``autotune export``.
        check_machine: warn (:class:`FingerprintWarning`) when this machine differs from
            the one the settings were tuned on.

    Raises:
        StudyError: the study is missing, unreadable, or has no finished trial.
    """
    if isinstance(source, optuna.Study):
        result = result_of(source)
    elif str(source).endswith(".json"):
        result = SearchResult.from_json_file(Path(source))
    else:
        path, name = resolve(source, Path(str(source)).stem)
        result = result_of(open_study(path, name, create=False), path=path)
    if check_machine:
        warn_if_moved(result)
    return result


def result_of(study: optuna.Study, *, path: Path | None = None) -> SearchResult:
    """The study's saved result; for a search that never finished, the cheapest
    config within tolerance of its best trial (not re-measured, ``confirmed=False``)."""
    meta = read_meta(study)
    saved = study.user_attrs.get(RESULT)
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
    tolerance = float(meta.get("options", {}).get("tolerance", 0.03))
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
        study_path=str(path) if path else None,
        study_name=study.study_name,
    )


def warn_if_moved(result: SearchResult) -> None:
    """Warn (FingerprintWarning) when this machine differs from the one ``result`` was
    tuned on, naming what differs."""
    if not result.machine.cpus:
        return
    here = detect_machine(result.device if result.device != "cpu" else None)
    differences = result.machine.differences(here)
    if differences:
        warnings.warn(
            "these settings were tuned on another machine (" + "; ".join(differences) + "); "
            "they may not be the best here: run `autotune search` on this machine.",
            FingerprintWarning,
            stacklevel=3,
        )
