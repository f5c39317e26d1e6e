"""The pipeline of a search: its stages in order, preflight to saved result (behind
``autotune.search``)."""

from autotune.pipeline._dry_run import dry_run
from autotune.pipeline._search import search

__all__ = ["dry_run", "search"]
