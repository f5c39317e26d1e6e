"""The result: the chosen settings with the measurements that chose them, as data and
as code (the DDP launch line included), how long the search took, and the time budget
it was chosen in."""

from autotune.result._budget import CEILINGS, BudgetPlan
from autotune.result._confirmation import Confirmation
from autotune.result._ddp import DdpMeasurement, DdpResult
from autotune.result._predict import prediction_interval
from autotune.result._result import SearchResult
from autotune.result._search_time import SearchTime

__all__ = [
    "CEILINGS",
    "BudgetPlan",
    "Confirmation",
    "DdpMeasurement",
    "DdpResult",
    "SearchResult",
    "SearchTime",
    "prediction_interval",
]
