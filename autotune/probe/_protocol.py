"""The values that cross between a search and its probe processes.

Everything here is a frozen dataclass of plain types, so a probe can run in a
child process, in a Ray worker or on another node.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any, Literal

from autotune import _noise
from autotune.machine import MonitorFigures
from autotune.settings import Settings

Mode = Literal["train", "compute", "data", "check", "ddp"]
"""train: the real loader and model; compute: the model on batches held in memory
(the compute ceiling); data: the loader alone (the data ceiling); check: build
everything once and run one step (the preflight); ddp: train as DistributedDataParallel
across the ranks of ``ProbeRequest.ddp``."""

FailureKind = Literal[
    "error", "oom", "timeout", "crash", "worker", "shm", "interrupted", "infeasible"
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkloadSource:
    """How a probe gets the workload: a config file's path, or the pickled workload."""

    config_path: str | None = None
    pickled: bytes | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class RankPlace:
    """Where one rank of a DDP probe runs."""

    device: str
    """"cuda:N" (N counts the GPUs the probe's CUDA_VISIBLE_DEVICES leaves) or "cpu"."""
    cpus: tuple[int, ...] | None = None
    """Its CPU affinity (its share of the node); None: the probe's."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class DdpSpec:
    """A DDP probe: one process per rank on this node, as torchrun would start them."""

    backend: str
    """"nccl" on GPUs, "gloo" on CPU."""
    ranks: tuple[RankPlace, ...]
    kwargs: tuple[tuple[str, Any], ...] = ()
    """Keyword arguments of DistributedDataParallel (bucket_cap_mb, static_graph...)."""

    @property
    def world_size(self) -> int:
        return len(self.ranks)


def reference_windows(max_windows: int) -> int:
    """Windows of a reference probe (a compute or data ceiling, a loader bound): one
    figure, not a comparison between close configs, so a third of a trial's
    ``max_windows`` (at least 3) measures it well enough, for a third of the time."""
    return max(3, max_windows // 3)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProbeRequest:
    """One probe: which config, how, and for how long."""

    source: WorkloadSource
    settings: Settings
    device: str
    mode: Mode = "train"
    window_seconds: float = 1.0
    """A window ends at the first step boundary after this many seconds."""
    max_windows: int = 9
    warmup_seconds: float = 1.0
    """Trained after the first batch and before the first window; not measured."""
    stall_timeout: float = 60.0
    """A probe silent this long (no first batch, no step ending) is killed as hung."""
    memory_limit: int | None = None
    """Bytes the probe's processes (workers included) may use before being stopped."""
    seed: int = 0
    cpus: tuple[int, ...] | None = None
    """CPU affinity of the probe and its workers (a DDP rank's share); None: all."""
    shard: tuple[int, int] | None = None
    """(ranks, rank): a probe of one rank of several loads that rank's part of each epoch
    through a ``DistributedSampler``, as DDP does; None: the whole dataset."""
    env: tuple[tuple[str, str], ...] = ()
    """Environment variables set in the probe before anything else (e.g. CUDA_VISIBLE_DEVICES)."""
    worker_start_method: str | None = None
    """How the probe's DataLoader starts workers: the search's own default (what the user's
    training gets), not the fork server the probe itself came from."""
    monitor_gpus: tuple[str, ...] = ()
    """The GPUs the probe trains on (NVML UUIDs where known), for the search's monitor;
    empty on CPU."""
    ddp: DdpSpec | None = None
    """The ranks and DDP settings of a "ddp" probe."""
    turns: tuple[Settings, ...] = ()
    """Configs measured in turns in this one process (modes "train", "compute", "data"):
    a window of each in turn, ``max_windows`` passes, every other pass in reverse order,
    so that each window of one config lies beside windows of the others
    (:mod:`autotune.probe._turns`); ``settings`` is the first of them. Empty:
    ``settings`` alone."""
    steady: float | None = None
    """A training probe whose windows so far (3 at least) all lie within this share of
    each other ends there, as if it had run ``max_windows``
    (:func:`~autotune.probe._steady.steady_share` says which loaders may); None: every
    window runs."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Window:
    """The figures of one window of steps."""

    index: int
    seconds: float
    samples: int
    """Samples the model trained on (an echoed batch counts each time)."""
    fresh: int
    """Fresh samples: those new from the loader, each counted once (with echo, a batch
    trains ``echo`` times but is fresh once)."""
    steps: int
    wait_seconds: float
    """Time the training loop spent blocked in ``next()`` on the loader."""
    copy_seconds: float = 0.0
    """Time the batches took to copy to the device, measured apart from the wait and
    outside it (a copy that runs while the training waits for the next batch is hidden
    by the wait), so that the two never add up past ``seconds``: about 0 on the CPU
    (the copy is a no-op), 0 in studies written before it was measured."""
    device_seconds: float | None = None
    """Time the device was busy, from each batch's copy to the end of its steps, by the
    device's own clock (CUDA events): gaps inside a step count as busy. None where no
    device clock was read (the CPU, other accelerators, a DDP probe's ranks, studies
    written before it was measured)."""

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_DEVICE_LIBRARIES = (
    "cuda",
    "cublas",
    "cudnn",
    "nccl",
    "hip out of memory",
    "mps backend out of memory",
    "xpu out of memory",
)
"""Names in an out-of-memory error that say the device's memory ran out."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Failure:
    """Why a probe did not finish."""

    kind: FailureKind
    message: str
    piece: str | None = None
    """The user's piece that failed: dataset, model, loss, step, optimizer, collate_fn."""
    traceback: str | None = None

    def on_device(self) -> bool:
        """Whether this is the accelerator's memory running out, not the host's: what a
        batch needs there does not depend on the loader that feeds it."""
        lowered = self.message.lower()
        return self.kind == "oom" and any(name in lowered for name in _DEVICE_LIBRARIES)

    def signature(self) -> str:
        """Equal for the same error in different configs."""
        return f"{self.kind}:{self.piece}:{self.message}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Failure:
        return cls(**data)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Figures:
    """What one probe measured."""

    windows: tuple[Window, ...] = ()
    startup_s: float | None = None
    """From creating the loader's iterator to the first batch (worker start-up included)."""
    peak_memory_bytes: int | None = None
    """Peak memory of the probe's process tree (proportional set size), workers included."""
    wall_s: float = 0.0
    monitor: MonitorFigures | None = None
    """GPU and CPU figures over the measuring windows (see autotune.machine._monitor)."""

    @property
    def samples(self) -> int:
        return sum(w.samples for w in self.windows)

    @property
    def seconds(self) -> float:
        return sum(w.seconds for w in self.windows)

    @property
    def samples_per_s(self) -> float:
        """Samples the model consumed per second over all windows."""
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    @property
    def fresh_per_s(self) -> float:
        """Fresh samples per second (differs from samples_per_s with echo)."""
        fresh = sum(w.fresh for w in self.windows)
        return fresh / self.seconds if self.seconds > 0 else 0.0

    @property
    def wait_fraction(self) -> float:
        """Share of the windows' time spent waiting for data (blocked in ``next()``)."""
        wait = sum(w.wait_seconds for w in self.windows)
        return wait / self.seconds if self.seconds > 0 else 0.0

    @property
    def copy_fraction(self) -> float:
        """Share of the windows' time spent copying batches to the device."""
        copy = sum(w.copy_seconds for w in self.windows)
        return copy / self.seconds if self.seconds > 0 else 0.0

    @property
    def device_busy_fraction(self) -> float | None:
        """Share of the windows' time the device was busy: by its own clock where the
        windows timed it, else NVML's utilisation over them (the mean of the GPUs the
        probe trained on); None on the CPU, or where neither was read."""
        timed = [w for w in self.windows if w.device_seconds is not None]
        seconds = sum(w.seconds for w in timed)
        if timed and seconds > 0:
            return min(1.0, sum(w.device_seconds or 0.0 for w in timed) / seconds)
        if self.monitor is None:
            return None
        readings = [g.utilization_percent for g in self.monitor.gpus]
        known = [r for r in readings if r is not None]
        return statistics.fmean(known) / 100.0 if known else None

    @property
    def window_spread(self) -> float:
        """Relative spread of the windows' throughputs (stdev / mean): the noise."""
        return _noise.window_spread([w.samples_per_s for w in self.windows])

    def to_dict(self) -> dict[str, Any]:
        return {
            "samples_per_s": self.samples_per_s,
            "fresh_per_s": self.fresh_per_s,
            "wait_fraction": self.wait_fraction,
            "copy_fraction": self.copy_fraction,
            "device_busy_fraction": self.device_busy_fraction,
            "startup_s": self.startup_s,
            "peak_memory_bytes": self.peak_memory_bytes,
            "wall_s": self.wall_s,
            "window_spread": self.window_spread,
            "windows": [w.to_dict() for w in self.windows],
            "monitor": self.monitor.to_dict() if self.monitor else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Figures:
        return cls(
            windows=tuple(Window(**w) for w in data.get("windows", ())),
            startup_s=data.get("startup_s"),
            peak_memory_bytes=data.get("peak_memory_bytes"),
            wall_s=data.get("wall_s", 0.0),
            monitor=MonitorFigures.from_dict(data["monitor"]) if data.get("monitor") else None,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Measurement:
    """A config and what one probe measured of it: the one record of a measurement.

    The probe's figures with the settings they were measured for; the study's trials
    (:class:`autotune.study.TrialRecord`), the choice and the report all hand it on.
    """

    settings: Settings
    figures: Figures

    @property
    def samples_per_s(self) -> float:
        return self.figures.samples_per_s

    def to_dict(self) -> dict[str, Any]:
        return {"settings": self.settings.to_dict(), "figures": self.figures.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        return cls(
            settings=Settings.from_dict(data["settings"]),
            figures=Figures.from_dict(data["figures"]),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProbeResult:
    """The outcome of one probe: its figures, and its failure if it failed."""

    figures: Figures
    failure: Failure | None = None
    stopped: bool = False
    """The caller stopped it early (the pruner)."""
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    """What a check probe learned of the workload (dataset length, parameters...)."""
    turns: tuple[ProbeResult, ...] = ()
    """With :attr:`ProbeRequest.turns`: each config's own result, in their order (its
    windows, its start-up, a failure of its own). ``failure`` is then one that ended the
    whole process: every config without all its windows shares it."""

    @property
    def ok(self) -> bool:
        return self.failure is None
