"""The configs a search tries first (autotune.pipeline._usual_starts.usual_starts)."""

from __future__ import annotations

from autotune import Machine, Settings
from autotune.pipeline._usual_starts import usual_starts as warm_starts
from autotune.space import build_space


def machine(cpus: int, accelerator: str = "cpu") -> Machine:
    return Machine(
        cpus=cpus, cpu_model="x", memory_bytes=2**34, shm_bytes=None, accelerator=accelerator
    )


def described(starts: tuple[Settings, ...]) -> list[str]:
    return [s.describe() for s in starts]


def test_on_cpu_the_rule_of_thumb_on_every_then_on_one_thread_the_split_and_no_workers() -> None:
    host = machine(4)
    space = build_space({}, host, 32)
    assert described(warm_starts(space, host, 32)) == [
        "workers=4 prefetch=2 persistent=yes batch=32 threads=4 worker_threads=1",
        "workers=4 prefetch=2 persistent=yes batch=32 threads=1 worker_threads=1",
        "workers=3 prefetch=2 persistent=yes batch=32 threads=1 worker_threads=1",
        "workers=0 batch=32 threads=4",
    ]


def test_the_split_uses_the_ranks_share_of_the_cpus() -> None:
    host = machine(8)
    space = build_space({}, host, 32, rank_cpus=2)
    starts = described(warm_starts(space, host, 32, cpus=2))
    assert "workers=1 prefetch=2 persistent=yes batch=32 threads=1 worker_threads=1" in starts
    assert starts[0] == "workers=2 prefetch=2 persistent=yes batch=32 threads=2 worker_threads=1"


def test_one_cpu_has_nothing_to_split() -> None:
    host = machine(1)
    space = build_space({}, host, 32)
    assert described(warm_starts(space, host, 32)) == [
        "workers=1 prefetch=2 persistent=yes batch=32 threads=1 worker_threads=1",
        "workers=0 batch=32 threads=1",
    ]


def test_with_the_threads_fixed_the_split_leaves_them_their_cpus() -> None:
    host = machine(4)
    space = build_space({"threads": 2}, host, 32)
    assert described(warm_starts(space, host, 32)) == [
        "workers=4 prefetch=2 persistent=yes batch=32 threads=2 worker_threads=1",
        "workers=2 prefetch=2 persistent=yes batch=32 threads=2 worker_threads=1",
        "workers=0 batch=32 threads=2",
    ]
    # Threads that take every CPU leave none to split off.
    every = build_space({"threads": 4}, host, 32)
    assert [s.num_workers for s in warm_starts(every, host, 32)] == [4, 0]


def test_on_a_gpu_the_model_runs_on_the_device_and_no_split_is_tried() -> None:
    host = machine(4, accelerator="cuda")
    space = build_space({"amp": "off"}, host, 32)
    starts = warm_starts(space, host, 32)
    assert [s.num_workers for s in starts] == [4, 0]
    assert all(s.pin_memory for s in starts[:1])


def test_the_widened_range_comes_second_then_the_split() -> None:
    # A small budget runs the first few: the region the worker sweep opened is measured
    # before the guesses.
    host = machine(2)
    space = build_space({"num_workers": {"low": 0, "high": 8}}, host, 32)
    assert described(warm_starts(space, host, 32, wide_workers=8)) == [
        "workers=2 prefetch=2 persistent=yes batch=32 threads=2 worker_threads=1",
        "workers=8 prefetch=2 persistent=yes batch=32 threads=2 worker_threads=1",
        "workers=2 prefetch=2 persistent=yes batch=32 threads=1 worker_threads=1",
        "workers=1 prefetch=2 persistent=yes batch=32 threads=1 worker_threads=1",
        "workers=0 batch=32 threads=2",
    ]


def test_the_fastest_compute_ceiling_leads_and_the_starts_on_one_thread_keep_it() -> None:
    host = machine(2)
    space = build_space({}, host, 32)
    fastest = Settings(batch_size=64, num_workers=0, threads=2)
    starts = described(warm_starts(space, host, 32, leading_model=fastest, wide_workers=8))
    assert starts == [
        "workers=2 prefetch=2 persistent=yes batch=64 threads=2 worker_threads=1",
        "workers=8 prefetch=2 persistent=yes batch=64 threads=2 worker_threads=1",
        "workers=2 prefetch=2 persistent=yes batch=64 threads=1 worker_threads=1",
        "workers=1 prefetch=2 persistent=yes batch=64 threads=1 worker_threads=1",
        "workers=0 batch=64 threads=2",
        "workers=2 prefetch=2 persistent=yes batch=32 threads=2 worker_threads=1",
        "workers=8 prefetch=2 persistent=yes batch=32 threads=2 worker_threads=1",
        "workers=2 prefetch=2 persistent=yes batch=32 threads=1 worker_threads=1",
        "workers=1 prefetch=2 persistent=yes batch=32 threads=1 worker_threads=1",
        "workers=0 batch=32 threads=2",
    ]


def test_every_start_lies_in_the_space_and_none_twice() -> None:
    host = machine(2)
    space = build_space({"num_workers": {"low": 0, "high": 1}, "batch_size": 32}, host, 32)
    starts = warm_starts(space, host, 32, leading_model=Settings(batch_size=32, threads=1))
    assert all(space.contains(s) for s in starts)
    assert len({s.key() for s in starts}) == len(starts)


def test_no_workers_at_the_fastest_batch_also_trains_on_every_thread() -> None:
    # numpy-memmap, seed 1: the model alone at batch 128 measured 1 thread 3% above 2
    # (15,217 vs 14,794, within the noise; 18,087 vs 15,081 in another search), so the
    # search never tried no workers, batch 128 and 2 threads: the grid's best.
    host = machine(2)
    space = build_space({}, host, 32)
    fastest = Settings(batch_size=64, num_workers=0, threads=1)
    assert described(warm_starts(space, host, 32, leading_model=fastest)) == [
        "workers=2 prefetch=2 persistent=yes batch=64 threads=1 worker_threads=1",
        "workers=1 prefetch=2 persistent=yes batch=64 threads=1 worker_threads=1",
        "workers=0 batch=64 threads=1",
        "workers=0 batch=64 threads=2",
        "workers=2 prefetch=2 persistent=yes batch=32 threads=2 worker_threads=1",
        "workers=2 prefetch=2 persistent=yes batch=32 threads=1 worker_threads=1",
        "workers=1 prefetch=2 persistent=yes batch=32 threads=1 worker_threads=1",
        "workers=0 batch=32 threads=2",
    ]


def test_the_loaders_best_comes_after_the_rule_of_thumb_on_the_fewest_threads() -> None:
    # tiny-model: the loader alone peaked at 8 workers on 2 CPUs, the plain loop's best
    # trained there on one thread, and the searches sampled it once or twice.
    host = machine(2)
    space = build_space({}, host, 64)
    fastest = Settings(batch_size=128, num_workers=0, threads=2)
    starts = described(warm_starts(space, host, 64, leading_model=fastest, loader_workers=8))
    assert starts[:5] == [
        "workers=2 prefetch=2 persistent=yes batch=128 threads=2 worker_threads=1",
        "workers=8 prefetch=2 persistent=yes batch=128 threads=1 worker_threads=1",
        "workers=2 prefetch=2 persistent=yes batch=128 threads=1 worker_threads=1",
        "workers=1 prefetch=2 persistent=yes batch=128 threads=1 worker_threads=1",
        "workers=0 batch=128 threads=2",
    ]
    assert "workers=8 prefetch=2 persistent=yes batch=64 threads=1 worker_threads=1" in starts
    # No loader figure, or none with workers: no such start.
    assert len(warm_starts(space, host, 64, loader_workers=None)) == 4
    assert len(warm_starts(space, host, 64, loader_workers=0)) == 4
