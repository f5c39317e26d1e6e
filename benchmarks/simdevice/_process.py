"""One simulated device per process, made where it is first used.

A probe child (spawned or forked from a forkserver), a checker's measurement (forked
from a zygote), each DDP rank and each DataLoader worker is a process of its own, as
each holds its own CUDA context: a device made in a parent is never the child's. So the
device is looked up by process id, and made anew in a process that has none yet. A
process that then trains a model of another spec (a test loading config after config)
gets a new device for it, as another config's run would.
"""

from __future__ import annotations

import os

from benchmarks.simdevice._device import SimDevice
from benchmarks.simdevice._spec import DeviceSpec

_device: SimDevice | None = None
_owner: int | None = None


def process_device(spec: DeviceSpec) -> SimDevice:
    """This process's device, made from ``spec`` at the first call in this process (and
    again when ``spec`` differs from its device's)."""
    global _device, _owner
    if _device is None or _owner != os.getpid() or _device.spec != spec:
        _device, _owner = SimDevice(spec), os.getpid()
    return _device


def current_device() -> SimDevice | None:
    """This process's device, or None where no model has used one here."""
    return _device if _device is not None and _owner == os.getpid() else None


def samples_ahead() -> float:
    """Samples this process launched that its device has not yet trained (0 without a
    device): what a host count of samples is ahead of the device's."""
    device = current_device()
    return device.samples_ahead() if device is not None else 0.0


def synchronize_current() -> None:
    """Wait for this process's device, if it has one (a no-op otherwise)."""
    device = current_device()
    if device is not None:
        device.synchronize()
