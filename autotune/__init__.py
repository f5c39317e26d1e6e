"""autotune: measure, don't guess, the DataLoader settings of a PyTorch training.

::

    import autotune
    result = autotune.search("examples/quickstart.py")
    loader = result.loader(train_set)          # a plain torch DataLoader, tuned
    later = autotune.load("studies/quickstart.db").loader(train_set)
    autotune.report("studies/quickstart.db", "report.html")   # diagnosis, plots, trials
"""

from autotune._ddp import DdpMeasurement, DdpResult
from autotune._diagnosis import Diagnosis, diagnose
from autotune._errors import (
    AutotuneError,
    ConfigError,
    FingerprintWarning,
    MissingExtraError,
    SpaceError,
    StudyError,
    WorkloadError,
)
from autotune._load import load
from autotune._loader import EchoLoader
from autotune._machine import Machine
from autotune._options import SearchOptions
from autotune._progress import LineProgress, LiveProgress, Progress, QuietProgress
from autotune._report import report
from autotune._result import Measurement, SearchResult
from autotune._search import search
from autotune._settings import Settings
from autotune._workload import Workload

__version__ = "0.1.0"

__all__ = [
    "AutotuneError",
    "ConfigError",
    "DdpMeasurement",
    "DdpResult",
    "Diagnosis",
    "EchoLoader",
    "FingerprintWarning",
    "LineProgress",
    "LiveProgress",
    "Machine",
    "Measurement",
    "MissingExtraError",
    "Progress",
    "QuietProgress",
    "SearchOptions",
    "SearchResult",
    "Settings",
    "SpaceError",
    "StudyError",
    "Workload",
    "WorkloadError",
    "__version__",
    "diagnose",
    "load",
    "report",
    "search",
]
