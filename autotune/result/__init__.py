"""The result: the chosen settings with the measurements that chose them, as data and
as code (the DDP launch line included)."""

from autotune.result._confirmation import Confirmation
from autotune.result._ddp import DdpMeasurement, DdpResult
from autotune.result._result import SearchResult

__all__ = ["Confirmation", "DdpMeasurement", "DdpResult", "SearchResult"]
