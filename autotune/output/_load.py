"""Loading tuned settings later: from a study, a study name, or exported JSON."""

from __future__ import annotations

import warnings
from pathlib import Path

import optuna

from autotune._errors import FingerprintWarning
from autotune.decide import result_of
from autotune.machine import detect_machine
from autotune.result import SearchResult
from autotune.study import locate, open_study

__all__ = ["load", "result_of", "warn_if_moved"]


def load(
    source: str | Path | optuna.Study,
    *,
    study_name: str | None = None,
    check_machine: bool = True,
) -> SearchResult:
    """The settings a search chose, read back without searching again.

    Args:
        source: a study file (``studies/quickstart.db``), a study name
            (``quickstart``), a storage URL (``postgresql://USER:PASS@HOST/DB``), an
            ``optuna.Study``, or JSON written by ``autotune export``.
        study_name: which study of a storage that holds several (default: its only one).
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
        where = locate(source, None, name=study_name)
        result = result_of(open_study(where, create=False), where=where)
    if check_machine:
        warn_if_moved(result)
    return result


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
