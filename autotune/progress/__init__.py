"""Progress: the events a search emits while it runs, the displays that show them, and the
clock that times its stages by them."""

from autotune.progress._progress import (
    LineProgress,
    LiveProgress,
    Progress,
    QuietProgress,
    make_progress,
)
from autotune.progress._stage_clock import StageClock

__all__ = [
    "LineProgress",
    "LiveProgress",
    "Progress",
    "QuietProgress",
    "StageClock",
    "make_progress",
]
