"""The machine a search runs on: what bounds the space, and its fingerprint.

A study records the fingerprint, so settings loaded on another machine can
say what differs (8 CPUs then, 2 now: the worker count is likely wrong).
"""

from __future__ import annotations

import dataclasses
import math
import os
import platform
import shutil
import socket
from pathlib import Path
from typing import Any

import psutil
import torch

from autotune.machine._gpus import Discovery, discover

_CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Machine:
    """What autotune knows of the machine it measures on."""

    cpus: int
    """CPUs this process may use: its affinity mask, capped by a cgroup CPU quota."""
    cpu_model: str
    """The processor's model name."""
    memory_bytes: int
    """Total RAM."""
    shm_bytes: int | None
    """Size of /dev/shm, where DataLoader workers hand batches over (None if absent)."""
    accelerator: str
    """The device type probes train on: "cuda" or "cpu"."""
    gpus: tuple[str, ...] = ()
    """Model names of the visible GPUs (CUDA_VISIBLE_DEVICES applied)."""
    cpu_bf16: bool = False
    """Whether the CPU computes bf16 natively (AVX512-BF16 or AMX)."""
    gpu_bf16: bool = False
    """Whether every visible GPU computes bf16 natively (compute capability 8.0 and up)."""
    torch_version: str = ""
    python_version: str = ""
    hostname: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The fingerprint as JSON types."""
        data = dataclasses.asdict(self)
        data["gpus"] = list(self.gpus)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Machine:
        """Rebuild from :meth:`to_dict`; fields this version does not know are ignored."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["gpus"] = tuple(values.get("gpus", ()))
        return cls(**values)

    def differences(self, other: Machine) -> list[str]:
        """What differs between two machines in ways that change the best settings."""
        diffs = []
        if self.cpus != other.cpus:
            diffs.append(f"CPUs {self.cpus} -> {other.cpus}")
        if self.cpu_model != other.cpu_model:
            diffs.append(f"CPU {self.cpu_model!r} -> {other.cpu_model!r}")
        if self.gpus != other.gpus:
            diffs.append(f"GPUs {list(self.gpus)} -> {list(other.gpus)}")
        if self.torch_version != other.torch_version:
            diffs.append(f"torch {self.torch_version} -> {other.torch_version}")
        low, high = sorted((self.memory_bytes, other.memory_bytes))
        if high > 0 and low / high < 0.9:
            diffs.append(
                f"RAM {self.memory_bytes / 2**30:.1f} GiB -> {other.memory_bytes / 2**30:.1f} GiB"
            )
        return diffs


def usable_cpus() -> int:
    """CPUs this process may run on (affinity and cgroup quota), not the machine's total."""
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        count = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    if quota is not None:
        count = min(count, quota)
    return max(count, 1)


def _cgroup_cpu_quota() -> int | None:
    try:
        quota, period = _CGROUP_CPU_MAX.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return max(1, math.ceil(int(quota) / int(period)))


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_bf16() -> bool:
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


def _shm_bytes() -> int | None:
    try:
        return shutil.disk_usage("/dev/shm").total
    except OSError:
        return None


def detect_machine(device: str | None = None, *, discovery: Discovery | None = None) -> Machine:
    """Read the fingerprint of this machine.

    Args:
        device: the device type probes will use ("cuda" or "cpu"); None picks
            "cuda" when a GPU is visible, else "cpu".
        discovery: the visible GPUs, when already read (NVML, without a CUDA context).
    """
    found = discovery if discovery is not None else discover()
    accelerator = device.split(":")[0] if device else ("cuda" if found.gpus else "cpu")
    gpus = tuple(g.name for g in found.gpus)
    gpu_bf16 = bool(found.gpus) and all(g.bf16 for g in found.gpus)
    return Machine(
        cpus=usable_cpus(),
        cpu_model=_cpu_model(),
        memory_bytes=psutil.virtual_memory().total,
        shm_bytes=_shm_bytes(),
        accelerator=accelerator,
        gpus=gpus,
        cpu_bf16=_cpu_bf16(),
        gpu_bf16=gpu_bf16,
        torch_version=torch.__version__,
        python_version=platform.python_version(),
        hostname=socket.gethostname(),
    )
