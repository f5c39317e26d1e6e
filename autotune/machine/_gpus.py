"""The GPUs a search may use: read through NVML, named as CUDA names them, selected.

NVML (the ``pynvml`` module of nvidia-ml-py) is the device boundary: it lists
the GPUs, their names, memory and compute capability without creating a CUDA
context in the search process, and later reads their utilisation. Everything
above it (which GPUs ``CUDA_VISIBLE_DEVICES`` leaves visible, what ``--gpus``
selects) is plain logic over its answers, so tests replace :func:`load_nvml`
with a stand-in and run the rest for real.

GPU numbers are those a training process sees: ``--gpus 0,1`` means ``cuda:0``
and ``cuda:1`` after ``CUDA_VISIBLE_DEVICES`` has been applied, as torchrun
and PyTorch number them.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

from autotune._errors import ConfigError

GpuSpec: TypeAlias = "str | int | Sequence[int] | None"
"""What ``gpus`` accepts: "all" (or None), "none", "0,1", 1, [0, 1]."""

_VISIBLE = "CUDA_VISIBLE_DEVICES"
_NONE = ("none", "cpu", "")
_BF16_CAPABILITY = (8, 0)
_MASK_BITS = 64


@functools.cache
def load_nvml() -> tuple[Any | None, str | None]:
    """The initialised ``pynvml`` module, or None and why it cannot be used.

    Initialised once per process (NVML counts its initialisations; it is never
    shut down here, so each probe does not pay for it again).
    """
    try:
        import pynvml
    except ImportError as error:
        return None, f"nvidia-ml-py is not installed ({error})"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        return None, f"{_text(error)} (no NVIDIA driver on this machine?)"
    return pynvml, None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Gpu:
    """One visible GPU."""

    ordinal: int
    """Its number among the visible GPUs: ``cuda:N`` in a training process, what --gpus names."""
    token: str
    """How CUDA_VISIBLE_DEVICES names it: the user's own entry, or NVML's index."""
    name: str
    uuid: str | None = None
    """NVML's UUID, None when NVML cannot see it (a MIG instance, or no NVML)."""
    memory_bytes: int | None = None
    compute_capability: tuple[int, int] | None = None
    cpu_affinity: tuple[int, ...] | None = None
    """The CPUs near it (its NUMA node's), as NVML reports them; None when unknown."""

    @property
    def pin(self) -> str:
        """What CUDA_VISIBLE_DEVICES holds for a process that must use this GPU only."""
        return self.uuid or self.token

    @property
    def bf16(self) -> bool | None:
        """Whether it computes bf16 natively (compute capability 8.0 and up); None: unknown."""
        if self.compute_capability is None:
            return None
        return self.compute_capability >= _BF16_CAPABILITY

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        if self.compute_capability is not None:
            data["compute_capability"] = list(self.compute_capability)
        return data


@dataclasses.dataclass(frozen=True, kw_only=True)
class Discovery:
    """The GPUs this process may use, and how they were found."""

    gpus: tuple[Gpu, ...]
    nvml_error: str | None = None
    """Why NVML could not be read (None when it was)."""
    visible_env: str | None = None
    """CUDA_VISIBLE_DEVICES as found, None when unset."""
    torch_cuda: bool = True
    """Whether this process's torch is built with CUDA, so that a probe can use the GPUs."""

    def torch_problem(self) -> str | None:
        """Why no probe can use the GPUs NVML sees, in one line that says what to do; None
        when there is no GPU or torch can use them."""
        if not self.gpus or self.torch_cuda:
            return None
        import torch

        return (
            f"NVML sees {len(self.gpus)} GPU(s) ({self.gpus[0].name}), but this torch "
            f"{torch.__version__} is a CPU-only build and cannot use them: install the CUDA "
            "build of torch (https://pytorch.org/get-started/locally/), or pass gpus='none' "
            "to tune for the CPU."
        )

    def describe(self) -> str:
        """A short account for messages: what is visible, and why not more."""
        where = f"CUDA_VISIBLE_DEVICES={self.visible_env!r}" if self.visible_env is not None else ""
        if self.gpus:
            names = ", ".join(f"{g.ordinal}: {g.name}" for g in self.gpus)
            return f"visible GPUs {names}" + (f" ({where})" if where else "")
        reason = f"NVML: {self.nvml_error}" if self.nvml_error else where
        return "no GPU is visible" + (f" ({reason})" if reason else "")


def discover(environ: Mapping[str, str] | None = None) -> Discovery:
    """The GPUs visible to this process, in CUDA's numbering.

    Reads NVML; when NVML cannot be used but PyTorch sees CUDA devices, asks
    PyTorch instead (which initialises CUDA in this process). NVML knows nothing of
    torch, so whether torch can use what it lists is read apart (:attr:`Discovery.torch_cuda`).
    """
    env = os.environ if environ is None else environ
    visible_env = env.get(_VISIBLE)
    nvml, error = load_nvml()
    torch_cuda = torch_has_cuda()
    if nvml is None:
        return Discovery(gpus=_torch_gpus(visible_env), nvml_error=error, visible_env=visible_env)
    physical = [_read_device(nvml, index) for index in range(nvml.nvmlDeviceGetCount())]
    if visible_env is None:
        gpus = tuple(
            dataclasses.replace(gpu, ordinal=index, token=str(index))
            for index, gpu in enumerate(physical)
        )
    else:
        gpus = _apply_visible(visible_env, physical)
    return Discovery(gpus=gpus, visible_env=visible_env, torch_cuda=torch_cuda)


def torch_has_cuda() -> bool:
    """Whether this torch is built with CUDA (or ROCm), read without initialising CUDA
    (``torch.cuda.is_available()`` would, and forked probes could then not use it)."""
    import torch

    return bool(torch.backends.cuda.is_built())  # type: ignore[no-untyped-call]


def _read_device(nvml: Any, index: int) -> Gpu:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    try:
        capability: tuple[int, int] | None = tuple(  # type: ignore[assignment]
            int(v) for v in nvml.nvmlDeviceGetCudaComputeCapability(handle)
        )
    except nvml.NVMLError:
        capability = None
    return Gpu(
        ordinal=index,
        token=str(index),
        name=_text(nvml.nvmlDeviceGetName(handle)),
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        memory_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
        compute_capability=capability,
        cpu_affinity=_read_affinity(nvml, handle),
    )


def _read_affinity(nvml: Any, handle: Any) -> tuple[int, ...] | None:
    """The CPUs NVML names near the GPU: its bitmask of 64-bit words, one bit a CPU."""
    words = max(1, -(-(os.cpu_count() or 1) // _MASK_BITS))
    try:
        mask = nvml.nvmlDeviceGetCpuAffinity(handle, words)
    except nvml.NVMLError:
        return None
    cpus = tuple(
        index * _MASK_BITS + bit
        for index, word in enumerate(mask)
        for bit in range(_MASK_BITS)
        if int(word) >> bit & 1
    )
    return cpus or None


def _apply_visible(value: str, physical: Sequence[Gpu]) -> tuple[Gpu, ...]:
    """CUDA's reading of CUDA_VISIBLE_DEVICES: integers (NVML's, that is PCI bus order),
    ``GPU-`` UUIDs or unique prefixes of them, ``MIG-`` instances; the first entry that
    names no device (or one already named) hides it and every entry after it."""
    chosen: list[Gpu] = []
    for raw in value.split(","):
        token = raw.strip()
        found: Gpu | None = None
        if token.lstrip("+").isdigit():
            index = int(token)
            found = physical[index] if index < len(physical) else None
        elif token.startswith("GPU-"):
            matches = [g for g in physical if g.uuid and g.uuid.startswith(token)]
            found = matches[0] if len(matches) == 1 else None
        elif token.startswith("MIG-"):
            found = Gpu(ordinal=0, token=token, name=f"MIG instance {token}")
        if found is None or any(g.pin == found.pin for g in chosen):
            break
        chosen.append(dataclasses.replace(found, ordinal=len(chosen), token=token))
    return tuple(chosen)


def _torch_gpus(visible_env: str | None) -> tuple[Gpu, ...]:
    """GPUs as PyTorch sees them, for when NVML cannot be read."""
    import torch

    if not torch.cuda.is_available():
        return ()
    tokens = [t.strip() for t in visible_env.split(",")] if visible_env else []
    gpus = []
    for index in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(index)
        gpus.append(
            Gpu(
                ordinal=index,
                token=tokens[index] if index < len(tokens) else str(index),
                name=torch.cuda.get_device_name(index),
                memory_bytes=int(torch.cuda.get_device_properties(index).total_memory),
                compute_capability=(major, minor),
            )
        )
    return tuple(gpus)


def parse_spec(spec: GpuSpec) -> tuple[int, ...] | None:
    """The GPU numbers ``spec`` names; None means all visible, () none (CPU).

    Raises:
        ConfigError: not "all", "none", or GPU numbers.
    """
    if spec is None:
        return None
    if isinstance(spec, bool):
        raise ConfigError(f"gpus is {spec!r}; expected 'all', 'none' or GPU numbers such as '0,1'.")
    if isinstance(spec, str):
        text = spec.strip().lower()
        if text == "all":
            return None
        if text in _NONE:
            return ()
        entries: list[Any] = [part.strip() for part in text.split(",")]
    else:
        entries = [spec] if isinstance(spec, int) else list(spec)
    parsed = [_gpu_number(entry, spec) for entry in entries]
    if len(set(parsed)) != len(parsed):
        raise ConfigError(f"gpus is {spec!r}; it names a GPU twice.")
    return tuple(parsed)


def _gpu_number(entry: Any, spec: GpuSpec) -> int:
    """One entry of ``spec`` (an int, or the text of one) as a GPU number.

    Raises:
        ConfigError: the entry is not a whole number >= 0 (``spec`` is named in full).
    """
    if isinstance(entry, str) and entry.isdigit():
        entry = int(entry)
    if isinstance(entry, bool) or not isinstance(entry, int) or entry < 0:
        raise ConfigError(
            f"gpus is {spec!r}; expected 'all', 'none' or GPU numbers such as '0,1' "
            f"({entry!r} is not a GPU number)."
        )
    return entry


def select(spec: GpuSpec, discovery: Discovery) -> tuple[Gpu, ...]:
    """The visible GPUs that ``spec`` selects (all of them by default).

    Raises:
        ConfigError: ``spec`` names a GPU that is not visible.
    """
    numbers = parse_spec(spec)
    if numbers is None:
        return discovery.gpus
    missing = [n for n in numbers if n >= len(discovery.gpus)]
    if missing:
        raise ConfigError(
            f"gpus is {spec!r}, but GPU {missing[0]} is not visible: {discovery.describe()}. "
            "GPU numbers count the visible GPUs from 0, as cuda:N does."
        )
    return tuple(discovery.gpus[n] for n in numbers)
