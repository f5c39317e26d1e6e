"""Timing on a device: waiting for its queued work, and timing the copy to it.

A device runs its work asynchronously: a host clock read after a kernel launch says
when the launch returned, not when the kernel ended. So a window's edges wait for
the device (:func:`synchronize`), and the copy of each batch to the device is timed
by the device's own clock where torch reads one (CUDA events), by the host's clock
between two synchronizes on another accelerator (mps, xpu...), and by the host's
clock alone on the CPU, where the copy is a no-op (:func:`copy_timer`).

A copy on the device's clock may run while the host already waits for the next
batch (a ``non_blocking`` copy from pinned memory returns at once). That part is
hidden behind the wait, and counting it again as copying would make the two shares
add up past the window; so a window's copy time is the copies' time outside the
host's waits (:func:`outside`), and the two shares partition the window's time.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

_SYNC_TAKES_DEVICE = frozenset({"cuda", "xpu"})
"""Device types whose ``synchronize`` takes the device (the others sync their only or
current device, as ``torch.mps.synchronize()`` does)."""


def _synchronizer(device: torch.device) -> Callable[..., Any] | None:
    """The ``synchronize`` of ``torch.<device type>`` (cuda, mps, xpu, or any accelerator
    module torch exposes with one); None on the CPU or when there is none."""
    if device.type == "cpu":
        return None
    sync = getattr(getattr(torch, device.type, None), "synchronize", None)
    return sync if callable(sync) else None


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so that a host clock read next is not misread."""
    sync = _synchronizer(device)
    if sync is None:
        return
    if device.type in _SYNC_TAKES_DEVICE:
        sync(device)
    else:
        sync()


Span = tuple[float, float]
"""A stretch of the host's clock (``time.perf_counter``): when it began, when it ended."""


def outside(spans: Sequence[Span], waits: Sequence[Span]) -> float:
    """Seconds of ``spans`` outside every one of ``waits``; each sorted and disjoint
    (copies queued on one stream, waits one after the other)."""
    total = 0.0
    first = 0
    for start, end in spans:
        while first < len(waits) and waits[first][1] <= start:
            first += 1
        covered = 0.0
        index = first
        while index < len(waits) and waits[index][0] < end:
            covered += max(0.0, min(end, waits[index][1]) - max(start, waits[index][0]))
            index += 1
        total += max(0.0, end - start - covered)
    return total


@dataclasses.dataclass(frozen=True)
class Timed:
    """What a timer measured of one window's device work."""

    copy_seconds: float
    """The copies' time outside the host's waits for data (see the module docstring)."""
    device_seconds: float | None = None
    """The device's busy time: from each batch's copy to the end of its steps, on the
    device's clock; None without one (the CPU, or an accelerator torch reads no clock
    of)."""


def _perf_counter() -> float:
    # Looked up at each call, so that a test's fake clock reaches the timers too.
    return time.perf_counter()


class CopyTimer(Protocol):
    """Times each batch's copy to the device, and the device's work, within a window."""

    def begin(self) -> None:
        """A window begins, the device synchronised (idle)."""

    def copy(self, copy: Callable[[Any], Any], batch: Any) -> Any:
        """``copy(batch)``, timed."""

    def stepped(self) -> None:
        """The steps on the batch copied last are queued."""

    def take(self, waits: Sequence[Span] = ()) -> Timed:
        """What was timed since the last take, the copies' time outside ``waits`` (the
        host's waits for data, on its clock); called once the device is synchronised
        (a device clock's readings are final only then)."""


class HostCopyTimer:
    """The host's clock around the copy: right where the copy is done when it returns,
    as on the CPU, where it is a no-op. The host copies between its waits, so none of
    the copy is inside one."""

    def __init__(self, clock: Callable[[], float] = _perf_counter) -> None:
        self.clock = clock
        self.seconds = 0.0

    def begin(self) -> None:
        return None

    def copy(self, copy: Callable[[Any], Any], batch: Any) -> Any:
        began = self.clock()
        moved = copy(batch)
        self.seconds += self.clock() - began
        return moved

    def stepped(self) -> None:
        return None

    def take(self, waits: Sequence[Span] = ()) -> Timed:
        seconds, self.seconds = self.seconds, 0.0
        return Timed(copy_seconds=seconds)


class SyncedCopyTimer(HostCopyTimer):
    """The host's clock between two synchronizes of the device: for an accelerator with
    no device clock torch can read (mps, xpu...). The sync before keeps the previous
    step's kernels out of the copy's time; the one after makes the copy's end the
    host's. Both cost the overlap of host and device, for every AMP mode alike."""

    def __init__(self, device: torch.device, clock: Callable[[], float] = _perf_counter) -> None:
        super().__init__(clock)
        self.device = device

    def copy(self, copy: Callable[[Any], Any], batch: Any) -> Any:
        synchronize(self.device)
        began = self.clock()
        moved = copy(batch)
        synchronize(self.device)
        self.seconds += self.clock() - began
        return moved


class EventCopyTimer:
    """CUDA events recorded on the device's stream: on either side of each copy, the
    copy's own time on the device, without a sync; after each batch's steps, the
    device's busy time. A blocking copy from pageable memory holds the host until the
    previous step's kernels are done; the host's clock would count those kernels as
    copying, the events do not. The events are read at the window's edge, once the
    device is synchronised, and placed on the host's clock from an event recorded at
    the window's start, when the device is idle: a copy that runs while the host waits
    for data is counted in the wait, not again as copying."""

    def __init__(
        self,
        new_event: Callable[[], Any],
        stream: Any,
        clock: Callable[[], float] = _perf_counter,
    ) -> None:
        self.new_event = new_event
        self.stream = stream
        self.clock = clock
        self.origin: tuple[Any, float] | None = None
        """The window's first event, and the host's clock when it was recorded."""
        self.pending: list[tuple[Any, Any]] = []
        self.steps: list[tuple[Any, Any]] = []
        """Per batch: the event before its copy, the event after its steps."""
        self.unstepped: Any = None
        """The event before the last copy, until its steps are queued."""

    def begin(self) -> None:
        origin = self.new_event()
        origin.record(self.stream)
        self.origin = (origin, self.clock())

    def copy(self, copy: Callable[[Any], Any], batch: Any) -> Any:
        start, end = self.new_event(), self.new_event()
        start.record(self.stream)
        moved = copy(batch)
        end.record(self.stream)
        self.pending.append((start, end))
        self.unstepped = start
        return moved

    def stepped(self) -> None:
        if self.unstepped is not None:
            done = self.new_event()
            done.record(self.stream)
            self.steps.append((self.unstepped, done))
            self.unstepped = None

    def take(self, waits: Sequence[Span] = ()) -> Timed:
        copies = [float(start.elapsed_time(end)) / 1000.0 for start, end in self.pending]
        copy_seconds = sum(copies)
        if waits and self.origin is not None:
            origin, at = self.origin
            starts = [at + float(origin.elapsed_time(start)) / 1000.0 for start, _ in self.pending]
            spans = [
                (start, start + seconds) for start, seconds in zip(starts, copies, strict=True)
            ]
            copy_seconds = outside(spans, waits)
        busy = sum(float(start.elapsed_time(done)) / 1000.0 for start, done in self.steps)
        device_seconds = busy if self.steps else None
        self.pending.clear()
        self.steps.clear()
        self.origin = self.unstepped = None
        return Timed(copy_seconds=copy_seconds, device_seconds=device_seconds)


def copy_timer(device: torch.device) -> CopyTimer:
    """How to time the copy to ``device``: CUDA events on CUDA, a synchronize on either
    side on another accelerator, the host's clock on the CPU."""
    if device.type == "cuda":
        return EventCopyTimer(
            lambda: torch.cuda.Event(enable_timing=True),  # type: ignore[no-untyped-call]
            torch.cuda.current_stream(device),
        )
    if _synchronizer(device) is not None:
        return SyncedCopyTimer(device)
    return HostCopyTimer()
