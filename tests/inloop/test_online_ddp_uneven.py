"""autotune.online under torch.distributed, where ranks differ: batch counts that are not
equal (no DistributedSampler evens them) must not hang the ranks' meetings, and the
meetings' tensors go to each rank's own GPU, not to cuda:0 on every rank."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from ranks import start_and_join
from test_online import Indices

import autotune
from autotune.inloop._ddp import Ranks, collective_device

LENGTHS = (160, 112)
"""Items of each rank's dataset: 40 and 28 batches of 4."""


def _uneven_rank(rank: int, directory: str) -> None:
    """One rank of two with its own dataset, two epochs, a climb still going at the end
    of the shorter rank's first epoch (50 windows a config)."""
    store = dist.FileStore(f"{directory}/store", 2)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    try:
        dataset = Indices(length=LENGTHS[rank], delay=0.0005)
        options = {"budget_fraction": None, "window_seconds": 0.0, "windows": 50, "retune": False}
        epochs = []
        with autotune.online(dataset, batch_size=4, shuffle=False, **options) as loader:
            for _ in range(2):
                epochs.append([i for batch in loader for i in batch.tolist()])
            tuning = loader.tuning
        Path(directory, f"rank{rank}.json").write_text(
            json.dumps({"epochs": epochs, "tuning": tuning})
        )
    finally:
        dist.destroy_process_group()


def test_ranks_with_uneven_batch_counts_do_not_hang(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    ranks = [context.Process(target=_uneven_rank, args=(r, str(tmp_path))) for r in (0, 1)]
    hung = start_and_join(ranks, timeout=90)
    assert not hung, f"rank(s) {hung} still waiting after 90 s: a meeting the others skipped"
    assert [p.exitcode for p in ranks] == [0, 0]
    for rank, length in enumerate(LENGTHS):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert result["epochs"] == [list(range(length))] * 2
        assert result["tuning"]  # the climb spanned both epochs: meetings were due


@pytest.mark.parametrize(
    ("local_rank", "current", "count", "expected"),
    [
        ("1", 0, 2, 1),  # set_device never called: the rank's own GPU, not cuda:0
        ("3", 0, 8, 3),
        ("0", 1, 2, 1),  # the user chose a device: that one
        ("1", 0, 1, 0),  # one GPU visible per rank (CUDA_VISIBLE_DEVICES per rank)
        (None, 0, 2, 0),  # no LOCAL_RANK (not torchrun): the current device
    ],
)
def test_nccl_meetings_use_the_ranks_own_gpu(
    monkeypatch: pytest.MonkeyPatch,
    local_rank: str | None,
    current: int,
    count: int,
    expected: int,
) -> None:
    if local_rank is None:
        monkeypatch.delenv("LOCAL_RANK", raising=False)
    else:
        monkeypatch.setenv("LOCAL_RANK", local_rank)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
    assert collective_device(os.environ) == torch.device("cuda", expected)
    assert Ranks(rank=0, world=2, local_world=2)._device() == torch.device("cuda", expected)


def test_gloo_meetings_stay_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "gloo")
    assert collective_device({"LOCAL_RANK": "1"}) == torch.device("cpu")
