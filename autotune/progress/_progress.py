"""Progress of a search: events out of the search loop, shown by a sink.

The search calls a :class:`Progress`; the CLI passes :func:`make_progress`'s
choice (a live status block on a terminal, one line per trial in a log or CI),
the Python API stays quiet unless given one.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import IO, Protocol

from autotune._format import format_duration, format_rate
from autotune._stages import Stage
from autotune.probe import Window
from autotune.settings import Settings
from autotune.study import TrialRecord


class Progress(Protocol):
    """What a search tells its watcher."""

    def phase(self, name: Stage, detail: str) -> None:
        """A stage begins (:class:`Stage`; ``Stage.DONE``: the search has ended)."""

    def plan(self, stage: Stage, trials: int, timeout: float | None, *, later: int = 0) -> None:
        """The stage begun runs up to ``trials`` probes, none started after ``timeout``
        seconds; ``later`` full probes follow in the stages after it."""

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

    def phase(self, name: Stage, detail: str) -> None:
        pass

    def plan(self, stage: Stage, trials: int, timeout: float | None, *, later: int = 0) -> None:
        pass

    def trial_started(self, number: int, role: str, settings: Settings) -> None:
        pass

    def window(self, number: int, window: Window, value: float) -> None:
        pass

    def trial_finished(self, record: TrialRecord, best: TrialRecord | None) -> None:
        pass

    def message(self, text: str) -> None:
        pass


def outcome(record: TrialRecord) -> str:
    """How a trial ended, in a few words; a repeat says which trial it repeats."""
    said = _ended(record)
    if record.duplicate_of is not None:
        said += f" (same as #{record.duplicate_of})"
    return said


def _ended(record: TrialRecord) -> str:
    if record.state == "COMPLETE":
        return f"{format_rate(record.value)} samples/s"
    if record.bounded is not None:
        return record.bounded
    if record.state == "PRUNED":
        windows = len(record.figures.windows) if record.figures else 0
        return f"{format_rate(record.value)} samples/s, pruned after {windows} window(s)"
    if record.failure is not None:
        return f"FAILED ({record.failure.kind}): {record.failure.message}"
    return record.state


@dataclasses.dataclass
class _Running:
    """What a display knows of a trial under way (mutable, updated window by window):
    not a measurement, which exists only once the probe has ended."""

    role: str
    settings: Settings
    started: float
    windows: int = 0
    value: float | None = None


class Tracker:
    """Counts and times a search's trials: what the displays show."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()
        self.stage = ""
        self.stage_started = self.started
        self.last_end = self.started
        self.planned = 0
        self.timeout: float | None = None
        self.later = 0
        self.done = 0
        self.durations: list[float] = []
        """Probed trials of the current stage, pruned ones included (not the repeats,
        nor the configs ruled out without running: they spend none of the budget)."""
        self.full: list[float] = []
        """Trials measured to the end (complete, not repeats): what a later probe costs."""
        self.best: TrialRecord | None = None
        self.running: dict[int, _Running] = {}

    def elapsed(self) -> float:
        return self.clock() - self.started

    def phase(self, name: Stage) -> None:
        self.stage = name
        self.stage_started = self.last_end = self.clock()
        self.planned = self.done = self.later = 0
        self.timeout = None
        self.durations = []

    def plan(self, trials: int, timeout: float | None, later: int) -> None:
        self.planned, self.timeout, self.later = trials, timeout, later

    def trial_started(self, number: int, role: str, settings: Settings) -> None:
        self.running[number] = _Running(role, settings, self.clock())

    def window(self, number: int, value: float) -> None:
        running = self.running.get(number)
        if running is not None:
            running.windows += 1
            running.value = value

    def trial_finished(self, record: TrialRecord, best: TrialRecord | None) -> None:
        now = self.clock()
        running = self.running.pop(record.number, None)
        previous, self.last_end = self.last_end, now
        if best is not None:
            self.best = best
        if not record.probed:  # a repeat or a config ruled out: none of the budget spent
            return
        # From its start, or from the end of the trial before it where that came later:
        # trials measured together (in turns in one process, or side by side) end
        # together, and each counts its share of their time, not all of it.
        took = now - max(running.started, previous) if running else record.duration_s
        if took is not None:
            self.durations.append(took)
            if record.state == "COMPLETE":
                self.full.append(took)
        self.done += 1

    def remaining(self) -> float | None:
        """Seconds left in the whole search, estimated from the trials so far."""
        per_trial = statistics.fmean(self.durations) if self.durations else None
        per_full = statistics.fmean(self.full) if self.full else per_trial
        per_trial = per_trial if per_trial is not None else per_full
        if per_trial is None or per_full is None:
            return None
        now = self.clock()
        pending = max(0, self.planned - self.done)
        left = pending * per_trial - (now - self.last_end)
        if self.running:  # the trial under way takes at least a moment more
            left = max(left, (pending - 1) * per_trial)
        if self.timeout is not None:
            left = min(left, self.timeout - (now - self.stage_started) + per_trial)
        return max(0.0, left) + self.later * per_full

    def current(self) -> tuple[int, _Running] | None:
        """The most recently started trial still running."""
        if not self.running:
            return None
        number = max(self.running, key=lambda n: self.running[n].started)
        return number, self.running[number]

    def count(self) -> str:
        """ "3/24" and the time left, for a trial's line."""
        text = f"{self.done}/{self.planned}" if self.planned else f"{self.done}"
        left = self.remaining()
        return text if left is None else f"{text}, ~{format_duration(left)} left"


class LineProgress:
    """One line per trial and per phase: for logs and CI, where nothing redraws."""

    def __init__(self, stream: IO[str] | None = None, tracker: Tracker | None = None) -> None:
        self.stream = stream or sys.stderr
        self.tracker = tracker or Tracker()

    def _print(self, text: str) -> None:
        print(f"[{self.tracker.elapsed():6.1f}s] {text}", file=self.stream, flush=True)

    def phase(self, name: Stage, detail: str) -> None:
        self.tracker.phase(name)
        self._print(f"{name}: {detail}")

    def plan(self, stage: Stage, trials: int, timeout: float | None, *, later: int = 0) -> None:
        self.tracker.plan(trials, timeout, later)

    def trial_started(self, number: int, role: str, settings: Settings) -> None:
        self.tracker.trial_started(number, role, settings)

    def window(self, number: int, window: Window, value: float) -> None:
        self.tracker.window(number, value)

    def trial_finished(self, record: TrialRecord, best: TrialRecord | None) -> None:
        self.tracker.trial_finished(record, best)
        what = record.settings.describe() if record.settings else "-"
        line = f"trial #{record.number:<3} {record.role:<8} {what:<58} {outcome(record)}"
        if best is not None and best.number != record.number:
            line += f"  | best #{best.number} {format_rate(best.value)}"
        line += f"  [{self.tracker.count()}]"
        self._print(line)

    def message(self, text: str) -> None:
        self._print(text)

    def close(self) -> None:
        """Nothing to undo; for symmetry with :class:`LiveProgress`."""

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class LiveProgress:
    """A status block at the bottom of a terminal, redrawn in place: trials done and
    planned, elapsed and remaining time, the best so far and its config, the current
    trial's throughput. A line per trial and per phase scrolls above it.

    A clock thread redraws the block every ``interval`` seconds between events, so
    the elapsed time moves while a probe starts. The block is cleared and the thread
    stopped when the search is done; use it as a context manager (or call
    :meth:`close`) so that happens when a search fails too. With no event for
    ``idle`` seconds the thread stops by itself, and the next event restarts it.
    """

    def __init__(
        self, stream: IO[str] | None = None, *, interval: float = 1.0, idle: float = 300.0
    ) -> None:
        self.stream = stream or sys.stderr
        self.lines = LineProgress(self.stream)
        self.tracker = self.lines.tracker
        self.interval = interval
        self.idle = idle
        self._drawn = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._last_event = time.monotonic()

    # ----------------------------------------------------------------- drawing
    def status(self) -> list[str]:
        """The lines of the status block."""
        t = self.tracker
        head = f"{t.stage or 'starting'}"
        if t.planned and (t.done or t.running):
            head += f" {t.done}/{t.planned}"
        elif t.planned:  # probes that are not trials (the ceilings) report no progress
            head += f": {t.planned} probes"
        head += f" | {format_duration(t.elapsed())} elapsed"
        left = t.remaining()
        if left is not None and t.stage != "done":
            head += f" | ~{format_duration(left)} left"
        lines = [head]
        if t.best is not None:
            what = t.best.settings.describe() if t.best.settings else "-"
            lines.append(f"best #{t.best.number}: {format_rate(t.best.value)} samples/s  {what}")
        current = t.current()
        if current is not None:
            number, run = current
            state = (
                f"window {run.windows}, {format_rate(run.value)} samples/s"
                if run.windows
                else f"starting ({format_duration(t.clock() - run.started)})"
            )
            lines.append(f"now  #{number} {run.role}: {state}  {run.settings.describe()}")
        return lines

    def _clear(self) -> None:
        if self._drawn:
            up = f"\x1b[{self._drawn - 1}A" if self._drawn > 1 else ""
            self.stream.write("\r" + up + "\x1b[J")
            self._drawn = 0

    def _draw(self) -> None:
        width = max(20, shutil.get_terminal_size((100, 24)).columns - 1)
        lines = [line[:width] for line in self.status()]
        self.stream.write("\n".join(lines))
        self.stream.flush()
        self._drawn = len(lines)

    def _update(self, event: Callable[[], None]) -> None:
        with self._lock:
            self._clear()
            event()
            self._draw()
            self._last_event = time.monotonic()
            if self.interval > 0 and (self._ticker is None or not self._ticker.is_alive()):
                self._stop = threading.Event()
                self._ticker = threading.Thread(
                    target=self._tick, args=(self._stop,), daemon=True, name="autotune-live"
                )
                self._ticker.start()

    def _tick(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval):
            with self._lock:
                if stop.is_set() or time.monotonic() - self._last_event > self.idle:
                    return
                self._clear()
                self._draw()

    # ----------------------------------------------------------------- events
    def phase(self, name: Stage, detail: str) -> None:
        self._update(lambda: self.lines.phase(name, detail))
        if name == "done":
            self.close()

    def plan(self, stage: Stage, trials: int, timeout: float | None, *, later: int = 0) -> None:
        self._update(lambda: self.lines.plan(stage, trials, timeout, later=later))

    def trial_started(self, number: int, role: str, settings: Settings) -> None:
        self._update(lambda: self.lines.trial_started(number, role, settings))

    def window(self, number: int, window: Window, value: float) -> None:
        self._update(lambda: self.lines.window(number, window, value))

    def trial_finished(self, record: TrialRecord, best: TrialRecord | None) -> None:
        self._update(lambda: self.lines.trial_finished(record, best))

    def message(self, text: str) -> None:
        self._update(lambda: self.lines.message(text))

    def close(self) -> None:
        """Stop the clock and clear the status block (the trial lines stay)."""
        with self._lock:
            self._stop.set()
            ticker, self._ticker = self._ticker, None
            self._clear()
            self.stream.flush()
        if ticker is not None:
            ticker.join()

    def __enter__(self) -> LiveProgress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def make_progress(stream: IO[str] | None = None) -> LiveProgress | LineProgress:
    """A live display when ``stream`` (default stderr) is a terminal, else plain lines."""
    stream = stream or sys.stderr
    live = stream.isatty() and os.environ.get("TERM", "") != "dumb"
    return LiveProgress(stream) if live else LineProgress(stream)
