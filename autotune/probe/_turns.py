"""Several configs measured in one probe process, in turns: a window of each, pass after
pass, every other pass in reverse order (A B C, C B A, A B C...).

A shared machine's speed drifts over seconds and minutes, and one process may run a
model slower than the next however steady its own windows (``docs/decisions.md``). Two
configs measured in probes of their own carry both into their ratio; measured in turns in
one process, each window of one lies beside windows of the others, in the same process,
so their ratio carries neither. The configs share the model, its optimizer and the
dataset, as one training would; each has its own loader, threads and precision.

What a turn does, so that a window measures the config alone in its steady state:

- the workers of the config measured before finish the batches they were asked for
  (they use no more CPU, :func:`settle`): the idle loaders' workers only wait;
- the config's first turn starts its loader and warms up as a probe of its own does
  (``warmup_seconds``, beyond the batches its workers queued while starting);
- a later turn warms up again: its workers' queue filled while it was idle, and those
  batches come at once, so it trains through them (or until it first waits for a
  batch, where the loader sets the pace) and at least :data:`REWARM_SECONDS`;
- then one window, which ends on a whole turn of its workers.

A config that fails (its dataset raises, a worker dies, its batch runs out of memory)
is reported with its failure and left out of the later passes; the others go on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psutil
import torch

from autotune.probe._failure import classify
from autotune.probe._measure import Send, Steps, Tally, one_window
from autotune.probe._protocol import Window
from autotune.probe._timing import synchronize
from autotune.probe._train import PieceError, Trainer
from autotune.settings import Settings

REWARM_SECONDS = 0.1
"""The least a later turn trains before its window: a thread count or precision just
switched, and caches that another config's steps displaced, settle in a few steps."""
WAITED_SECONDS = 0.002
"""A wait for a batch this long ends a later turn's warm-up early: the queue its idle
workers filled is spent, and the loader sets the pace from there."""
SETTLE_POLL_SECONDS = 0.02
"""How often :func:`settle` reads the workers' CPU time."""
IDLE_SHARE = 0.1
"""Workers using less than this share of one core between two reads are idle."""
SETTLE_MOST_SECONDS = 3.0
"""The longest :func:`settle` waits: a loader that keeps its workers busy longer (a
worker that spins) would otherwise hold the probe for ever."""


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

    @property
    def has_workers(self) -> bool:
        return self.settings.num_workers > 0


def measure_turns(
    turns: Sequence[Turn],
    *,
    passes: int,
    window_seconds: float,
    warmup_seconds: float,
    trainer: Trainer | None,
    default_threads: int,
    device: torch.device,
    send: Send,
    stop: threading.Event,
    settle_workers: Callable[[], float] | None = None,
) -> None:
    """Measure ``passes`` windows of each of ``turns`` in turns, sending each as
    ``("turn", (index, Window))`` as it ends, a config's start-up as
    ``("turn_ready", (index, seconds))`` and its failure as ``("turn_error", (index,
    Failure))``.

    Args:
        trainer: trains each config's steps under its precision; None: the configs load
            only (the loader alone).
        default_threads: torch's threads for a config that sets none.
        settle_workers: waits for the workers to go idle after a turn of a config with
            workers (:func:`settle` by default).
    """
    settle_workers = settle_workers or settle
    previous: Turn | None = None
    for number in range(passes):
        order = list(turns) if number % 2 == 0 else list(turns)[::-1]
        for turn in order:
            if stop.is_set():
                return
            if turn.failed:
                continue
            if previous is not None and previous.has_workers:
                settle_workers()
            previous = turn
            try:
                window = _one_turn(
                    turn,
                    window_seconds=window_seconds,
                    warmup_seconds=warmup_seconds,
                    trainer=trainer,
                    default_threads=default_threads,
                    device=device,
                    send=send,
                    stop=stop,
                )
            except PieceError as error:
                _fail(turn, classify(error.error, error.piece), send, device)
                continue
            except Exception as error:  # this config's own failure: the others go on
                _fail(turn, classify(error, None), send, device)
                continue
            if window is None:  # stopped
                return
            send(("turn", (turn.index, window)))


def _one_turn(
    turn: Turn,
    *,
    window_seconds: float,
    warmup_seconds: float,
    trainer: Trainer | None,
    default_threads: int,
    device: torch.device,
    send: Send,
    stop: threading.Event,
) -> Window | None:
    """One turn of ``turn``'s config: its threads and precision, its start or its warm-up
    again, then one window; None when stopped."""
    torch.set_num_threads(turn.settings.threads or default_threads)
    if trainer is not None:
        trainer.use_amp(turn.settings.amp)
    if not turn.started:
        began = time.perf_counter()
        batch = turn.steps.fetch()
        send(("turn_ready", (turn.index, time.perf_counter() - began)))
        turn.started = True
        _warm(turn, batch, least_s=warmup_seconds, stop=stop)
    else:
        _warm(turn, None, least_s=REWARM_SECONDS, stop=stop, until_waited=True)
    if stop.is_set():
        return None
    synchronize(device)

    def full(tally: Tally, elapsed: float) -> bool:
        return elapsed >= window_seconds and tally.batches % turn.turn == 0

    measured = one_window(turn.steps, device, full=full, stopped=stop.is_set)
    if measured is None:
        return None
    tally, seconds = measured
    return tally.window(0, seconds)


def _warm(
    turn: Turn,
    first: Any,
    *,
    least_s: float,
    stop: threading.Event,
    until_waited: bool = False,
) -> None:
    """Train unmeasured steps for at least ``least_s`` and beyond the batches the
    config's workers queued; with ``until_waited``, a wait for a batch of at least
    :data:`WAITED_SECONDS` ends it sooner (past ``least_s``). ``first``: a batch on the
    device to train on first (the config's first, fetched at its start)."""
    steps = turn.steps
    began = time.perf_counter()
    trained = 0
    waited = False
    batch = first
    while not stop.is_set():
        if batch is None:
            asked = time.perf_counter()
            host_batch, _samples = steps.next_batch()
            waited = waited or time.perf_counter() - asked >= WAITED_SECONDS
            batch = steps.copy(host_batch)
        for _ in range(steps.echo):
            steps.work(batch)
        steps.beat()
        batch = None
        trained += 1
        if time.perf_counter() - began < least_s:
            continue
        if trained > turn.queued or (until_waited and waited):
            return


def _fail(turn: Turn, failure: Any, send: Send, device: torch.device) -> None:
    """Leave ``turn`` out from now on: its loader's epoch ended, the device's memory
    its batch held given back, its failure sent."""
    turn.failed = True
    with contextlib.suppress(Exception):
        turn.close()
    if device.type == "cuda":
        with contextlib.suppress(Exception):
            torch.cuda.empty_cache()
    send(("turn_error", (turn.index, failure)))


def _workers_cpu(seen: dict[int, psutil.Process]) -> float:
    """CPU seconds of this process's live children (its loaders' workers), read now."""
    total = 0.0
    for child in multiprocessing.active_children():
        if child.pid is None:
            continue
        process = seen.get(child.pid)
        try:
            if process is None:
                process = seen[child.pid] = psutil.Process(child.pid)
            times = process.cpu_times()
        except psutil.Error:  # it ended meanwhile
            continue
        total += times.user + times.system
    return total


def settle(
    *,
    poll_s: float = SETTLE_POLL_SECONDS,
    most_s: float = SETTLE_MOST_SECONDS,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
    cpu: Callable[[], float] | None = None,
) -> float:
    """Wait until this process's children (its loaders' workers) use less than
    :data:`IDLE_SHARE` of a core between two reads ``poll_s`` apart, at most ``most_s``;
    the seconds waited.

    A config's workers go on loading the batches they were asked for after its turn
    ends; measured then, the next config would share the CPUs with them."""
    seen: dict[int, psutil.Process] = {}
    read = cpu or (lambda: _workers_cpu(seen))
    began = clock()
    last = read()
    while clock() - began < most_s:
        sleep(poll_s)
        now = read()
        if now - last < IDLE_SHARE * poll_s:
            break
        last = now
    return clock() - began
