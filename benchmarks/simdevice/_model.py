"""A model whose step runs on the simulated device: a tiny real network on the CPU, and
one kernel per step on the device.

The training process's own share of a GPU step is real and small: the Python of the
forward, the backward and the optimizer, which on a GPU launch the kernels. Here a tiny
network does that share for real on the CPU, and its forward launches the step's device
work as one kernel (forward, backward and optimizer alike), sized by the batch and
shortened under ``torch.autocast``. The kernel is launched first, so that in ``async``
mode the host's share of the step and its loading of the next batch overlap it, as on
CUDA; in ``sync`` mode the forward returns once the kernel has ended.

The tiny network runs outside autocast: AMP shortens the device's kernel, and on a GPU
the host's share barely changes with it, where the CPU's own bf16 kernels for so small a
network are several times slower than its float32 ones and would stand in for nothing.
"""

from __future__ import annotations

import torch
from torch import nn

from benchmarks.simdevice._process import process_device
from benchmarks.simdevice._spec import DeviceSpec


class SimulatedModel(nn.Module):
    """``net`` trained on the CPU, each forward also launching the step's kernel on this
    process's simulated device (made from ``spec`` at the first forward in a process).

    Args:
        net: the tiny real network; its input is the batch's first tensor.
        spec: the device's cost model.
    """

    def __init__(self, net: nn.Module, spec: DeviceSpec) -> None:
        super().__init__()
        self.net = net
        self.spec = spec

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        amp = torch.is_autocast_enabled(inputs.device.type)
        process_device(self.spec).launch(int(inputs.shape[0]), amp)
        with torch.autocast(inputs.device.type, enabled=False):
            output: torch.Tensor = self.net(inputs)
        return output
