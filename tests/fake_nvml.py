"""A stand-in for the ``pynvml`` module at the device boundary: NVML's answers for GPUs
that this CPU machine does not have. Only what autotune calls is here, with pynvml's
names and return shapes; everything above it runs for real."""

from __future__ import annotations

import dataclasses
import types

import pytest

from autotune.machine import _gpus as _gpu

NVML_TEMPERATURE_GPU = 0
_TEXT = {3: "Not Supported", 6: "Not Found", 12: "Library Not Found"}


class NVMLError(Exception):
    """pynvml's error type: str() is NVML's text for the code."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _TEXT.get(self.value, f"NVML error {self.value}")


@dataclasses.dataclass
class FakeGpu:
    name: str
    uuid: str
    capability: tuple[int, int] = (8, 0)
    memory_total: int = 80 * 2**30
    memory_used: int = 3 * 2**30
    utilization: int = 50
    power_mw: int | None = 250_000
    """None: the GPU does not report power (NVML answers Not Supported)."""
    temperatures: list[int] = dataclasses.field(default_factory=list)
    """Every temperature read so far (each read is one degree warmer)."""
    cpu_affinity: tuple[int, ...] | None = None
    """The CPUs near it; None: NVML answers Not Supported."""


class FakeNvml:
    """The pynvml functions autotune uses, answering for ``gpus``."""

    NVMLError = NVMLError
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> FakeGpu:
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        raise NVMLError(6)

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> str:
        return gpu.name

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:
        return gpu.uuid

    def nvmlDeviceGetCudaComputeCapability(self, gpu: FakeGpu) -> tuple[int, int]:
        return gpu.capability

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> types.SimpleNamespace:
        return types.SimpleNamespace(
            total=gpu.memory_total, used=gpu.memory_used, free=gpu.memory_total - gpu.memory_used
        )

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> types.SimpleNamespace:
        return types.SimpleNamespace(gpu=gpu.utilization, memory=10)

    def nvmlDeviceGetTemperature(self, gpu: FakeGpu, sensor: int) -> int:
        assert sensor == NVML_TEMPERATURE_GPU
        gpu.temperatures.append(60 + len(gpu.temperatures))
        return gpu.temperatures[-1]

    def nvmlDeviceGetCpuAffinity(self, gpu: FakeGpu, words: int) -> list[int]:
        """pynvml's answer: ``words`` 64-bit words, bit N of the mask set for CPU N."""
        if gpu.cpu_affinity is None:
            raise NVMLError(3)
        mask = [0] * words
        for cpu in gpu.cpu_affinity:
            if cpu < 64 * words:
                mask[cpu // 64] |= 1 << (cpu % 64)
        return mask

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        if gpu.power_mw is None:
            raise NVMLError(3)
        return gpu.power_mw


def two_a100s() -> list[FakeGpu]:
    return [
        FakeGpu(name="NVIDIA A100-SXM4-80GB", uuid="GPU-aaaa1111-0000-0000-0000-000000000000"),
        FakeGpu(name="NVIDIA A100-SXM4-80GB", uuid="GPU-bbbb2222-0000-0000-0000-000000000000"),
    ]


def install(monkeypatch: pytest.MonkeyPatch, gpus: list[FakeGpu]) -> FakeNvml:
    """Make autotune read NVML from a stand-in for ``gpus`` (this process only)."""
    fake = FakeNvml(gpus)
    monkeypatch.setattr(_gpu, "load_nvml", lambda: (fake, None))
    # The GPUs are torch's too, as on a machine with the CUDA build of torch.
    monkeypatch.setattr(_gpu, "torch_has_cuda", lambda: True)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return fake


def uninstall_nvml(monkeypatch: pytest.MonkeyPatch, reason: str) -> None:
    """Make autotune find no NVML (no driver), whatever this machine has."""
    monkeypatch.setattr(_gpu, "load_nvml", lambda: (None, reason))
