"""The workload of tests/data/study_v0_1.db: a study written by autotune 0.1.0 before the
package was laid out by stage, kept to check that old studies still open and resume."""

import torch
from torch.utils.data import TensorDataset

batch_size = 16
device = "cpu"
search = {
    "window_seconds": 0.1,
    "max_windows": 3,
    "warmup_seconds": 0.05,
    "trial_timeout": 20.0,
    "bounds": True,
    "ceilings": True,
}
space = {"num_workers": [0, 1], "batch_size": [16, 32], "threads": 1}


def dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(512, 8, generator=generator), torch.randint(0, 2, (512,)))


def model() -> torch.nn.Module:
    return torch.nn.Linear(8, 2)
