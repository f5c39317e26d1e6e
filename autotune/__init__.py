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

if _typing.TYPE_CHECKING:  # the same names as __all__ (a test checks)
    from autotune._errors import (
        AutotuneError,
        ConfigError,
        FingerprintWarning,
        MissingExtraError,
        SpaceError,
        StudyError,
        WorkloadError,
    )
    from autotune.decide import Diagnosis, diagnose
    from autotune.inloop import OnlineLoader, online
    from autotune.machine import Machine
    from autotune.output import load, report
    from autotune.pipeline import search
    from autotune.probe import Measurement
    from autotune.progress import LineProgress, LiveProgress, Progress, QuietProgress
    from autotune.result import BudgetPlan, DdpMeasurement, DdpResult, SearchResult
    from autotune.settings import EchoLoader, Settings, fix_allocator
    from autotune.workload import SearchOptions, Workload

__version__ = "0.1.0"

__all__ = [
    "AutotuneError",
    "BudgetPlan",
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

_FRONT_DOORS = (
    "autotune._errors",
    "autotune.settings",
    "autotune.workload",
    "autotune.machine",
    "autotune.probe",
    "autotune.result",
    "autotune.progress",
    "autotune.decide",
    "autotune.inloop",
    "autotune.output",
    "autotune.pipeline",
)
"""Where the public names live, the bottom stage first: a name is looked up in each in turn,
so reading one loads its own stage and the stages below it only."""

if not _typing.TYPE_CHECKING:  # mypy reads the imports above; a __getattr__ makes names Any

    def __getattr__(name: str) -> _typing.Any:
        """Import a public name from its stage on first use, and keep it here."""
        for home in _FRONT_DOORS if name in __all__ else ():
            module = _importlib.import_module(home)
            if hasattr(module, name):
                globals()[name] = value = getattr(module, name)
                return value
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names (imported or not) and what the package already holds."""
    return sorted(set(globals()) | set(__all__))
