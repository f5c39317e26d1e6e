"""Deciding: the finalists confirmed, the cheapest within the tolerance chosen, the DDP stage,
the ceilings measured, a study's earlier answer measured again, the default kept early
when it already trains at the compute ceiling, and the diagnosis of where
the time goes."""

from autotune.decide._ceilings import Ceilings, measure_ceilings
from autotune.decide._choose import cost
from autotune.decide._confirm import (
    Confirmed,
    confirm,
    explored_candidates,
    most_finalists,
    most_in_runoff,
    round_configs,
)
from autotune.decide._ddp import DdpSetup, after_ddp, planned_probes, run_ddp_stage
from autotune.decide._diagnosis import Diagnosis, diagnose
from autotune.decide._early import near_ceiling
from autotune.decide._recheck import earlier_answer, earlier_finalists, recheck
from autotune.decide._rounds import RUNOFF, round_length
from autotune.decide._saved import result_of

__all__ = [
    "RUNOFF",
    "Ceilings",
    "Confirmed",
    "DdpSetup",
    "Diagnosis",
    "after_ddp",
    "confirm",
    "cost",
    "diagnose",
    "earlier_answer",
    "earlier_finalists",
    "explored_candidates",
    "measure_ceilings",
    "most_finalists",
    "most_in_runoff",
    "near_ceiling",
    "planned_probes",
    "recheck",
    "result_of",
    "round_configs",
    "round_length",
    "run_ddp_stage",
]
