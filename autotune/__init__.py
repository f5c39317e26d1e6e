"""autotune: measure, don't guess, the DataLoader settings of a PyTorch training.

::

    import autotune
    result = autotune.search("examples/quickstart.py")
    loader = result.loader(train_set)          # a plain torch DataLoader, tuned
    later = autotune.load("studies/quickstart.db").loader(train_set)
    loader = autotune.online(train_set, batch_size=32)   # tunes itself in your own loop
    autotune.report("studies/quickstart.db", "report.html")   # diagnosis, plots, trials
"""

from autotune._errors import (
    AutotuneError,
    ConfigError,
    FingerprintWarning,
    MissingExtraError,
    SpaceError,
    StudyError,
    WorkloadError,
)
from autotune.decide._diagnosis import Diagnosis, diagnose
from autotune.inloop._loader import OnlineLoader
from autotune.inloop._online import online
from autotune.machine._machine import Machine
from autotune.output._load import load
from autotune.output._report import report
from autotune.pipeline._search import search
from autotune.probe import Measurement
from autotune.progress._progress import LineProgress, LiveProgress, Progress, QuietProgress
from autotune.result._ddp import DdpMeasurement, DdpResult
from autotune.result._result import SearchResult
from autotune.settings._loader import EchoLoader
from autotune.settings._settings import Settings
from autotune.workload._options import SearchOptions
from autotune.workload._workload import Workload

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
    "OnlineLoader",
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
    "online",
    "report",
    "search",
]
