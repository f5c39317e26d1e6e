"""A DDP rank destroys its process group only once no DDP model holds it: a model freed
after the group would destroy the group from its reducer, holding the GIL while it joins
gloo's threads, and a gloo thread that waits for the GIL then hangs the rank for good.
The plain-loop checker's ranks are forked from here with ``destroy_process_group``
replaced by one that counts the live DDP models first. (The probe's ranks free the model
as ``_train`` returns, before they destroy the group.)"""

from __future__ import annotations

import gc
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from autotune.settings._settings import Settings
from benchmarks.common import _checker, _checker_ddp


def _count_at_destroy(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Each forked rank writes, as it destroys its group, how many DDP models live."""
    destroy = dist.destroy_process_group

    def counting(*args: Any, **kwargs: Any) -> None:
        # Counted without a collection: a model in a reference cycle counts until freed.
        live = sum(isinstance(o, DistributedDataParallel) for o in gc.get_objects())
        (folder / f"rank-{os.getpid()}").write_text(str(live))
        destroy(*args, **kwargs)

    monkeypatch.setattr(dist, "destroy_process_group", counting)


def test_a_checker_rank_frees_its_ddp_model_before_its_process_group(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _count_at_destroy(monkeypatch, tmp_path)
    config = tmp_path / "config.py"
    config.write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn
            from torch.utils.data import TensorDataset

            batch_size = 8

            def dataset():
                return TensorDataset(torch.randn(64, 4), torch.randint(0, 3, (64,)))

            def model():
                return nn.Linear(4, 3)
            """
        )
    )
    plan = _checker.Plan(
        config=str(config), settings=Settings(batch_size=8).to_dict(), seconds=0.1, warmup=0.0
    )
    answer = _checker_ddp.run_ranks(plan, 2)
    assert answer["samples_per_s"] > 0
    counts = [path.read_text() for path in tmp_path.glob("rank-*")]
    assert counts == ["0", "0"]
