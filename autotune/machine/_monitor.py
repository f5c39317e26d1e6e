"""What the devices did during a probe: GPU figures through NVML, CPU per core through psutil.

A :class:`Monitor` samples in a background thread of the search process while
a probe runs (what ``nvidia-smi`` and ``htop`` would show, recorded per trial).
Its figures cover the probe's measuring windows, not its start-up. A figure
that cannot be read is absent with the reason (no GPU, no NVML, not supported
by this GPU), never a zero.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psutil

from autotune.machine import _gpus

GPU_FIGURES = ("utilization", "memory", "temperature", "power")


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuFigures:
    """One GPU over a probe's measuring windows."""

    uuid: str
    utilization_percent: float | None = None
    """Mean of NVML's utilisation (share of time a kernel ran) over the samples."""
    memory_used_bytes: int | None = None
    """Peak memory used on the device (every process's, as nvidia-smi shows it)."""
    temperature_c: float | None = None
    """Peak temperature."""
    power_w: float | None = None
    """Mean power draw."""
    power_peak_w: float | None = None
    missing: dict[str, str] = dataclasses.field(default_factory=dict)
    """Figure -> why it is absent."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuFigures:
        return cls(**data)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MonitorFigures:
    """The devices during one probe."""

    seconds: float
    """The span the figures cover."""
    samples: int
    cores: tuple[int, ...] = ()
    """The CPUs watched (the probe's affinity)."""
    cpu_percent: tuple[float, ...] = ()
    """Utilisation of each CPU in ``cores`` (every process on it), 0-100; empty when the
    span held too few samples to tell."""
    gpus: tuple[GpuFigures, ...] = ()
    gpu_absent: str | None = None
    """Why there are no GPU figures (None when there are)."""

    @property
    def cpu_mean_percent(self) -> float | None:
        return statistics.fmean(self.cpu_percent) if self.cpu_percent else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "samples": self.samples,
            "cores": list(self.cores),
            "cpu_percent": list(self.cpu_percent),
            "cpu_mean_percent": self.cpu_mean_percent,
            "gpus": [g.to_dict() for g in self.gpus],
            "gpu_absent": self.gpu_absent,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MonitorFigures:
        return cls(
            seconds=data.get("seconds", 0.0),
            samples=data.get("samples", 0),
            cores=tuple(data.get("cores", ())),
            cpu_percent=tuple(data.get("cpu_percent", ())),
            gpus=tuple(GpuFigures.from_dict(g) for g in data.get("gpus", ())),
            gpu_absent=data.get("gpu_absent"),
        )


@dataclasses.dataclass(frozen=True)
class _Sample:
    at: float
    cpu: tuple[tuple[float, float], ...]
    """(busy, total) seconds per watched core, cumulative."""
    gpus: tuple[dict[str, float | str], ...]
    """Per GPU: figure -> its value, or the NVML error text."""


class Monitor:
    """Samples CPU cores and GPUs in the background until :meth:`stop`.

    Args:
        gpus: NVML UUIDs of the GPUs the probe trains on; empty on CPU.
        cores: the CPUs the probe may run on; None: this process's.
        interval: seconds between samples.
    """

    def __init__(
        self, *, gpus: Sequence[str], cores: Sequence[int] | None, interval: float = 0.2
    ) -> None:
        self.cores = tuple(sorted(cores if cores else _affinity()))
        self._uuids = tuple(gpus)
        self._handles: list[Any] = []
        self._nvml: Any = None
        self.gpu_absent: str | None = None
        if not gpus:
            self.gpu_absent = "the probe trained on CPU"
        else:
            self._open(gpus)
        self._samples: list[_Sample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._interval = interval
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="autotune-monitor", daemon=True)
        self._thread.start()

    def _open(self, uuids: Sequence[str]) -> None:
        nvml, error = _gpus.load_nvml()
        if nvml is None:
            self.gpu_absent = f"NVML unavailable: {error}"
            return
        try:
            self._handles = [nvml.nvmlDeviceGetHandleByUUID(uuid) for uuid in uuids]
        except nvml.NVMLError as error:
            self.gpu_absent = f"NVML cannot find the probe's GPU: {_gpus._text(error)}"
            return
        self._nvml = nvml

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def sample(self) -> None:
        """Read every watched core and GPU now."""
        times = psutil.cpu_times(percpu=True)
        cpu = tuple(_busy_total(times[core]) for core in self.cores if core < len(times))
        gpus = tuple(self._read_gpu(handle) for handle in self._handles)
        with self._lock:
            self._samples.append(_Sample(at=time.monotonic(), cpu=cpu, gpus=gpus))

    def _read_gpu(self, handle: Any) -> dict[str, float | str]:
        nvml = self._nvml
        reads: dict[str, Callable[[], float]] = {
            "utilization": lambda: float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
            "memory": lambda: float(nvml.nvmlDeviceGetMemoryInfo(handle).used),
            "temperature": lambda: float(
                nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
            ),
            "power": lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
        }
        values: dict[str, float | str] = {}
        for figure, read in reads.items():
            try:
                values[figure] = read()
            except nvml.NVMLError as error:
                values[figure] = _gpus._text(error) or type(error).__name__
        return values

    def stop(self) -> None:
        """Take a last sample and end the thread."""
        self._stop.set()
        self._thread.join(timeout=2)
        self.sample()

    def figures(self, start: float | None = None, end: float | None = None) -> MonitorFigures:
        """The figures over ``[start, end]`` (monotonic seconds; None: from the first
        sample, to the last). CPU utilisation is measured between the samples that
        bracket the span; GPU figures are taken from the samples inside it."""
        with self._lock:
            samples = list(self._samples)
        start = samples[0].at if start is None else start
        end = samples[-1].at if end is None else end
        inside = [s for s in samples if start <= s.at <= end]
        before = [s for s in samples if s.at <= start] or samples[:1]
        after = [s for s in samples if s.at >= end] or samples[-1:]
        first, last = before[-1], after[0]
        if not inside:
            inside = [first, last]
        deltas = [
            (b1 - b0, t1 - t0) for (b0, t0), (b1, t1) in zip(first.cpu, last.cpu, strict=True)
        ]
        cpu: tuple[float, ...] = ()
        if deltas and all(total > 0 for _, total in deltas):
            cpu = tuple(round(100.0 * busy / total, 1) for busy, total in deltas)
        gpus: tuple[GpuFigures, ...] = ()
        if self.gpu_absent is None:
            gpus = tuple(
                _summarise(uuid, [s.gpus[i] for s in inside]) for i, uuid in enumerate(self._uuids)
            )
        return MonitorFigures(
            seconds=max(0.0, end - start),
            samples=len(inside),
            cores=self.cores,
            cpu_percent=cpu,
            gpus=gpus,
            gpu_absent=self.gpu_absent,
        )


def _affinity() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(psutil.cpu_count() or 1))


def _busy_total(times: Any) -> tuple[float, float]:
    total = float(sum(times))
    idle = float(times.idle + getattr(times, "iowait", 0.0))
    return total - idle, total


def _summarise(uuid: str, readings: list[dict[str, float | str]]) -> GpuFigures:
    values: dict[str, list[float]] = {f: [] for f in GPU_FIGURES}
    missing: dict[str, str] = {}
    for reading in readings:
        for figure in GPU_FIGURES:
            value = reading.get(figure)
            if isinstance(value, float):
                values[figure].append(value)
            elif value is not None:
                missing[figure] = f"NVML: {value}"
    for figure in GPU_FIGURES:
        if values[figure]:
            missing.pop(figure, None)
        else:
            missing.setdefault(figure, "no sample")
    power = values["power"]
    return GpuFigures(
        uuid=uuid,
        utilization_percent=statistics.fmean(values["utilization"])
        if values["utilization"]
        else None,
        memory_used_bytes=int(max(values["memory"])) if values["memory"] else None,
        temperature_c=max(values["temperature"]) if values["temperature"] else None,
        power_w=statistics.fmean(power) if power else None,
        power_peak_w=max(power) if power else None,
        missing=missing,
    )
