"""Search results made by hand, for the framework integrations' tests."""

from __future__ import annotations

from typing import Any

import autotune
from autotune.machine import detect_machine


def tuned_result(*, user_batch_size: int | None = None, **settings: Any) -> autotune.SearchResult:
    """A result that chose ``Settings(**settings)`` (batch 8 unless given), on this machine."""
    return autotune.SearchResult(
        settings=autotune.Settings(**{"batch_size": 8, **settings}),
        figures=autotune.probe.Figures(),
        device="cpu",
        machine=detect_machine(None),
        user_batch_size=user_batch_size,
    )
