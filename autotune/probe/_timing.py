"""Timing on a device: waiting for its queued work, and timing the copy to it.

A device runs its work asynchronously: a host clock read after a kernel launch says
when the launch returned, not when the kernel ended. So a window's edges wait for
the device (:func:`synchronize`), and the copy of each batch to the device is timed
by the device's own clock where torch reads one (CUDA events), by the host's clock
between two synchronizes on another accelerator (mps, xpu...), and by the host's
clock alone on the CPU, where the copy is a no-op (:func:`copy_timer`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
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


class CopyTimer(Protocol):
    """Times each batch's copy to the device within a window."""

    def copy(self, copy: Callable[[Any], Any], batch: Any) -> Any:
        """``copy(batch)``, timed."""

    def take(self) -> float:
        """Seconds of the copies timed since the last take; called once the device is
        synchronised (a device clock's readings are final only then)."""


class HostCopyTimer:
    """The host's clock around the copy: right where the copy is done when it returns,
    as on the CPU, where it is a no-op."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.seconds = 0.0

    def copy(self, copy: Callable[[Any], Any], batch: Any) -> Any:
        began = self.clock()
        moved = copy(batch)
        self.seconds += self.clock() - began
        return moved

    def take(self) -> float:
        seconds, self.seconds = self.seconds, 0.0
        return seconds


class SyncedCopyTimer(HostCopyTimer):
    """The host's clock between two synchronizes of the device: for an accelerator with
    no device clock torch can read (mps, xpu...). The sync before keeps the previous
    step's kernels out of the copy's time; the one after makes the copy's end the
    host's. Both cost the overlap of host and device, for every AMP mode alike."""

    def __init__(
        self, device: torch.device, clock: Callable[[], float] = time.perf_counter
    ) -> None:
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
    """CUDA events recorded on the device's stream on either side of the copy: the
    copy's own time on the device, without a sync. A blocking copy from pageable memory
    holds the host until the previous step's kernels are done; the host's clock would
    count those kernels as copying, the events do not. The events are read at the
    window's edge, once the device is synchronised."""

    def __init__(self, new_event: Callable[[], Any], stream: Any) -> None:
        self.new_event = new_event
        self.stream = stream
        self.pending: list[tuple[Any, Any]] = []

    def copy(self, copy: Callable[[Any], Any], batch: Any) -> Any:
        start, end = self.new_event(), self.new_event()
        start.record(self.stream)
        moved = copy(batch)
        end.record(self.stream)
        self.pending.append((start, end))
        return moved

    def take(self) -> float:
        milliseconds = sum(start.elapsed_time(end) for start, end in self.pending)
        self.pending.clear()
        return float(milliseconds) / 1000.0


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
