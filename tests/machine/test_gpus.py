"""GPU discovery, selection and placement: real logic over an NVML stand-in."""

from __future__ import annotations

import dataclasses

import fake_nvml
import pytest
from fake_nvml import FakeGpu

from autotune import ConfigError, SearchOptions
from autotune.machine import detect_machine
from autotune.machine._gpus import Gpu, discover, load_nvml, select
from autotune.probe import Placement, ProbeRequest, Slot, SlotPool, WorkloadSource
from autotune.settings import Settings
from autotune.space import build_space

UUID_A = "GPU-aaaa1111-0000-0000-0000-000000000000"
UUID_B = "GPU-bbbb2222-0000-0000-0000-000000000000"


@pytest.fixture
def two_gpus(monkeypatch):
    return fake_nvml.install(monkeypatch, fake_nvml.two_a100s())


def test_gpus_are_numbered_as_nvml_lists_them(two_gpus) -> None:
    found = discover()
    assert [(g.ordinal, g.token, g.uuid) for g in found.gpus] == [
        (0, "0", UUID_A),
        (1, "1", UUID_B),
    ]
    assert found.gpus[0].name == "NVIDIA A100-SXM4-80GB"
    assert found.gpus[0].memory_bytes == 80 * 2**30
    assert found.gpus[0].bf16


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        ("1,0", [(0, "1", UUID_B), (1, "0", UUID_A)]),
        ("GPU-bbbb", [(0, "GPU-bbbb", UUID_B)]),  # a unique UUID prefix, as CUDA allows
        ("0,7,1", [(0, "0", UUID_A)]),  # CUDA ignores everything from an invalid entry on
        ("1,1", [(0, "1", UUID_B)]),
        ("GPU-", []),  # ambiguous prefix
        ("", []),
        ("-1", []),
    ],
)
def test_cuda_visible_devices_is_read_as_cuda_reads_it(
    two_gpus, monkeypatch, visible, expected
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    found = discover()
    assert [(g.ordinal, g.token, g.uuid) for g in found.gpus] == expected
    assert found.visible_env == visible


def test_selection_counts_the_visible_gpus(two_gpus, monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    found = discover()
    assert [g.uuid for g in select("1", found)] == [UUID_A]
    assert [g.uuid for g in select([0, 1], found)] == [UUID_B, UUID_A]
    assert select("all", found) == found.gpus == select(None, found)
    assert select("none", found) == ()
    with pytest.raises(ConfigError, match=r"GPU 2 is not visible: visible GPUs 0: .*1,0"):
        select("0,2", found)
    with pytest.raises(ConfigError, match="names a GPU twice"):
        select("1,1", found)
    with pytest.raises(ConfigError, match="'x' is not a GPU number"):
        SearchOptions(gpus="0,x")


def test_the_fingerprint_and_bf16_come_from_nvml(monkeypatch) -> None:
    fake_nvml.install(
        monkeypatch,
        [FakeGpu(name="Tesla V100", uuid=UUID_A, capability=(7, 0))],
    )
    machine = detect_machine()
    assert machine.accelerator == "cuda"
    assert machine.gpus == ("Tesla V100",)
    assert not machine.gpu_bf16
    # bf16 only where the GPU runs it natively; fp16 (with its GradScaler) on any GPU.
    assert build_space({}, machine, 32).amp.values() == ("off", "fp16")


def test_ampere_gpus_get_bf16(two_gpus) -> None:
    machine = detect_machine()
    assert machine.gpu_bf16
    assert build_space({}, machine, 32).amp.values() == ("off", "bf16", "fp16")


def test_without_nvml_there_is_no_gpu_and_the_reason_says_why() -> None:
    nvml, reason = load_nvml()
    if nvml is not None:
        pytest.skip("this machine has an NVIDIA driver")
    found = discover()
    assert found.gpus == ()
    assert found.nvml_error == reason
    assert "no GPU is visible (NVML:" in found.describe()


def request() -> ProbeRequest:
    return ProbeRequest(
        source=WorkloadSource(config_path="x.py"), settings=Settings(batch_size=8), device="cuda"
    )


def test_each_gpu_rank_gets_its_gpu_and_a_disjoint_cpu_share(two_gpus) -> None:
    placement = Placement.plan(
        device=None, gpus=None, ranks=None, discovery=discover(), cpus=range(16), usable=16
    )
    assert placement.ranks == 2 and placement.rank_cpus == 8
    assert placement.backend == "nccl"
    assert placement.visible is None  # every GPU, CUDA_VISIBLE_DEVICES unset: nothing to pin
    slots = placement.slots()
    pinned = [slot.apply(request()) for slot in slots]
    assert [p.device for p in pinned] == ["cuda:0", "cuda:0"]
    assert [dict(p.env)["CUDA_VISIBLE_DEVICES"] for p in pinned] == [UUID_A, UUID_B]
    assert [p.monitor_gpus for p in pinned] == [(UUID_A,), (UUID_B,)]
    assert pinned[0].cpus == tuple(range(8)) and pinned[1].cpus == tuple(range(8, 16))

    ddp = placement.ddp_request(
        dataclasses.replace(request(), memory_limit=2**30), {"static_graph": True}
    )
    assert ddp.memory_limit == 2 * 2**30  # one trial's limit, for each rank
    assert ddp.mode == "ddp" and ddp.ddp is not None
    assert dict(ddp.env)["CUDA_VISIBLE_DEVICES"] == f"{UUID_A},{UUID_B}"
    assert [r.device for r in ddp.ddp.ranks] == ["cuda:0", "cuda:1"]
    assert [r.cpus for r in ddp.ddp.ranks] == [tuple(range(8)), tuple(range(8, 16))]
    assert ddp.ddp.backend == "nccl" and ddp.ddp.kwargs == (("static_graph", True),)
    assert ddp.monitor_gpus == (UUID_A, UUID_B)


def test_one_selected_gpu_is_one_rank_with_every_cpu(two_gpus) -> None:
    placement = Placement.plan(
        device=None, gpus="1", ranks=None, discovery=discover(), cpus=range(16), usable=16
    )
    assert placement.ranks == 1 and placement.visible == "1"
    (slot,) = placement.slots()
    pinned = slot.apply(request())
    assert pinned.cpus is None
    assert dict(pinned.env)["CUDA_VISIBLE_DEVICES"] == UUID_B
    by_device = Placement.plan(
        device="cuda:1", gpus=None, ranks=None, discovery=discover(), cpus=range(4), usable=4
    )
    assert [g.uuid for g in by_device.gpus] == [UUID_B]


def test_a_gpu_nvml_cannot_name_is_pinned_by_its_cuda_number() -> None:
    # NVML missing, PyTorch seeing GPUs: the probe's GPU is known by its CUDA number only,
    # and the monitor is asked for it (and will say that NVML is unavailable).
    slot = Slot(index=0, device="cuda:0", cpus=None, gpu=Gpu(ordinal=0, token="3", name="x"))
    pinned = slot.apply(request())
    assert dict(pinned.env)["CUDA_VISIBLE_DEVICES"] == "3"
    assert pinned.monitor_gpus == ("3",)


def test_cpu_ranks_split_the_cpus_this_process_may_use(two_gpus) -> None:
    placement = Placement.plan(
        device="cpu",
        gpus=None,
        ranks=3,
        discovery=discover(),
        cpus=[2, 3, 5, 7, 8, 9, 11],
        usable=6,
    )
    assert placement.device_type == "cpu" and placement.backend == "gloo"
    assert placement.cpu_sets == ((2, 3), (5, 7), (8, 9))
    assert [s.device for s in placement.slots()] == ["cpu"] * 3
    assert all(s.gpu is None for s in placement.slots())


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"ranks": 3}, "ranks is 3, but 2 GPU"),
        ({"device": "cpu", "gpus": "0"}, "device is 'cpu' but gpus is '0'"),
        ({"device": "cuda", "gpus": "none"}, "device is 'cuda' but gpus is 'none'"),
        ({"device": "cpu", "ranks": 5}, "5 ranks need a CPU each at least, but this process"),
        ({"device": "mps", "ranks": 2}, "several ranks and gpus apply to CUDA GPUs and CPUs"),
    ],
)
def test_placements_that_cannot_work_are_refused(two_gpus, fields, message) -> None:
    arguments = {"device": None, "gpus": None, "ranks": None, **fields}
    with pytest.raises(ConfigError, match=message):
        Placement.plan(**arguments, discovery=discover(), cpus=range(4), usable=4)


def test_cuda_without_a_visible_gpu_is_refused(monkeypatch) -> None:
    fake_nvml.install(monkeypatch, [])
    with pytest.raises(ConfigError, match="device is 'cuda', but no GPU is visible"):
        Placement.plan(
            device="cuda", gpus=None, ranks=None, discovery=discover(), cpus=[0], usable=1
        )


def test_the_pool_gives_each_slot_to_one_trial_at_a_time(two_gpus) -> None:
    placement = Placement.plan(
        device="cpu", gpus=None, ranks=2, discovery=discover(), cpus=[0, 1], usable=2
    )
    pool = SlotPool(placement.slots())
    with pool.acquire() as first, pool.acquire() as second:
        assert {first.index, second.index} == {0, 1}
        assert set(first.cpus or ()).isdisjoint(second.cpus or ())
    with pool.acquire() as again:
        assert again.index in (0, 1)
