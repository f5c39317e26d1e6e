"""What a simulated accelerator costs: a launch overhead and a time per sample per step.

A GPU's step time grows with the batch from a floor it pays whatever the batch (the
kernels' launches and the small kernels of the optimizer), and mixed precision shortens
the part that grows (tensor cores run bf16 and fp16 matmuls several times faster). The
device's ceiling, the most samples per second it can train, is the batch over that time.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

Mode = Literal["sync", "async"]
MODES: tuple[Mode, ...] = ("sync", "async")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeviceSpec:
    """The cost model and the queueing of one simulated device."""

    launch_s: float
    """Device seconds every step pays whatever its batch."""
    sample_s: float
    """Device seconds per sample of a step at full precision."""
    amp_factor: float = 1.0
    """The per-sample time under ``torch.autocast`` (bf16 or fp16) over its time without:
    below 1 where the device has tensor cores for the step's work."""
    mode: Mode = "async"
    """``sync``: a step waits for its kernel, as a loop that reads the loss every step;
    ``async``: a launch returns once the kernel is queued, as CUDA's launches do."""
    queue_depth: int = 2
    """Kernels the device holds queued or running when a launch returns; a launch into a
    full queue waits for the oldest to end, as a CUDA launch into a full queue blocks."""

    def __post_init__(self) -> None:
        for name in ("launch_s", "sample_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} is {value!r}; expected seconds >= 0.")
        if self.launch_s + self.sample_s <= 0:
            raise ValueError("launch_s and sample_s are both 0; expected a step that takes time.")
        if not (0 < self.amp_factor <= 1):
            raise ValueError(f"amp_factor is {self.amp_factor!r}; expected 0 < amp_factor <= 1.")
        if self.mode not in MODES:
            raise ValueError(f"mode is {self.mode!r}; expected one of {list(MODES)}.")
        if isinstance(self.queue_depth, bool) or not isinstance(self.queue_depth, int):
            raise ValueError(f"queue_depth is {self.queue_depth!r}; expected an integer >= 1.")
        if self.queue_depth < 1:
            raise ValueError(f"queue_depth is {self.queue_depth}; expected an integer >= 1.")

    def step_seconds(self, samples: int, amp: bool) -> float:
        """Device seconds of one step over ``samples`` samples, with or without AMP."""
        per_sample = self.sample_s * (self.amp_factor if amp else 1.0)
        return self.launch_s + samples * per_sample

    def ceiling(self, batch_size: int, amp: bool) -> float:
        """The most samples per second the device trains at this batch size: the batch
        over the device time of a step."""
        return batch_size / self.step_seconds(batch_size, amp)
