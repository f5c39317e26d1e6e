"""The space: conditional, machine-aware, validated before any trial."""

from __future__ import annotations

import dataclasses

import optuna
import pytest
from torch.utils.data import DataLoader

from autotune import Settings, SpaceError
from autotune.machine import Machine
from autotune.space import OFF_CPU_SHARE, fit_to_step
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


def test_a_step_off_the_cpu_trains_on_one_thread_and_leaves_the_cores_to_the_workers() -> None:
    space = build_space({}, CPU, batch_size=32)
    off_cpu = fit_to_step(space, {}, step_cpu_share=0.08)
    assert off_cpu.threads == Fixed(1)
    assert off_cpu.num_workers == space.num_workers  # the workers keep their range
    assert off_cpu.notes[-1].startswith("threads: fixed at 1: the training step kept 8% of")
    # A step on the CPU keeps at least a share of a core busy, even on a loaded machine.
    assert fit_to_step(space, {}, step_cpu_share=OFF_CPU_SHARE) == space
    assert fit_to_step(space, {}, step_cpu_share=1.9) == space
    assert fit_to_step(space, {}, step_cpu_share=None) == space  # an older study: unmeasured
    # The user's threads are theirs, and a space with its threads fixed stays as it is.
    widened = build_space({"threads": [1, 2]}, CPU, batch_size=32)
    assert fit_to_step(widened, {"threads": [1, 2]}, step_cpu_share=0.08) == widened
    on_gpu = build_space({}, GPU, batch_size=32)
    assert fit_to_step(on_gpu, {}, step_cpu_share=0.08) == on_gpu


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
    trial = study.ask()
    assert space.sample(trial) == target
    # Drawn under each knob's name: the enqueued values are found, not drawn at random.
    assert trial.params == space.params(target)


def test_snap_moves_a_config_into_the_space() -> None:
    space = build_space({"num_workers": [0, 4], "batch_size": 64}, CPU, batch_size=32)
    target = next(space.configs())
    snapped = space.snap(dataclasses.replace(target, num_workers=3, batch_size=32))
    assert snapped.num_workers == 4 and snapped.batch_size == 64
    assert space.contains(snapped)


def test_snap_moves_the_workers_threads_to_the_nearest_of_the_space() -> None:
    space = build_space({"num_workers": [0, 2], "worker_threads": [1, 4]}, CPU, batch_size=32)
    started = Settings(batch_size=32, num_workers=2, prefetch_factor=2, threads=1)
    assert space.snap(dataclasses.replace(started, worker_threads=3)).worker_threads == 4
    assert space.snap(dataclasses.replace(started, worker_threads=2)).worker_threads == 1


@pytest.mark.parametrize(
    ("user", "message"),
    [
        ({"num_workers": -1}, "num_workers must be an integer >= 0"),
        ({"num_workers": [0, 2, -3]}, "holds -3"),
        ({"batch_size": []}, "is empty"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1"),
        ({"prefetch_factor": 0}, "prefetch_factor must be an integer >= 1"),
        ({"worker_threads": 0}, "worker_threads must be an integer >= 1"),
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


CPU_NOTE = "pin_memory: left out: it needs an accelerator and this search runs on CPU."
GPU_NOTE = "threads: left out: the model runs on the GPU."
ECHO_NOTE = "echo: fixed at 1 (it changes what is learned; opt in with space['echo'])."
WORKER_THREADS_NOTE = (
    "worker_threads: fixed at 1 (the BLAS and OpenMP threads of each worker, as torch sets "
    "its own there; None leaves one per core in every worker; widen with "
    "space['worker_threads'])."
)


@pytest.mark.parametrize(
    ("machine", "notes"),
    [
        (CPU, [CPU_NOTE, "amp: left out: this CPU has no native bf16 and fp16 is for GPUs."]),
        (CPU_BF16, [CPU_NOTE, "amp: fp16 left out: it is for GPUs; the CPU runs bf16."]),
        (GPU, [GPU_NOTE]),
        (
            dataclasses.replace(GPU, gpu_bf16=False),
            [GPU_NOTE, "amp: bf16 left out: the GPU does not support it."],
        ),
    ],
)
def test_the_notes_say_what_each_machine_leaves_out(machine, notes) -> None:
    assert build_space({}, machine, batch_size=32).notes == (*notes, ECHO_NOTE, WORKER_THREADS_NOTE)
    # What the user sets is not left out, so it gets no note.
    chosen = build_space(
        {"amp": "off", "echo": [1, 2], "worker_threads": 1}, machine, batch_size=32
    )
    assert chosen.notes == tuple(n for n in notes if not n.startswith("amp"))


def test_defaults_follow_the_cpus_and_the_batch_size() -> None:
    one = dataclasses.replace(CPU, cpus=1)
    space = build_space({}, one, batch_size=2)
    assert space.num_workers == IntRange(0, 4)  # at least 4, even on one CPU
    assert space.threads == Fixed(1)
    assert space.batch_size == Choices((1, 2, 4))
    assert build_space({}, one, batch_size=1).batch_size == Choices((1, 2))
    assert space.prefetch_factor == Choices((1, 2, 4, 8))
    assert space.persistent_workers == Choices((False, True))
    # 4 per CPU, up to 32.
    assert build_space({}, GPU, batch_size=32).num_workers == IntRange(0, 32)
    many = dataclasses.replace(CPU, cpus=9)
    assert build_space({}, many, batch_size=32).num_workers == IntRange(0, 32)
    assert build_space({}, dataclasses.replace(CPU, cpus=7), batch_size=32).num_workers == (
        IntRange(0, 28)
    )
    # A rank's share of the CPUs, or a given bound, instead of the machine's.
    ranked = build_space({}, CPU, batch_size=32, rank_cpus=1)
    assert ranked.num_workers == IntRange(0, 4) and ranked.threads == Fixed(1)
    assert build_space({}, CPU, batch_size=32, max_workers=3).num_workers == IntRange(0, 3)


def test_single_values_fix_a_knob_and_lists_are_sorted() -> None:
    space = build_space(
        {
            "batch_size": [64],
            "num_workers": [4, 0, 2, 4],
            "echo": {"low": 2, "high": 2},
            "prefetch_factor": (2, 2),
            "threads": [None],
        },
        CPU,
        batch_size=32,
    )
    assert space.batch_size == Fixed(64)
    assert space.num_workers == Choices((0, 2, 4))
    assert space.echo == Fixed(2)
    assert space.prefetch_factor == Fixed(2)
    assert space.threads == Fixed(None)
    assert all(s.batch_size == 64 and s.echo == 2 for s in space.configs())


def test_none_is_a_value_only_for_threads() -> None:
    assert build_space({"threads": None}, CPU, batch_size=32).threads == Fixed(None)
    assert build_space({"threads": [None, 2]}, CPU, batch_size=32).threads == Choices((None, 2))
    for knob in ("num_workers", "prefetch_factor", "batch_size", "echo"):
        with pytest.raises(SpaceError, match=f"holds None; {knob} must be an integer"):
            build_space({knob: None}, CPU, batch_size=32)
    with pytest.raises(SpaceError, match="holds 0; threads must be an integer >= 1"):
        build_space({"threads": [None, 0]}, CPU, batch_size=32)


@pytest.mark.parametrize(
    ("user", "message"),
    [
        ({"echo": 0}, "echo must be an integer >= 1"),
        ({"threads": 0}, "threads must be an integer >= 1"),
        ({"batch_size": True}, "holds True; batch_size must be an integer"),
        ({"num_workers": "4"}, "holds '4'; num_workers must be an integer"),
        ({"threads": {"low": 1, "high": 2.5}}, "expected integers with low <= high"),
        ({"threads": {"min": 1}}, r"space\['threads'\] is \{'min': 1\}; a range is written"),
        ({"amp": "bf16"}, r"does not run natively; allowed here: \['off'\]"),
        (
            {"pin_memory": [False, True]},
            "runs on CPU; pinned memory only helps .* Remove it or set it to False",
        ),
        (
            {"num_workers": [0], "persistent_workers": False},
            "fixes num_workers at 0; persistent_workers only applies with workers. "
            "Allow num_workers",
        ),
    ],
)
def test_more_bad_spaces_are_rejected(user, message) -> None:
    with pytest.raises(SpaceError, match=message):
        build_space(user, CPU, batch_size=32)


def test_good_spaces_are_accepted() -> None:
    assert build_space({"num_workers": 0}, CPU, batch_size=32).num_workers == Fixed(0)
    bf16 = build_space({"amp": ["off", "bf16"]}, CPU_BF16, batch_size=32)
    assert bf16.amp == Choices(("off", "bf16"))
    assert build_space({"pin_memory": False}, CPU, batch_size=32).pin_memory == Fixed(False)
    assert build_space({"echo": [1, 2]}, CPU, batch_size=32).echo == Choices((1, 2))
    assert build_space({"threads": 1}, CPU, batch_size=32).threads == Fixed(1)


def test_size_counts_one_config_without_workers_whatever_the_worker_counts() -> None:
    for workers in ([0, 2], [1, 2], [0, 1, 2, 3]):
        space = build_space({"num_workers": workers}, CPU, batch_size=32)
        assert space.size() == len(list(space.configs()))


def test_snap_reads_none_as_torchs_defaults() -> None:
    space = build_space(
        {"num_workers": [0, 2], "prefetch_factor": [1, 4], "threads": {"low": 1, "high": 2}},
        CPU,
        batch_size=32,
    )
    # prefetch_factor None is torch's 2 (nearer 1 than 4); threads None is not a count.
    snapped = space.snap(Settings(batch_size=32, num_workers=2, amp="bf16"))
    assert snapped.prefetch_factor == 1
    assert snapped.threads == 1
    assert snapped.amp == "off"  # not in the space: its first value
    assert space.contains(snapped)


def test_neighbors_of_a_config_without_workers_move_one_knob() -> None:
    space = build_space({"num_workers": [0, 1], "prefetch_factor": [1, 4]}, CPU, batch_size=32)
    none = Settings(batch_size=32, threads=1)
    around = {s.key(): s for s in space.neighbors(none)}
    # Starting workers takes torch's prefetch (2, snapped to the nearer 1), not persistent,
    # and the space's cap on the workers' native threads.
    started = Settings(batch_size=32, num_workers=1, prefetch_factor=1, threads=1, worker_threads=1)
    expected = [
        started,
        dataclasses.replace(none, batch_size=16),
        dataclasses.replace(none, batch_size=64),
        dataclasses.replace(none, threads=2),
    ]
    assert around == {s.key(): s for s in expected}


def test_moving_the_workers_keeps_the_other_worker_knobs() -> None:
    space = build_space({"num_workers": [0, 1, 2]}, CPU, batch_size=32)
    one = Settings(batch_size=32, num_workers=1, prefetch_factor=4, persistent_workers=True)
    moved = [s for s in space.neighbors(dataclasses.replace(one, threads=1)) if s.num_workers == 2]
    assert [(s.prefetch_factor, s.persistent_workers) for s in moved] == [(4, True)]


def test_neighbors_of_a_config_outside_the_space_move_the_knobs_inside_it() -> None:
    space = build_space({"num_workers": [0, 2, 4]}, CPU, batch_size=32)
    outside = Settings(batch_size=32, num_workers=3, prefetch_factor=2, threads=1)
    around = space.neighbors(outside)
    assert {s.batch_size for s in around} >= {16, 64}
    assert all(space.contains(s) for s in around)


def test_the_space_as_the_study_records_it_and_as_it_reads() -> None:
    space = build_space(
        {"num_workers": [0, 2, 4], "threads": {"low": 1, "high": 2}}, CPU, batch_size=32
    )
    notes = [
        CPU_NOTE,
        "amp: left out: this CPU has no native bf16 and fp16 is for GPUs.",
        ECHO_NOTE,
        WORKER_THREADS_NOTE,
    ]
    assert space.to_dict() == {
        "num_workers": {"choices": [0, 2, 4]},
        "prefetch_factor": {"choices": [1, 2, 4, 8]},
        "persistent_workers": {"choices": [False, True]},
        "pin_memory": {"fixed": False},
        "batch_size": {"choices": [16, 32, 64]},
        "amp": {"fixed": "off"},
        "echo": {"fixed": 1},
        "threads": {"low": 1, "high": 2},
        "worker_threads": {"fixed": 1},
        "notes": notes,
    }
    assert space.describe() == [
        "num_workers: one of 0, 2, 4",
        "prefetch_factor: one of 1, 2, 4, 8 (with workers)",
        "persistent_workers: one of False, True (with workers)",
        "pin_memory: fixed at False",
        "batch_size: one of 16, 32, 64",
        "amp: fixed at off",
        "echo: fixed at 1",
        "threads: 1..2",
        "worker_threads: fixed at 1 (with workers)",
        *notes,
    ]
