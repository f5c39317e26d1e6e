"""A GPU machine whose torch is a CPU-only build: the search refuses in one line that says
what to install, rather than every probe failing; and pinned memory is offered only where
the probe's loader keeps it (CUDA), so no "pinned" trial measures unpinned loading."""

from __future__ import annotations

import fake_nvml
import pytest
import torch

from autotune import ConfigError, SpaceError
from autotune.machine import _gpus
from autotune.machine._gpus import discover, torch_has_cuda
from autotune.machine._machine import Machine
from autotune.probe._placement import Placement
from autotune.space._space import build_space


@pytest.fixture
def cpu_torch_on_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml.install(monkeypatch, fake_nvml.two_a100s())
    monkeypatch.setattr(_gpus, "torch_has_cuda", lambda: False)


def place(**fields: object):
    arguments = {"device": None, "gpus": None, "ranks": None, **fields}
    return Placement.plan(**arguments, discovery=discover(), cpus=range(4), usable=4)


@pytest.mark.parametrize("device", [None, "cuda", "cuda:1"])
def test_a_cpu_only_torch_with_gpus_is_refused_in_one_actionable_line(
    cpu_torch_on_gpus: None, device: str | None
) -> None:
    with pytest.raises(ConfigError) as raised:
        place(device=device)
    message = str(raised.value)
    assert "\n" not in message
    assert "NVML sees 2 GPU(s)" in message and "CPU-only build" in message
    assert "install the CUDA build of torch" in message
    assert "gpus='none'" in message


def test_a_cpu_only_torch_still_tunes_for_the_cpu_when_asked(cpu_torch_on_gpus: None) -> None:
    for fields in ({"gpus": "none"}, {"device": "cpu"}):
        placement = place(**fields)
        assert placement.device_type == "cpu" and placement.gpus == ()


def test_the_build_is_read_without_starting_cuda() -> None:
    assert torch_has_cuda() == torch.backends.cuda.is_built()
    assert not torch.cuda.is_initialized()


@pytest.mark.skipif(torch.backends.cuda.is_built(), reason="this torch is built with CUDA")
def test_this_machines_cpu_only_torch_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        _gpus, "load_nvml", lambda: (fake_nvml.FakeNvml(fake_nvml.two_a100s()), None)
    )
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    found = discover()
    assert len(found.gpus) == 2 and not found.torch_cuda


def machine(accelerator: str) -> Machine:
    return Machine(
        cpus=8, cpu_model="x", memory_bytes=2**34, shm_bytes=2**30, accelerator=accelerator
    )


@pytest.mark.parametrize(
    ("accelerator", "offered"), [("cuda", True), ("mps", False), ("cpu", False)]
)
def test_pinned_memory_is_offered_only_where_the_loader_pins(
    accelerator: str, offered: bool
) -> None:
    space = build_space({}, machine(accelerator), 32)
    assert (True in space.domain("pin_memory").values()) is offered


def test_pinned_memory_asked_for_off_cuda_is_refused() -> None:
    with pytest.raises(
        SpaceError, match="space\\['pin_memory'\\] allows True, but this search runs on mps"
    ):
        build_space({"pin_memory": [False, True]}, machine("mps"), 32)
