"""short-step-long: short-step's rows and MLP, made wide enough for a step of ~20 ms.

The reference beside ``short_step.py`` in the agreement check: the same data, loader
and model shape, only the hidden layers wider, so a cost the probe adds per step is a
tenth of the share it is there. A gap between the probe and the plain loop that
short-step shows and this one does not is a per-step cost, not a per-window one.

    autotune search benchmarks/workloads/short_step_long.py
"""

import sys
from pathlib import Path

from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
import short_step as base  # the sibling config: the same data and model shape

HIDDEN = 2048
batch_size = base.batch_size
dataset = base.dataset


def model() -> nn.Module:
    return base.mlp(HIDDEN)
