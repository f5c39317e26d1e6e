"""The space: which knobs a search samples, over which values, on this machine."""

from autotune.space._regime import OFF_CPU_SHARE, fit_to_step
from autotune.space._space import (
    Choices,
    Domain,
    Fixed,
    IntRange,
    Space,
    TrialLike,
    build_space,
    default_max_workers,
)

__all__ = [
    "OFF_CPU_SHARE",
    "Choices",
    "Domain",
    "Fixed",
    "IntRange",
    "Space",
    "TrialLike",
    "build_space",
    "default_max_workers",
    "fit_to_step",
]
