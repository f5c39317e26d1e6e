"""autotune: measure, don't guess, the DataLoader settings of a PyTorch training.

::

    import autotune
    result = autotune.search("examples/quickstart.py")
    loader = result.loader(train_set)          # a plain torch DataLoader, tuned
    later = autotune.load("studies/quickstart.db").loader(train_set)
    loader = autotune.online(train_set, batch_size=32)   # tunes itself in your own loop
    autotune.report("studies/quickstart.db", "report.html")   # diagnosis, plots, trials

The names below are imported on first use (PEP 562), not with the package: importing
one stage (``autotune.settings``, ``autotune.workload``) then loads that stage and the
ones below it only, so a tool that must stay independent of the probe (the benchmark's
plain-loop checker) can read configs and settings without loading it.
"""

# Under private names: the package's public names are its API and its stages.
import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
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
    from autotune.settings._allocator import fix_allocator
    from autotune.settings._loader import EchoLoader
    from autotune.settings._settings import Settings
    from autotune.workload._options import SearchOptions
    from autotune.workload._workload import Workload

__version__ = "0.1.0"

_HOMES = {
    "AutotuneError": "autotune._errors",
    "ConfigError": "autotune._errors",
    "DdpMeasurement": "autotune.result._ddp",
    "DdpResult": "autotune.result._ddp",
    "Diagnosis": "autotune.decide._diagnosis",
    "EchoLoader": "autotune.settings._loader",
    "FingerprintWarning": "autotune._errors",
    "LineProgress": "autotune.progress._progress",
    "LiveProgress": "autotune.progress._progress",
    "Machine": "autotune.machine._machine",
    "Measurement": "autotune.probe",
    "MissingExtraError": "autotune._errors",
    "OnlineLoader": "autotune.inloop._loader",
    "Progress": "autotune.progress._progress",
    "QuietProgress": "autotune.progress._progress",
    "SearchOptions": "autotune.workload._options",
    "SearchResult": "autotune.result._result",
    "Settings": "autotune.settings._settings",
    "SpaceError": "autotune._errors",
    "StudyError": "autotune._errors",
    "Workload": "autotune.workload._workload",
    "WorkloadError": "autotune._errors",
    "diagnose": "autotune.decide._diagnosis",
    "fix_allocator": "autotune.settings._allocator",
    "load": "autotune.output._load",
    "online": "autotune.inloop._online",
    "report": "autotune.output._report",
    "search": "autotune.pipeline._search",
}
"""Each public name and the module it lives in."""

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
    "fix_allocator",
    "load",
    "online",
    "report",
    "search",
]


if not _typing.TYPE_CHECKING:  # mypy reads the imports above; a __getattr__ makes names Any

    def __getattr__(name: str) -> _typing.Any:
        """Import a public name from its module on first use, and keep it here."""
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module 'autotune' has no attribute {name!r}")
        value = getattr(_importlib.import_module(home), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    """The public names (imported or not) and what the package already holds."""
    return sorted(set(globals()) | set(__all__))
