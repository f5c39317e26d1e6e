"""The cap on each DataLoader worker's native thread pools (``Settings.worker_threads``):
what the workers really run, through the tuned loader, the emitted code and the space."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import numpy  # noqa: F401  (loads the BLAS pool the workers inherit)
import pytest
import threadpoolctl
import torch
from torch.utils.data import DataLoader, Dataset

from autotune import ConfigError, Settings
from autotune.decide import cost
from autotune.decide._ceilings import limit_settings
from autotune.inloop._climb import ClimbOptions, neighbours
from autotune.machine import Machine
from autotune.settings._worker_threads import WorkerThreads
from autotune.space._space import Choices, build_space

CPU = Machine(cpus=2, cpu_model="test", memory_bytes=8 * 2**30, shm_bytes=2**30, accelerator="cpu")

PARENT_THREADS = 2
"""The parent's BLAS threads while a loader forks its workers (what they inherit)."""


def blas_threads() -> int:
    """The threads of the BLAS pools loaded in this process (the most of them)."""
    pools = [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
    assert pools, "numpy's BLAS is not loaded"
    return max(pools)


class PoolThreads(Dataset[torch.Tensor]):
    """Each item: the BLAS and torch threads of the process that loads it."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([blas_threads(), torch.get_num_threads()])


def three_blas_threads(worker_id: int) -> None:
    """A user's own worker_init_fn."""
    threadpoolctl.threadpool_limits(limits=3, user_api="blas")


def seen_in_workers(loader: Any) -> set[tuple[int, int]]:
    """(BLAS threads, torch threads) of every item, as the loader's workers loaded them."""
    with threadpoolctl.threadpool_limits(limits=PARENT_THREADS, user_api="blas"):
        batches = list(loader)
    return {tuple(row.tolist()) for batch in batches for row in batch}


def workers(worker_threads: int | None) -> Settings:
    return Settings(batch_size=2, num_workers=2, prefetch_factor=1, worker_threads=worker_threads)


def test_a_capped_loader_runs_each_workers_native_pools_on_that_many_threads() -> None:
    fork = {"multiprocessing_context": "fork"}
    assert seen_in_workers(workers(1).loader(PoolThreads(), **fork)) == {(1, 1)}
    # As is, a worker keeps the pool it was forked with (torch sets only its own to 1).
    assert seen_in_workers(workers(None).loader(PoolThreads(), **fork)) == {(PARENT_THREADS, 1)}


def test_the_users_worker_init_fn_runs_after_the_cap() -> None:
    loader = workers(1).loader(
        PoolThreads(), multiprocessing_context="fork", worker_init_fn=three_blas_threads
    )
    assert isinstance(loader, DataLoader)
    assert loader.worker_init_fn == WorkerThreads(1, then=three_blas_threads)
    assert seen_in_workers(loader) == {(3, 1)}


def test_the_cap_pickles_for_spawned_workers() -> None:
    init = WorkerThreads(2, then=three_blas_threads)
    assert pickle.loads(pickle.dumps(init)) == init
    with pytest.raises(ValueError, match="limit is 0"):
        WorkerThreads(0)


def test_the_code_caps_the_workers_as_the_loader_does() -> None:
    code = workers(1).to_code()
    assert "worker_init_fn=worker_init_fn," in code and "import threadpoolctl" in code
    namespace: dict[str, Any] = {"dataset": PoolThreads()}
    exec(compile(code, "<settings>", "exec"), namespace)
    assert seen_in_workers(namespace["loader"]) == {(1, 1)}
    assert "threadpoolctl" not in workers(None).to_code()


def test_without_workers_there_is_no_cap_to_set() -> None:
    assert Settings(batch_size=4, worker_threads=2).worker_threads is None
    assert Settings(batch_size=4, worker_threads=2) == Settings(batch_size=4)
    with pytest.raises(ConfigError, match="worker_threads is 0"):
        Settings(batch_size=4, num_workers=1, worker_threads=0)
    assert workers(1).describe().endswith("worker_threads=1")
    assert Settings.from_dict(workers(1).to_dict()) == workers(1)


def test_the_space_caps_workers_unless_the_user_widens_it() -> None:
    capped = build_space({"num_workers": [0, 2]}, CPU, batch_size=8)
    assert {s.worker_threads for s in capped.configs()} == {None, 1}
    assert all(s.worker_threads == 1 for s in capped.configs() if s.num_workers)
    assert capped.snap(workers(None)).worker_threads == 1
    wide = build_space({"num_workers": [0, 2], "worker_threads": [1, None]}, CPU, batch_size=8)
    assert wide.worker_threads == Choices((1, None))
    # Every config with workers twice (capped and not), those without once.
    assert wide.size() - capped.size() == sum(1 for s in capped.configs() if s.num_workers)
    assert wide.size() == len({s.key() for s in wide.configs()})
    as_is = dataclasses.replace(workers(None), batch_size=8, threads=1)
    assert wide.contains(as_is) and not capped.contains(as_is)
    with pytest.raises(Exception, match=r"worker_threads.*>= 1"):
        build_space({"worker_threads": 0}, CPU, batch_size=8)


def test_fewer_threads_per_worker_cost_less() -> None:
    assert cost(workers(1), 2) < cost(workers(None), 2)
    assert cost(workers(1), 2) < cost(workers(2), 2)


def test_workers_started_for_a_ceiling_or_a_climb_are_capped() -> None:
    none = Settings(batch_size=2)
    assert none.started_worker_threads() == 1 and workers(None).started_worker_threads() is None
    assert limit_settings(none, 4).worker_threads == 1
    assert limit_settings(workers(None), 4).worker_threads is None  # the winner's own
    options = ClimbOptions(max_workers=4)
    started = [s for s in neighbours(none, options) if s.num_workers]
    assert started and all(s.worker_threads == 1 for s in started)
    doubled = [s for s in neighbours(workers(None), options) if s.num_workers == 4]
    assert [s.worker_threads for s in doubled] == [None]
    stopped = dataclasses.replace(workers(1), num_workers=0, prefetch_factor=None)
    assert stopped.worker_threads is None
