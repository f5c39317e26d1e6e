"""Progress of a search: events out of the search loop, shown by a sink.

The search calls a :class:`Progress`; the CLI passes one that prints a line
per trial, the Python API stays quiet unless given one.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Protocol

from autotune._probe import Window
from autotune._settings import Settings
from autotune._study import TrialRecord


class Progress(Protocol):
    """What a search tells its watcher."""

    def phase(self, name: str, detail: str) -> None:
        """A stage begins: preflight, explore, confirm, ceilings."""

    def trial_started(self, number: int, role: str, settings: Settings) -> None:
        """A probe starts."""

    def window(self, number: int, window: Window, value: float) -> None:
        """A probe measured a window; ``value`` is its throughput so far."""

    def trial_finished(self, record: TrialRecord, best: TrialRecord | None) -> None:
        """A trial ended (complete, pruned or failed); ``best`` is the best so far."""

    def message(self, text: str) -> None:
        """Anything else worth a line."""


class QuietProgress:
    """Shows nothing."""

    def phase(self, name: str, detail: str) -> None:
        pass

    def trial_started(self, number: int, role: str, settings: Settings) -> None:
        pass

    def window(self, number: int, window: Window, value: float) -> None:
        pass

    def trial_finished(self, record: TrialRecord, best: TrialRecord | None) -> None:
        pass

    def message(self, text: str) -> None:
        pass


def format_rate(value: float | None) -> str:
    """samples/s for humans: 3 significant figures."""
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def outcome(record: TrialRecord) -> str:
    """How a trial ended, in a few words."""
    if record.state == "COMPLETE":
        suffix = f" (same as #{record.duplicate_of})" if record.duplicate_of is not None else ""
        return f"{format_rate(record.value)} samples/s{suffix}"
    if record.state == "PRUNED":
        windows = len(record.figures.windows) if record.figures else 0
        return f"{format_rate(record.value)} samples/s, pruned after {windows} window(s)"
    if record.failure is not None:
        return f"FAILED ({record.failure.kind}): {record.failure.message}"
    return record.state


class LineProgress:
    """One line per trial and per phase, for terminals and logs alike."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self.count = 0

    def _print(self, text: str) -> None:
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed:6.1f}s] {text}", file=self.stream, flush=True)

    def phase(self, name: str, detail: str) -> None:
        self._print(f"{name}: {detail}")

    def trial_started(self, number: int, role: str, settings: Settings) -> None:
        pass

    def window(self, number: int, window: Window, value: float) -> None:
        pass

    def trial_finished(self, record: TrialRecord, best: TrialRecord | None) -> None:
        self.count += 1
        what = record.settings.describe() if record.settings else "-"
        line = f"trial #{record.number:<3} {record.role:<8} {what:<58} {outcome(record)}"
        if best is not None and best.number != record.number:
            line += f"  | best #{best.number} {format_rate(best.value)}"
        self._print(line)

    def message(self, text: str) -> None:
        self._print(text)
