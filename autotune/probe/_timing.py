"""Timing on a device: waiting for its queued work.

A device runs its work asynchronously: a host clock read after a kernel launch says
when the launch returned, not when the kernel ended. So a window's edges wait for
the device (:func:`synchronize`) before the clock is read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
