"""Several configs measured in one probe process, in turns: a window of each, pass after
pass, every other pass in reverse order (A B C, C B A, A B C...).

A shared machine's speed drifts over seconds and minutes, and one process may run a
model slower than the next however steady its own windows (``docs/decisions.md``). Two
configs measured in probes of their own carry both into their ratio; measured in turns in
one process, each window of one lies beside windows of the others, in the same process,
so what the moment and the process do to one they do to the others too, and a process's
start is paid once. The configs share the model, its optimizer and the dataset, as one
training would; each has its own loader, threads and precision.

What a turn does, so that a window measures the config alone in its steady state:

- between its turns, a config's workers are stopped (SIGSTOP) the moment its window
  ends, and go on (SIGCONT) when its next turn begins: its loader is frozen as it
  stood, the batches under way half made, so it neither takes CPU from the configs
  measured meanwhile nor loads ahead for free (a loader that waits on storage would
  otherwise fill its whole queue while the others run, and read fast for it);
- the config's first turn starts its loader and warms up as a probe of its own does
  (``warmup_seconds``, beyond the batches its workers queued while starting);
- a later turn trains :func:`rewarm_seconds` first: its threads and precision were
  just switched back, and caches that the other configs' steps displaced refill;
- then one window, which ends on a whole turn of its workers.

A config that fails (its dataset raises, a worker dies, its batch runs out of memory)
is reported with its failure and left out of the later passes; the others go on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import torch

from autotune.probe._failure import classify_raised
from autotune.probe._measure import Send, Steps, Tally, one_window
from autotune.probe._protocol import Window
from autotune.probe._timing import synchronize
from autotune.probe._train import Trainer
from autotune.settings import Settings

REWARM_SECONDS = 0.1
"""The least a later turn trains before its window: a thread count or precision just
switched, and caches that another config's steps displaced, settle in a few steps."""


def rewarm_seconds(warmup_seconds: float) -> float:
    """How long a later turn trains before its window: :data:`REWARM_SECONDS`, or the
    first turn's whole warm-up where that is shorter (warming up again never takes
    longer than warming up did)."""
    return min(REWARM_SECONDS, warmup_seconds)


@dataclasses.dataclass
class Turn:
    """One config of a probe measured in turns, and where its measuring stands."""

    index: int
    """Its position in the request's ``turns``."""
    settings: Settings
    steps: Steps
    """Its batches, their copy to the device and its training step."""
    queued: int
    """Batches its workers queue ahead (0 without workers)."""
    turn: int
    """Batches its workers hand over in one turn of them: a window ends on a whole one."""
    close: Callable[[], None] = lambda: None
    """Ends its loader's epoch (a failed config's workers exit)."""
    started: bool = False
    failed: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class TurnSetup:
    """What every turn of a probe measured in turns runs under."""

    window_seconds: float
    """A window's least length (it ends on a whole turn of the config's workers)."""
    warmup_seconds: float
    """A config's warm-up at its first turn."""
    trainer: Trainer | None
    """Trains each config's steps under its precision; None: the configs load only (the
    loader alone)."""
    default_threads: int
    """torch's threads for a config that sets none."""
    device: torch.device
    send: Send
    stop: threading.Event
    """Set: the search stopped the probe (obeyed at the next step)."""


def measure_turns(
    turns: Sequence[Turn], setup: TurnSetup, *, passes: int, paused: Paused | None = None
) -> None:
    """Measure ``passes`` windows of each of ``turns`` in turns, sending the start of
    each turn as ``("turn_start", index)``, each window as ``("turn", (index, Window))``
    as it ends, a config's start-up as ``("turn_ready", (index, seconds))`` and its
    failure as ``("turn_error", (index, Failure))``.

    Args:
        paused: stops each config's workers between its turns (a :class:`Paused` of this
            process's children by default).
    """
    paused = paused or Paused()
    try:
        for number in range(passes):
            order = list(turns) if number % 2 == 0 else list(turns)[::-1]
            for turn in order:
                if setup.stop.is_set():
                    return
                if turn.failed:
                    continue
                paused.resume(turn.index)
                setup.send(("turn_start", turn.index))
                try:
                    window = _one_turn(turn, setup)
                except Exception as error:  # this config's own failure: the others go on
                    _fail(turn, error, setup.send, setup.device)
                    continue
                finally:
                    paused.pause(turn.index)
                if window is None:  # stopped
                    return
                setup.send(("turn", (turn.index, window)))
    finally:
        paused.resume_all()


def _one_turn(turn: Turn, setup: TurnSetup) -> Window | None:
    """One turn of ``turn``'s config: its threads and precision, its start or its warm-up
    again, then one window; None when stopped."""
    torch.set_num_threads(turn.settings.threads or setup.default_threads)
    if setup.trainer is not None:
        setup.trainer.use_amp(turn.settings.amp)
    stop = setup.stop
    if not turn.started:
        began = time.perf_counter()
        batch = turn.steps.fetch()
        setup.send(("turn_ready", (turn.index, time.perf_counter() - began)))
        turn.started = True
        _warm(turn, batch, least_s=setup.warmup_seconds, beyond_queued=True, stop=stop)
    else:
        least_s = rewarm_seconds(setup.warmup_seconds)
        _warm(turn, None, least_s=least_s, beyond_queued=False, stop=stop)
    if stop.is_set():
        return None
    synchronize(setup.device)

    def full(tally: Tally, elapsed: float) -> bool:
        return elapsed >= setup.window_seconds and tally.batches % turn.turn == 0

    measured = one_window(turn.steps, setup.device, full=full, stopped=stop.is_set)
    if measured is None:
        return None
    tally, seconds = measured
    return tally.window(0, seconds)


def _warm(
    turn: Turn, first: Any, *, least_s: float, beyond_queued: bool, stop: threading.Event
) -> None:
    """Train unmeasured steps for at least ``least_s`` (one at least), and with
    ``beyond_queued`` beyond the batches the config's workers queued while starting.
    ``first``: a batch on the device to train on first (the config's first, fetched at
    its start)."""
    steps = turn.steps
    began = time.perf_counter()
    trained = 0
    batch = first
    while not stop.is_set():
        if batch is None:
            batch = steps.fetch()
        for _ in range(steps.echo):
            steps.work(batch)
        steps.beat()
        batch = None
        trained += 1
        if time.perf_counter() - began >= least_s and (not beyond_queued or trained > turn.queued):
            return


def _fail(turn: Turn, error: BaseException, send: Send, device: torch.device) -> None:
    """Leave ``turn`` out from now on: its loader's epoch ended, the device's memory
    its batch held given back, the failure ``error`` was sent.

    ``error``'s tracebacks are cleared once it is classified: their frames hold the
    loader's iterator, which would otherwise outlive the turn and shut its workers down
    only when the garbage collector reached it, during another config's turn, with those
    workers stopped, so that the shutdown waited out DataLoader's join timeout."""
    turn.failed = True
    failure = classify_raised(error)
    _release_frames(error)
    with contextlib.suppress(Exception):
        turn.close()
    if device.type == "cuda":
        with contextlib.suppress(Exception):
            torch.cuda.empty_cache()
    send(("turn_error", (turn.index, failure)))


def _release_frames(error: BaseException) -> None:
    """Clear the frames of ``error``'s tracebacks, and those of the errors it was raised
    from or during (a :class:`PieceError` is raised from the error it wraps)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [error]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        todo += [current.__cause__, current.__context__]


def _children() -> list[int]:
    """The pids of this process's live children: its loaders' workers."""
    return [child.pid for child in multiprocessing.active_children() if child.pid is not None]


class Paused:
    """The workers of each config, stopped between its turns.

    At the end of a config's turn every live child not stopped already is its loader's
    (the other configs' workers are stopped): those are stopped and kept under its
    index, and go on at its next turn. Where the system has no SIGSTOP, nothing is
    stopped (each turn's warm-up is all there is between the configs).

    Args:
        children: the pids of this process's live children.
        signal_pid: sends a signal to a pid (``os.kill``).
    """

    def __init__(
        self,
        children: Callable[[], list[int]] = _children,
        signal_pid: Callable[[int, int], None] = os.kill,
    ) -> None:
        self.children = children
        self.signal_pid = signal_pid
        self.held: dict[int, list[int]] = {}
        self.able = hasattr(signal, "SIGSTOP") and hasattr(signal, "SIGCONT")

    def pause(self, index: int) -> None:
        """Stop the workers that ran during turn ``index``'s config's turn."""
        if not self.able:
            return
        stopped = {pid for pids in self.held.values() for pid in pids}
        mine = [pid for pid in self.children() if pid not in stopped]
        self.held[index] = [pid for pid in mine if self._send(pid, signal.SIGSTOP)]

    def resume(self, index: int) -> None:
        """Let turn ``index``'s config's workers go on."""
        for pid in self.held.pop(index, []):
            self._send(pid, signal.SIGCONT)

    def resume_all(self) -> None:
        """Let every stopped worker go on (before the loaders shut down)."""
        for index in list(self.held):
            self.resume(index)

    def _send(self, pid: int, number: int) -> bool:
        """Send signal ``number`` to ``pid``; False where it has ended."""
        try:
            self.signal_pid(pid, number)
        except ProcessLookupError:
            return False
        return True
