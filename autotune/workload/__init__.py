"""The user's side: a config file or Python callables turned into a :class:`Workload`
(what to train), and the :class:`SearchOptions` (how to search)."""

from autotune.workload._options import MEMORY_SHARE, SearchOptions
from autotune.workload._workload import Workload, ensure_picklable, load_config

__all__ = ["MEMORY_SHARE", "SearchOptions", "Workload", "ensure_picklable", "load_config"]
