"""The space: conditional, machine-aware, validated before any trial."""

from __future__ import annotations

import dataclasses

import optuna
import pytest
from torch.utils.data import DataLoader

from autotune import SpaceError
from autotune.machine._machine import Machine
from autotune.space._space import Choices, Fixed, IntRange, build_space

CPU = Machine(cpus=2, cpu_model="test", memory_bytes=8 * 2**30, shm_bytes=2**30, accelerator="cpu")
CPU_BF16 = dataclasses.replace(CPU, cpu_bf16=True)
GPU = dataclasses.replace(CPU, cpus=16, accelerator="cuda", gpus=("NVIDIA H100",), gpu_bf16=True)


def sample_many(space, n=200):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    settings = []
    for _ in range(n):
        trial = study.ask()
        settings.append(space.sample(trial))
        study.tell(trial, 1.0)
    return settings


@pytest.mark.parametrize("machine", [CPU, CPU_BF16, GPU])
def test_every_sampled_config_builds_a_valid_dataloader(machine: Machine) -> None:
    space = build_space({}, machine, batch_size=32)
    for settings in sample_many(space):
        assert space.contains(settings)
        if settings.num_workers == 0:
            assert settings.prefetch_factor is None and not settings.persistent_workers
        DataLoader(list(range(10)), **settings.dataloader_kwargs())  # raises if invalid


def test_cpu_space_leaves_out_what_needs_an_accelerator() -> None:
    space = build_space({}, CPU, batch_size=32)
    assert space.pin_memory == Fixed(False)
    assert space.amp == Fixed("off")
    assert space.threads == IntRange(1, 2)
    assert space.num_workers == IntRange(0, 8)  # 4 x the 2 usable CPUs
    assert space.batch_size == Choices((16, 32, 64))
    assert space.echo == Fixed(1)
    notes = " ".join(space.notes)
    assert "pin_memory" in notes and "amp" in notes and "echo" in notes


def test_gpu_space_tunes_pinning_and_amp_but_not_threads() -> None:
    space = build_space({}, GPU, batch_size=32)
    assert space.pin_memory == Choices((False, True))
    assert space.amp == Choices(("off", "bf16", "fp16"))
    assert space.threads == Fixed(None)
    no_bf16 = build_space({}, dataclasses.replace(GPU, gpu_bf16=False), batch_size=32)
    assert no_bf16.amp == Choices(("off", "fp16"))


def test_bf16_on_cpu_only_when_native() -> None:
    assert build_space({}, CPU_BF16, batch_size=8).amp == Choices(("off", "bf16"))
    with pytest.raises(SpaceError, match="allowed here"):
        build_space({"amp": ["off", "bf16"]}, CPU, batch_size=8)
    with pytest.raises(SpaceError, match="fp16"):
        build_space({"amp": "fp16"}, CPU_BF16, batch_size=8)


def test_user_narrows_and_fixes_knobs() -> None:
    space = build_space(
        {
            "num_workers": range(0, 5, 2),
            "batch_size": 64,
            "echo": [1, 2],
            "threads": {"low": 1, "high": 2},
        },
        CPU,
        batch_size=32,
    )
    assert space.num_workers == Choices((0, 2, 4))
    assert space.batch_size == Fixed(64)
    assert space.echo == Choices((1, 2))
    assert space.threads == IntRange(1, 2)
    assert {s.num_workers for s in sample_many(space, 60)} == {0, 2, 4}


def test_size_counts_the_conditional_space() -> None:
    space = build_space({"num_workers": [0, 1, 2], "batch_size": [8, 16]}, CPU, batch_size=8)
    configs = list(space.configs())
    assert space.size() == len(configs) == len({c.key() for c in configs})
    # (1 without workers + 2 worker counts x 4 prefetch x 2 persistent) x 2 batch x 2 threads
    assert space.size() == (1 + 2 * 4 * 2) * 2 * 2


def test_params_reproduce_a_config_when_enqueued() -> None:
    space = build_space({}, CPU, batch_size=32)
    target = next(c for c in space.configs() if c.num_workers == 3 and c.persistent_workers)
    study = optuna.create_study()
    study.enqueue_trial(space.params(target))
    assert space.sample(study.ask()) == target


def test_snap_moves_a_config_into_the_space() -> None:
    space = build_space({"num_workers": [0, 4], "batch_size": 64}, CPU, batch_size=32)
    target = next(space.configs())
    snapped = space.snap(dataclasses.replace(target, num_workers=3, batch_size=32))
    assert snapped.num_workers == 4 and snapped.batch_size == 64
    assert space.contains(snapped)


@pytest.mark.parametrize(
    ("user", "message"),
    [
        ({"num_workers": -1}, "num_workers must be an integer >= 0"),
        ({"num_workers": [0, 2, -3]}, "holds -3"),
        ({"batch_size": []}, "is empty"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1"),
        ({"prefetch_factor": 0}, "prefetch_factor must be an integer >= 1"),
        ({"num_workers": 0, "prefetch_factor": 2}, "fixes num_workers at 0"),
        ({"num_workers": 0, "persistent_workers": True}, "fixes num_workers at 0"),
        ({"pin_memory": True}, "runs on CPU"),
        ({"persistent_workers": "yes"}, "expected True or False"),
        ({"amp": "fp8"}, "allowed are"),
        ({"workers": 4}, "unknown knobs \\['workers'\\]"),
        ({"threads": {"low": 3, "high": 1}}, "low <= high"),
        ({"threads": {"min": 1}}, "a range is written"),
    ],
)
def test_bad_spaces_are_rejected_with_what_was_given(user, message) -> None:
    with pytest.raises(SpaceError, match=message):
        build_space(user, CPU, batch_size=32)


def test_neighbors_move_one_knob_one_step() -> None:
    space = build_space({"num_workers": [0, 1, 2, 4]}, CPU, batch_size=32)
    start = next(
        c
        for c in space.configs()
        if c.num_workers == 2
        and c.prefetch_factor == 2
        and c.batch_size == 32
        and c.threads == 1
        and not c.persistent_workers
    )
    around = space.neighbors(start)
    assert all(space.contains(s) for s in around)
    assert start not in around
    changed = [{k for k, v in s.to_dict().items() if v != start.to_dict()[k]} for s in around]
    assert all(len(c) == 1 for c in changed), changed
    moves = {(k, getattr(s, k)) for s, c in zip(around, changed, strict=True) for k in c}
    assert moves == {
        ("num_workers", 1),
        ("num_workers", 4),
        ("prefetch_factor", 1),
        ("prefetch_factor", 4),
        ("persistent_workers", True),
        ("batch_size", 16),
        ("batch_size", 64),
        ("threads", 2),
    }


def test_neighbors_start_and_stop_workers() -> None:
    space = build_space({"num_workers": [0, 1]}, CPU, batch_size=32)
    none = next(c for c in space.configs() if c.num_workers == 0)
    started = [s for s in space.neighbors(none) if s.num_workers == 1]
    assert started and started[0].prefetch_factor == 2
    stopped = [s for s in space.neighbors(started[0]) if s.num_workers == 0]
    assert stopped == [none]
