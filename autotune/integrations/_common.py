"""What the framework integrations share: reading a result from wherever it was saved,
the shape of a loader factory, and the error for a missing framework."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeAlias

import optuna

from autotune._errors import MissingExtraError
from autotune.output import load
from autotune.result import SearchResult

ResultSource: TypeAlias = SearchResult | str | Path | optuna.Study
"""A search's result, or where it was saved: a study file or name, or exported JSON."""

MakeLoader: TypeAlias = Callable[[Any, int, Callable[[list[Any]], Any] | None], Iterable[Any]]
"""``make_loader(dataset, batch_size, collate_fn) -> iterable of batches``."""


def as_result(source: ResultSource) -> SearchResult:
    """The result itself, or the one ``autotune.load`` reads from ``source``."""
    if isinstance(source, SearchResult):
        return source
    return load(source)


def missing_extra(framework: str, extra: str, detail: str) -> MissingExtraError:
    """The error for a framework that cannot be imported: what is missing (``detail``, the
    import error's text), and the command that installs it."""
    return MissingExtraError(
        f"autotune's {framework} integration needs {framework}, which is not installed "
        f"({detail}); install it with: pip install 'autotune[{extra}]'"
    )
