"""Writing an online climb into a study, so ``autotune show``, ``report`` and
``autotune.load`` read it like a search's.

Each config measured becomes a finished trial (role ``baseline`` for the default
loader, ``online`` for the rest) with its settings and figures; the choice becomes
the study's result, ``confirmed=False``: it was chosen from the climb's windows,
not re-measured side by side as a search's finalists are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune._errors import StudyError
from autotune.machine import Machine
from autotune.probe import Figures, Measurement, Window
from autotune.result import SearchResult
from autotune.settings import Settings
from autotune.study import (
    STUDY_FORMAT,
    Attr,
    StudyLocation,
    locate,
    open_study,
    quiet_optuna,
    read_meta,
    settle,
)

ROLE_ONLINE = "online"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Choice:
    """What one climb settled on, and what it measured on the way."""

    chosen: Measurement
    """The config settled on, with its climb windows."""
    measured: tuple[Measurement, ...]
    """Every config the climb measured, in the order tried (the chosen one among them)."""
    device: str
    machine: Machine
    tolerance: float
    workload: dict[str, Any]

    @property
    def baseline(self) -> Measurement | None:
        """The default loader (no workers, no pinning), when the climb measured it."""
        for measurement in self.measured:
            settings = measurement.settings
            if settings.num_workers == 0 and not settings.pin_memory:
                return measurement
        return None


def check_recordable(target: str | Path) -> StudyLocation:
    """The study ``target`` names (a path or a storage URL), refused early when it holds
    a search's result.

    A search's result was confirmed side by side; an online choice is not, and must
    not replace it.

    Raises:
        StudyError: the study holds a confirmed search result, or cannot be read.
    """
    where = locate(target, "online")
    if not where.exists():
        return where
    try:
        saved = open_study(where, create=False).user_attrs.get(Attr.RESULT) or {}
    except StudyError as error:
        if "holds no study" not in str(error):
            raise
        return where  # a database without this study yet: the recorder creates it
    if saved.get("confirmed", True) and saved and not saved.get("workload", {}).get("online"):
        raise StudyError(
            f"{where} holds the confirmed result of a search; an online choice would replace "
            "it. Give another path to record into (or pass this one as `study=` to start "
            "from its choice)."
        )
    return where


def record_choice(where: StudyLocation, choice: Choice, *, trials: bool = True) -> SearchResult:
    """Add the climb's configs as trials of the study at ``where`` and save its choice.

    Args:
        trials: False to save the choice only, its climb's trials being in the study
            already (the choice changed after it was recorded: persistent workers).

    Returns:
        The result saved, as ``autotune.load(where)`` reads it back.
    """
    study = open_study(where, create=True, writes=True)
    if not read_meta(study):
        study.set_user_attr(Attr.META, _meta(choice))
    with quiet_optuna():
        for measurement in choice.measured if trials else ():
            study.add_trial(_trial(measurement, measurement is choice.baseline))
    result = SearchResult(
        settings=choice.chosen.settings,
        figures=choice.chosen.figures,
        device=choice.device,
        machine=choice.machine,
        baseline=choice.baseline,
        finalists=(choice.chosen,),
        tolerance=choice.tolerance,
        confirmed=False,
        workload=choice.workload,
        study_path=str(where),
        study_name=study.study_name,
    )
    study.set_user_attr(Attr.RESULT, result.to_dict())
    settle(where)
    return result


def _meta(choice: Choice) -> dict[str, Any]:
    return {
        "format": STUDY_FORMAT,
        "mode": "online",
        "batch_size": choice.chosen.settings.batch_size,
        "device": choice.device,
        "machine": choice.machine.to_dict(),
        "workload": choice.workload,
        "options": {"tolerance": choice.tolerance},
    }


def _trial(measurement: Measurement, baseline: bool) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(
        state=TrialState.COMPLETE,
        value=measurement.samples_per_s,
        user_attrs={
            Attr.ROLE: "baseline" if baseline else ROLE_ONLINE,
            Attr.SETTINGS: measurement.settings.to_dict(),
            Attr.FIGURES: measurement.figures.to_dict(),
            Attr.BACKEND: ROLE_ONLINE,
        },
    )


def measurements(
    configs: Sequence[tuple[Settings, Sequence[Window]]], startups: dict[str, float]
) -> tuple[Measurement, ...]:
    """Measurements of the climb's ``(settings, windows)`` pairs, with their start-ups."""
    return tuple(
        Measurement(
            settings=settings,
            figures=Figures(windows=tuple(windows), startup_s=startups.get(settings.key())),
        )
        for settings, windows in configs
    )
