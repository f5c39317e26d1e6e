"""What a plain loop reads off the simulated device: its busy time over a timed span,
as ``nvidia-smi`` reads a GPU's utilisation."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from benchmarks.simdevice._process import current_device


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeviceReading:
    """The device's busy seconds over a span of wall seconds, and its ceiling there."""

    busy_s: float
    wall_s: float
    ceiling: float
    """Samples/s the device trains at the span's batch size and AMP mode."""

    @property
    def utilisation(self) -> float:
        """Busy time over wall time, 0 for an empty span."""
        return self.busy_s / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "utilisation": self.utilisation}


class BusyWatch:
    """The device's busy time between :meth:`start` and :meth:`stop`, each after a
    synchronize (so no queued kernel is counted on the wrong side); reads nothing in a
    process that has no simulated device."""

    def __init__(self) -> None:
        self._began: tuple[float, float] | None = None

    def start(self) -> None:
        device = current_device()
        if device is None:
            return
        device.synchronize()
        self._began = (device.busy_seconds(), time.perf_counter())

    def stop(self, batch_size: int, amp: bool) -> DeviceReading | None:
        """The span since :meth:`start`; None where no device was used before it."""
        device = current_device()
        if device is None or self._began is None:
            return None
        device.synchronize()
        busy, began = self._began
        return DeviceReading(
            busy_s=device.busy_seconds() - busy,
            wall_s=time.perf_counter() - began,
            ceiling=device.spec.ceiling(batch_size, amp),
        )
