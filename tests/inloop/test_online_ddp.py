"""autotune.online under torch.distributed: the ranks meet at the same steps and agree
on rank 0's choice. Gloo on CPU, ranks forked from the test (no network)."""

from __future__ import annotations

import json
import logging
import multiprocessing
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch.distributed as dist
from test_online import TINY, Indices
from torch.utils.data import DistributedSampler

import autotune
from autotune.inloop._ddp import SYNC_STEPS, Ranks


@pytest.fixture
def one_rank(tmp_path: Path) -> Iterator[None]:
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_the_ranks_are_found_with_their_cpu_share(one_rank: None) -> None:
    ranks = Ranks.detect()
    assert ranks is not None and (ranks.rank, ranks.world) == (0, 1)
    assert ranks.cpu_share() >= 1


def test_one_rank_meets_every_sync_steps_and_agrees(
    one_rank: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    meetings: list[int] = []
    agreed: list[autotune.Settings] = []
    ends, agree = Ranks.ends, Ranks.agree

    def counting_ends(self: Ranks, spent: bool, finished: bool) -> bool:
        meetings.append(loader._tuner._steps)
        return ends(self, spent, finished)

    def recording_agree(self: Ranks, settings: autotune.Settings) -> autotune.Settings:
        agreed.append(agree(self, settings))
        return agreed[-1]

    monkeypatch.setattr(Ranks, "ends", counting_ends)
    monkeypatch.setattr(Ranks, "agree", recording_agree)
    with autotune.online(Indices(), batch_size=4, **TINY) as loader:
        # As many epochs as the climb takes: a switch whose hand-over would reach the
        # epoch's end waits for the next epoch, and how many switches one epoch holds
        # depends on the machine's load.
        for _ in range(20):
            seen = [i for batch in loader for i in batch.tolist()]
            assert sorted(seen) == list(range(160))
            if not loader.tuning:
                break
        assert not loader.tuning
        assert meetings and all(step % SYNC_STEPS == 0 for step in meetings)
        assert agreed == [loader.settings]


def _rank(rank: int, directory: str) -> None:
    """One rank of two: a climb on its half of the data, then rank 0's choice."""
    store = dist.FileStore(f"{directory}/store", 2)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    try:
        # Rank 1's items are slower, so its own climb would see other figures.
        dataset = Indices(length=320, delay=0.002 * (1 + 2 * rank))
        sampler = DistributedSampler(dataset, num_replicas=2, rank=rank, seed=1)
        log = logging.getLogger(f"autotune.inloop.rank{rank}")
        # 40 steps each: the budget (20 measured steps) ends before the epoch does.
        options = {**TINY, "budget_fraction": 0.5}
        with autotune.online(dataset, batch_size=4, sampler=sampler, log=log, **options) as loader:
            seen = [i for batch in loader for i in batch.tolist()]
            tuning = loader.tuning
            settings = loader.settings.to_dict()
        Path(directory, f"rank{rank}.json").write_text(
            json.dumps({"seen": seen, "settings": settings, "tuning": tuning})
        )
    finally:
        dist.destroy_process_group()


def test_two_ranks_agree_on_one_config(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    ranks = [context.Process(target=_rank, args=(r, str(tmp_path))) for r in (0, 1)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(timeout=60)
    assert [p.exitcode for p in ranks] == [0, 0]
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert results[0]["settings"] == results[1]["settings"]
    assert not results[0]["tuning"] and not results[1]["tuning"]
    assert sorted(results[0]["seen"] + results[1]["seen"]) == list(range(320))
