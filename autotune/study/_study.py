"""The study: every trial and its figures in an Optuna storage, and the one record a
trial is read back as.

State that must survive a restart lives in the storage, never on objects: a study
resumes in another process, and is read back by ``show``, ``export`` and
``autotune.load``. Everything autotune adds is a JSON user attribute
(:mod:`autotune.study._attrs`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune._errors import StudyError
from autotune.probe import Failure, Figures, Measurement
from autotune.settings import Settings
from autotune.study._attrs import STUDY_FORMAT, Attr
from autotune.study._location import StudyLocation
from autotune.study._sqlite import checkpoint, wait_to_write
from autotune.study._storage import explain, open_storage


@contextlib.contextmanager
def quiet_optuna() -> Iterator[None]:
    """Silence Optuna's info lines (study created, trial finished); autotune's own
    progress replaces them."""
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(before)


def settle(location: StudyLocation) -> None:
    """Make a study file hold every write in itself (its WAL folded back in), so that a
    copy of the file made next is whole; nothing to do for a database server."""
    if location.path is not None and location.path.exists():
        checkpoint(location.path)


def study_names(location: StudyLocation) -> list[str]:
    """Names of the studies in the storage at ``location``."""
    store = open_storage(location, must_exist=True)
    return [s.study_name for s in optuna.get_all_study_summaries(store)]


def open_study(location: StudyLocation, *, create: bool, writes: bool = False) -> optuna.Study:
    """The study ``location`` names; created when ``create`` and absent.

    With ``writes`` (a search, a recorded choice), a study file another process holds
    locked past the timeout is refused now, before any probe runs, not at the first write.

    A storage that holds exactly one study means that one, whatever its name (a renamed
    or copied file, a database kept for one study): it is read, or continued, rather than
    given a second study. A location without a name in a storage of several studies is
    refused with their names.
    """
    store = open_storage(location, must_exist=not create)
    if writes and location.path is not None:
        wait_to_write(location.path)
    try:
        names = [s.study_name for s in optuna.get_all_study_summaries(store)]
        name = location.name
        if name not in names and len(names) == 1 and (location.is_file or name is None):
            name = names[0]
        if name is None:
            listed = ", ".join(repr(n) for n in names) or "none"
            raise StudyError(
                f"{location} holds {len(names)} studies ({listed}); name one with "
                "--study-name NAME."
            )
        if name not in names:
            if not create:
                raise StudyError(
                    f"{location} holds no study named {name!r}; it holds {names or 'none'}."
                )
            with quiet_optuna():
                return optuna.create_study(
                    storage=store, study_name=name, direction="maximize", load_if_exists=True
                )
        return optuna.load_study(storage=store, study_name=name)
    except StudyError:
        raise
    except Exception as error:
        raise StudyError(explain(location, error)) from error


def read_meta(study: optuna.Study) -> dict[str, Any]:
    """The study's autotune attributes; checks the format is one this version reads."""
    meta: dict[str, Any] = dict(study.user_attrs.get(Attr.META) or {})
    fmt = meta.get("format", STUDY_FORMAT)
    if isinstance(fmt, int) and fmt > STUDY_FORMAT:
        raise StudyError(
            f"study {study.study_name!r} was written by a newer autotune (format {fmt}; this "
            f"version reads up to {STUDY_FORMAT}); upgrade autotune to read it."
        )
    return meta


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrialRecord:
    """One trial as autotune reads it back from the study.

    Its :attr:`measurement` is the one record of what was measured; this type exists
    for what only a trial has around it: its number and state, its role in the search,
    why it failed or was not run (a repeat, ruled out by the bounds), and, for a pruned
    trial, the last figure the pruner saw (``value``).
    """

    number: int
    state: str
    role: str
    settings: Settings | None
    value: float | None
    """samples/s: the final figure, or for a pruned trial its last reported one."""
    figures: Figures | None
    failure: Failure | None
    duration_s: float | None
    duplicate_of: int | None = None
    bounded: str | None = None
    """Why the trial was not run: its compute ceiling could not reach the best."""
    backend: str | None = None

    @property
    def measurement(self) -> Measurement | None:
        """The settings and figures this trial measured; None when it measured nothing."""
        if self.settings is None or self.figures is None:
            return None
        return Measurement(settings=self.settings, figures=self.figures)

    @property
    def probed(self) -> bool:
        """Whether the trial ran a probe: False for a repeat of a config already measured
        and for one ruled out without running (by its compute ceiling, or infeasible)."""
        infeasible = self.failure is not None and self.failure.kind == "infeasible"
        return self.duplicate_of is None and self.bounded is None and not infeasible

    @property
    def note(self) -> str:
        """Why a trial has no figures of its own, or how it failed; empty otherwise."""
        if self.failure is not None:
            return f"{self.failure.kind}: {self.failure.message}"
        if self.duplicate_of is not None:
            return f"same config as #{self.duplicate_of}"
        if self.bounded is not None:
            return self.bounded
        return ""

    @classmethod
    def from_trial(cls, trial: FrozenTrial) -> TrialRecord:
        attrs = trial.user_attrs
        settings = Settings.from_dict(attrs[Attr.SETTINGS]) if Attr.SETTINGS in attrs else None
        figures = Figures.from_dict(attrs[Attr.FIGURES]) if Attr.FIGURES in attrs else None
        failure = Failure.from_dict(attrs[Attr.FAILURE]) if Attr.FAILURE in attrs else None
        value: float | None = trial.value
        if value is None and trial.state == TrialState.PRUNED and trial.intermediate_values:
            value = trial.intermediate_values[max(trial.intermediate_values)]
        duration = trial.duration.total_seconds() if trial.duration is not None else None
        return cls(
            number=trial.number,
            state=trial.state.name,
            role=str(attrs.get(Attr.ROLE, "explore")),
            settings=settings,
            value=value,
            figures=figures,
            failure=failure,
            duration_s=duration,
            duplicate_of=attrs.get(Attr.DUPLICATE_OF),
            bounded=attrs.get(Attr.BOUNDED),
            backend=attrs.get(Attr.BACKEND),
        )


def records(study: optuna.Study) -> list[TrialRecord]:
    """Every trial of the study, oldest first; not the configs still queued (WAITING),
    which are proposals a later search runs first, not trials yet."""
    return [
        TrialRecord.from_trial(t)
        for t in study.get_trials(deepcopy=False)
        if t.state != TrialState.WAITING
    ]
