"""The study: every trial and its figures in an Optuna storage (an SQLite file or a
database server), the one record a trial is read back as, and which study a search may
add to (the fingerprint)."""

from autotune.study._attrs import STUDY_FORMAT, WARM_START, Attr
from autotune.study._fingerprint import (
    check_same_workload,
    seed_differences,
    study_meta,
    workload_distance,
)
from autotune.study._liveness import TrialHeartbeats, fail_abandoned, owner
from autotune.study._location import StudyLocation, locate
from autotune.study._optuna_private import (
    frozen_trial,
    id_in_storage,
    new_trial,
    storage_of,
)
from autotune.study._storage import storage_errors
from autotune.study._study import (
    TrialRecord,
    open_study,
    quiet_optuna,
    read_meta,
    records,
    settle,
    study_names,
)

__all__ = [
    "STUDY_FORMAT",
    "WARM_START",
    "Attr",
    "StudyLocation",
    "TrialHeartbeats",
    "TrialRecord",
    "check_same_workload",
    "fail_abandoned",
    "frozen_trial",
    "id_in_storage",
    "locate",
    "new_trial",
    "open_study",
    "owner",
    "quiet_optuna",
    "read_meta",
    "records",
    "seed_differences",
    "settle",
    "storage_errors",
    "storage_of",
    "study_meta",
    "study_names",
    "workload_distance",
]
