"""A DDP rank destroys its process group only once no DDP model holds it: a model freed
after the group would destroy the group from its reducer, holding the GIL while it joins
gloo's threads, and a gloo thread that waits for the GIL then hangs the rank for good.
The plain-loop checker's ranks run in a new Python with ``destroy_process_group``
replaced by one that counts the live DDP models first. (The probe's ranks free the model
as ``_train`` returns, before they destroy the group.)"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """
import torch
from torch import nn
from torch.utils.data import TensorDataset

batch_size = 8

def dataset():
    return TensorDataset(torch.randn(64, 4), torch.randint(0, 3, (64,)))

def model():
    return nn.Linear(4, 3)
"""

# Forked ranks inherit the replacement; a fork of a pytest worker (its threads, torch's
# thread pool) could hang on its own, so the ranks are forked from a new Python.
COUNTING = """
import gc, os, sys
from pathlib import Path
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from autotune.settings._settings import Settings
from benchmarks.common import _checker, _checker_ddp

folder = Path(sys.argv[1])
destroy = dist.destroy_process_group

def counting(*args, **kwargs):
    # Counted without a collection: a model in a reference cycle counts until freed.
    live = sum(isinstance(o, DistributedDataParallel) for o in gc.get_objects())
    (folder / f"rank-{os.getpid()}").write_text(str(live))
    destroy(*args, **kwargs)

dist.destroy_process_group = counting
plan = _checker.Plan(
    config=str(folder / "config.py"),
    settings=Settings(batch_size=8).to_dict(),
    seconds=0.1,
    warmup=0.0,
)
print(_checker_ddp.run_ranks(plan, 2)["samples_per_s"])
"""


def test_a_checker_rank_frees_its_ddp_model_before_its_process_group(tmp_path: Path) -> None:
    (tmp_path / "config.py").write_text(textwrap.dedent(CONFIG))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", COUNTING, str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) > 0
    counts = [path.read_text() for path in tmp_path.glob("rank-*")]
    assert counts == ["0", "0"]
