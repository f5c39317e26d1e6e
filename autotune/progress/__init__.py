"""Progress: the events a search emits while it runs, and the displays that show them."""

from autotune.progress._progress import (
    LineProgress,
    LiveProgress,
    Progress,
    QuietProgress,
    make_progress,
)

__all__ = ["LineProgress", "LiveProgress", "Progress", "QuietProgress", "make_progress"]
