"""autotune.online: a real loader in a plain loop, switching configs in mid-epoch.

Budgets are tiny (windows of two steps, one window per config) so that several
switches happen within the first epoch of a few dozen batches.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from torch.utils.data import Dataset, DistributedSampler, IterableDataset, get_worker_info

import autotune
from autotune.machine import detect_machine
from autotune.probe import Figures
from autotune.study import Attr, locate, open_study

LOGGER = "autotune.online"
TINY = {"budget_fraction": 1.0, "window_seconds": 0.0, "windows": 1, "retune": False}
"""A climb that measures each config for one window of two steps, all epoch long."""


class Indices(Dataset[int]):
    """Item i is i; each costs ``delay`` seconds, so workers help."""

    def __init__(self, length: int = 160, delay: float = 0.002) -> None:
        self.length = length
        self.delay = delay

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> int:
        time.sleep(self.delay)
        return index


class Stream(IterableDataset[int]):
    """0..length-1, each worker yielding its own share (as a sharded stream must)."""

    def __init__(self, length: int = 48) -> None:
        self.length = length

    def __iter__(self) -> Iterator[int]:
        info = get_worker_info()
        first, step = (0, 1) if info is None else (info.id, info.num_workers)
        for index in range(first, self.length, step):
            time.sleep(0.002)
            yield index


def switches(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "online: switch" in r.getMessage()]


def one_epoch(loader: autotune.OnlineLoader) -> list[int]:
    seen: list[int] = []
    for batch in loader:
        seen += batch.tolist()
    return seen


# ----------------------------------------------------------------- exactly once
@pytest.mark.parametrize("shuffle", [False, True])
def test_every_sample_once_per_epoch_across_switches(
    shuffle: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    torch.manual_seed(0)
    # 160 batches: a hand-over to 16 workers leaves them work (the old ones keep 32).
    with autotune.online(Indices(640), batch_size=4, shuffle=shuffle, **TINY) as loader:
        first = one_epoch(loader)
        in_first = len(switches(caplog))
        second = one_epoch(loader)
    assert in_first >= 2, "the budget should have made several switches in the first epoch"
    for seen in (first, second):
        assert sorted(seen) == list(range(640))
        assert (seen != sorted(seen)) is shuffle
    assert first != second or not shuffle  # a new order each epoch


class Counted(Dataset[int]):
    """Item i is i; counts its loads in memory shared with the workers."""

    def __init__(self, length: int) -> None:
        self.loads = multiprocessing.get_context("fork").Array("i", length)

    def __len__(self) -> int:
        return len(self.loads)

    def __getitem__(self, index: int) -> int:
        time.sleep(0.002)
        with self.loads.get_lock():
            self.loads[index] += 1
        return index


def test_a_switch_hands_over_what_the_old_workers_prefetched(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    dataset = Counted(640)
    with autotune.online(dataset, batch_size=4, shuffle=False, **TINY) as loader:
        handing_over = []
        seen = []
        for batch in loader:
            seen += batch.tolist()
            handing_over.append(loader.handing_over is not None)
    assert len(switches(caplog)) >= 2
    assert any(handing_over), "a switch from workers should have handed over their prefetch"
    assert seen == list(range(640))
    # Loaded once each: nothing a set of workers prefetched was thrown away and loaded
    # again by the next.
    assert list(dataset.loads) == [1] * 640


def test_drop_last_drops_the_same_tail_as_a_dataloader() -> None:
    with autotune.online(Indices(length=42), batch_size=4, shuffle=False, drop_last=True,
                         **TINY) as loader:  # fmt: skip
        assert len(loader) == 10
        assert one_epoch(loader) == list(range(40))


def test_distributed_ranks_share_the_dataset_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    dataset = Indices()
    seen: list[int] = []
    for rank in (0, 1):
        sampler = DistributedSampler(dataset, num_replicas=2, rank=rank, shuffle=True, seed=3)
        with autotune.online(dataset, batch_size=4, sampler=sampler, **TINY) as loader:
            loader.set_epoch(1)
            assert sampler.epoch == 1 and loader.sampler is sampler
            assert len(loader) == 20
            seen += one_epoch(loader)
    assert sorted(seen) == list(range(160))
    assert len(switches(caplog)) >= 2  # each rank switched in mid-epoch at least once


# ----------------------------------------------------------------- IterableDataset
def test_an_iterable_dataset_switches_only_between_epochs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    with autotune.online(Stream(), batch_size=4, **TINY) as loader:
        for _ in range(4):
            seen: list[int] = []
            for step, batch in enumerate(loader):
                if step == 0:
                    at_start = len(switches(caplog))
                    running = loader.running
                seen += batch.tolist()
                assert loader.running == running
            assert len(switches(caplog)) == at_start, "switched inside an epoch"
            assert sorted(seen) == list(range(48))
    assert switches(caplog), "no switch at any epoch boundary"
    notes = [r for r in caplog.records if "IterableDataset" in r.getMessage()]
    assert len(notes) == 1 and "epoch boundaries" in notes[0].getMessage()


# ----------------------------------------------------------------- nothing left behind
def workers() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


def shm_of(pids: set[int]) -> set[str]:
    names = set(os.listdir("/dev/shm"))
    return {n for n in names if any(n.startswith(f"torch_{pid}_") for pid in pids)}


def test_no_worker_or_shared_memory_outlives_a_switch_or_the_end() -> None:
    before = {p.pid for p in workers()}
    pids = {os.getpid()}
    shm_before = set(os.listdir("/dev/shm"))
    # Slow items (40 ms a batch without workers): workers win however busy the machine.
    loader = autotune.online(Indices(delay=0.01), batch_size=4, **TINY)
    for _ in range(2):
        for _batch in loader:
            alive = [p for p in workers() if p.pid not in before]
            pids |= {p.pid for p in alive}
            # Only the running config's workers, and those of the config it took over
            # from while they hand over their prefetch: every abandoned set was stopped.
            assert loader.running is not None
            old = loader.handing_over
            assert len(alive) == loader.running.num_workers + (old.num_workers if old else 0)
    assert loader.settings.num_workers > 0, "the climb should have kept workers"
    loader.close()
    assert {p.pid for p in workers()} == before
    assert not shm_of(pids) - shm_before


# ----------------------------------------------------------------- from a study
def bad_study(path: Path, **knobs: Any) -> Path:
    study = open_study(locate(path, None, name=path.stem), create=True)
    settings = {"batch_size": 32, "num_workers": 2, "prefetch_factor": 2, **knobs}
    study.set_user_attr(Attr.RESULT, {"settings": settings})
    return path


@pytest.mark.parametrize(
    ("knobs", "says"),
    [
        ({"num_workers": -2}, "num_workers is -2, but must be >= 0"),
        ({"prefetch_factor": 0}, "prefetch_factor is 0, but must be >= 1"),
        ({"num_workers": "four"}, "num_workers is 'four' (str), but must be int"),
        ({"pin_memory": "yes"}, "pin_memory is 'yes' (str), but must be bool"),
        ({"amp": "fp8"}, "amp is 'fp8', but must be one of"),
    ],
)
def test_a_bad_knob_in_a_study_says_what_and_where(
    tmp_path: Path, knobs: dict[str, Any], says: str
) -> None:
    path = bad_study(tmp_path / "bad.db", **knobs)
    with pytest.raises(autotune.ConfigError, match=str(path)) as caught:
        autotune.online(Indices(), batch_size=4, study=path)
    assert says in str(caught.value)


def test_it_starts_from_a_saved_choice_at_the_users_batch_size(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    saved = autotune.SearchResult(
        settings=autotune.Settings(batch_size=64, num_workers=2, prefetch_factor=4),
        figures=Figures(),
        device="cpu",
        machine=detect_machine("cpu"),
    )
    with autotune.online(Indices(), batch_size=4, study=saved, **TINY) as loader:
        assert loader.settings == autotune.Settings(batch_size=4, num_workers=2, prefetch_factor=4)
        next(iter(loader))
        assert loader.running is not None and loader.running.num_workers == 2
    assert "tuned at batch size 64" in caplog.text


# ----------------------------------------------------------------- into a study
def test_the_choice_is_recorded_for_load_and_show(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "online.db"
    options = {**TINY, "budget_fraction": 0.5}  # settles halfway through the first epoch
    with autotune.online(Indices(), batch_size=4, record=path, **options) as loader:
        one_epoch(loader)
        assert not loader.tuning
        chosen = loader.settings
    result = autotune.load(path, check_machine=False)
    assert result.settings == chosen
    assert not result.confirmed
    assert result.baseline is not None and result.baseline.settings.num_workers == 0
    assert result.samples_per_s > 0 and result.baseline.samples_per_s > 0
    assert result.figures.windows
    # the allocator rule its loaders ran under, for the code it emits
    assert result.workload["allocator"] == autotune.fix_allocator()
    assert ("autotune.fix_allocator()" in result.to_code()) == (
        result.workload["allocator"] == "fixed"
    )
    from autotune.cli import main

    assert main(["show", str(path)]) == 0
    shown = capsys.readouterr().out
    assert f"best: {chosen.describe()}" in shown
    assert "chosen online" in shown and "confirming round" not in shown
    assert "online" in shown and "baseline" in shown


def test_it_will_not_overwrite_a_searchs_confirmed_result(tmp_path: Path) -> None:
    path = tmp_path / "searched.db"
    confirmed = autotune.SearchResult(
        settings=autotune.Settings(batch_size=4),
        figures=Figures(),
        device="cpu",
        machine=detect_machine("cpu"),
    )
    open_study(locate(path, None, name="searched"), create=True).set_user_attr(
        Attr.RESULT, confirmed.to_dict()
    )
    with pytest.raises(autotune.StudyError, match="confirmed result of a search"):
        autotune.online(Indices(), batch_size=4, record=path)


# ----------------------------------------------------------------- arguments
@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"batch_size": 0}, "batch_size is 0"),
        ({"budget_fraction": 1.5}, "budget_fraction is 1.5"),
        ({"budget_seconds": 0}, "budget_seconds is 0"),
        ({"shuffle": True, "sampler": [0, 1]}, "give one or the other"),
    ],
)
def test_bad_arguments_say_what_was_given(kwargs: dict[str, Any], says: str) -> None:
    with pytest.raises(autotune.ConfigError, match=says):
        autotune.online(Indices(), **kwargs)


def test_after_settling_each_epoch_runs_the_choice() -> None:
    with autotune.online(Indices(), batch_size=4, **{**TINY, "budget_fraction": 0.5}) as loader:
        one_epoch(loader)
        assert not loader.tuning
        one_epoch(loader)
        assert loader.running == loader.settings  # persistence included, from epoch 2


def test_dropping_the_loader_stops_its_workers() -> None:
    before = {p.pid for p in workers()}
    saved = autotune.SearchResult(
        settings=autotune.Settings(batch_size=4, num_workers=2, prefetch_factor=2),
        figures=Figures(),
        device="cpu",
        machine=detect_machine("cpu"),
    )
    loader = autotune.online(Indices(), batch_size=4, study=saved, **TINY)
    epoch = iter(loader)
    next(epoch)
    assert len([p for p in workers() if p.pid not in before]) == 2
    del loader, epoch  # no reference cycle keeps them: they go now, not at the next gc
    assert {p.pid for p in workers()} == before


def test_a_loader_used_only_in_its_for_statement_still_iterates() -> None:
    # Nothing but the epoch holds the loader here; it must live as long as the epoch.
    seen = [i for batch in autotune.online(Indices(length=64), batch_size=4, **TINY)
            for i in batch.tolist()]  # fmt: skip
    assert sorted(seen) == list(range(64))
