"""The search's last line: the answer, and what it trains beside the default loader."""

from __future__ import annotations

from autotune._format import format_rate
from autotune.result import SearchResult


def summary(result: SearchResult) -> str:
    """``workers=4 ...: 1,234 samples/s vs 567 for the default loader (2.2x)``, or the
    default kept and why."""
    if result.is_default:
        return f"{result.settings.describe()}: {result.default_text()}"
    text = f"{result.settings.describe()}: {result.rate_text()}"
    speedup = result.speedup_text()
    if result.baseline is not None and speedup is not None:
        text += (
            f" vs {format_rate(result.baseline.samples_per_s)} for the default loader ({speedup})"
        )
    return text
