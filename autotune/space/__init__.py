"""The space: which knobs a search samples, over which values, on this machine."""

from autotune.space._space import IntRange, Space, TrialLike, build_space, default_max_workers

__all__ = ["IntRange", "Space", "TrialLike", "build_space", "default_max_workers"]
