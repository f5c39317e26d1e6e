"""A simulated accelerator, for the benchmarks and their tests only (never the package).

autotune exists for an accelerator waiting for data, and this machine has none. This
device stands in for one: its kernels pass off the CPU (no CPU held, the GIL released),
a step costs a launch overhead plus a time per sample, shortened under AMP, it runs
synchronously or through a bounded queue like CUDA's, and it counts its busy time, so a
plain loop reads its utilisation as ``nvidia-smi`` would.

::

    spec = DeviceSpec(launch_s=0.001, sample_s=0.0003, amp_factor=0.4)
    model = SimulatedModel(nn.Linear(16, 4), spec)   # a config's model()
    spec.ceiling(32, amp=False)                     # samples/s the device can train
    current_device().busy_seconds()                 # after training, in that process
"""

from benchmarks.simdevice._device import SimDevice
from benchmarks.simdevice._model import SimulatedModel
from benchmarks.simdevice._process import (
    current_device,
    process_device,
    samples_ahead,
    synchronize_current,
)
from benchmarks.simdevice._spec import MODES, DeviceSpec, Mode
from benchmarks.simdevice._watch import BusyWatch, DeviceReading

__all__ = [
    "MODES",
    "BusyWatch",
    "DeviceReading",
    "DeviceSpec",
    "Mode",
    "SimDevice",
    "SimulatedModel",
    "current_device",
    "process_device",
    "samples_ahead",
    "synchronize_current",
]
