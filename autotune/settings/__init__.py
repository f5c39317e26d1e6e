"""Settings: one config of every knob, the DataLoader it builds, and the code that builds it.

The bottom of the stages: every other stage describes a config with :class:`Settings`."""

from autotune.settings._allocator import (
    AllocatorState,
    allocator_lines,
    calls_autotune,
    fix_allocator,
    launch_words,
)
from autotune.settings._loader import EchoLoader, build_loader, is_iterable_dataset
from autotune.settings._settings import AMP_MODES, TORCH_PREFETCH, WORKER_THREADS, AmpMode, Settings
from autotune.settings._worker_threads import worker_init

__all__ = [
    "AMP_MODES",
    "TORCH_PREFETCH",
    "WORKER_THREADS",
    "AllocatorState",
    "AmpMode",
    "EchoLoader",
    "Settings",
    "allocator_lines",
    "build_loader",
    "calls_autotune",
    "fix_allocator",
    "is_iterable_dataset",
    "launch_words",
    "worker_init",
]
