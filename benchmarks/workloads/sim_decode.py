"""sim-decode: JPEG files decoded and augmented on the CPU for a simulated accelerator.

The cpu-decode workload's files and pipeline (Pillow decode, random crop, resize, flip,
normalise: about 2 ms of CPU per image), trained on a simulated device whose kernels
pass off the CPU (``benchmarks.simdevice``), queued as CUDA queues them. The device
could train far faster than the CPUs decode, so loading wants every core and the
device waits for data whatever the loader does: the regime autotune exists for.

Device ceiling: 32 samples / (1 ms + 32 x 0.6 ms) = 32 / 20.2 ms, about 1,584 samples/s
(AMP changes nothing here: ``amp_factor`` 1).

    autotune search benchmarks/workloads/sim_decode.py
"""

import sys
from pathlib import Path

from torch import nn
from torch.utils.data import Dataset

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from cpu_decode import CLASSES, JpegFolder, setup

from benchmarks.simdevice import DeviceSpec, SimulatedModel

batch_size = 32
device = "cpu"
DEVICE = DeviceSpec(launch_s=0.001, sample_s=0.0006)


def dataset() -> Dataset:
    return JpegFolder(setup())


def model() -> nn.Module:
    net = nn.Sequential(nn.AvgPool2d(8), nn.Flatten(), nn.Linear(3 * 8 * 8, CLASSES))
    return SimulatedModel(net, DEVICE)
