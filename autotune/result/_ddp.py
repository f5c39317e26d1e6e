"""The DDP settings of a result: world size, per-rank loader, DDP keywords, the torchrun
line, and what each DDP probe measured."""

from __future__ import annotations

import dataclasses
from typing import Any

from autotune._format import format_rate
from autotune.probe import Failure, Figures
from autotune.result._launch import accumulation_steps, ddp_code, lr_note, torchrun_line
from autotune.settings import AllocatorState, Settings


@dataclasses.dataclass(frozen=True, kw_only=True)
class DdpMeasurement:
    """One DDP probe: a config, DDP keywords, and the aggregate figures of all ranks.

    A :class:`~autotune.probe.Measurement` holds one process's figures for a config;
    this holds more: the DDP keywords measured, the ranks' figures added up, the role
    of the probe in the DDP stage, and a failure (DDP probes that fail are kept, since
    a keyword that breaks training is part of what the stage reports).
    """

    settings: Settings
    kwargs: dict[str, Any]
    figures: Figures
    failure: Failure | None = None
    role: str = "winner"
    """winner, finalist (with ddp_finalists), or knob (tuning a DDP keyword)."""

    @property
    def samples_per_s(self) -> float | None:
        return None if self.failure else self.figures.samples_per_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": self.settings.to_dict(),
            "kwargs": dict(self.kwargs),
            "role": self.role,
            "samples_per_s": self.samples_per_s,
            "figures": self.figures.to_dict(),
            "failure": self.failure.to_dict() if self.failure else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DdpMeasurement:
        return cls(
            settings=Settings.from_dict(data["settings"]),
            kwargs=dict(data.get("kwargs", {})),
            figures=Figures.from_dict(data.get("figures", {})),
            failure=Failure.from_dict(data["failure"]) if data.get("failure") else None,
            role=data.get("role", "winner"),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class DdpResult:
    """The settings for a DDP run on this node, and what the DDP probes measured."""

    world_size: int
    backend: str
    device_type: str
    settings: Settings
    """Per rank: every rank builds its loader with these."""
    kwargs: dict[str, Any]
    """DistributedDataParallel keywords."""
    rank_cpus: int
    """CPUs of each rank (the share its workers were tuned for)."""
    cpu_sets: tuple[tuple[int, ...], ...] = ()
    """Each rank's CPUs as its probes ran pinned to them; empty: not recorded."""
    user_batch_size: int
    """The batch size the user trains with today."""
    visible: str | None = None
    """CUDA_VISIBLE_DEVICES of the selected GPUs; None: the environment's."""
    figures: Figures | None = None
    """The aggregate figures of the chosen DDP config; None when it failed."""
    single_samples_per_s: float | None = None
    """One rank alone, with its share of the node (the confirming measurement)."""
    batch_gain: float | None = None
    """How much faster as DDP the next larger batch trained than the config the rounds
    confirmed, their DDP probes side by side, when the stage took it; None: it kept the
    batch."""
    speedup: float | None = None
    """With the larger batch taken: the rounds' speedup of the config they confirmed over
    the default loader (1 for the default itself) times :attr:`batch_gain`, the chosen
    config's speedup as the search measured it; None otherwise."""
    measurements: tuple[DdpMeasurement, ...] = ()
    notes: tuple[str, ...] = ()
    failure: Failure | None = None
    """Why the DDP probe of the chosen config failed (the settings still apply per rank)."""
    allocator: AllocatorState | None = None
    """The C allocator's rule the probes ran under (:func:`autotune.fix_allocator`'s
    answer); None: not recorded (a study from before autotune fixed it)."""

    @property
    def global_batch_size(self) -> int:
        return self.settings.batch_size * self.world_size

    @property
    def samples_per_s(self) -> float | None:
        """Samples per second of all ranks together."""
        return self.figures.samples_per_s if self.figures else None

    @property
    def scaling_efficiency(self) -> float | None:
        """Aggregate / (ranks x one rank alone): 1.0 is perfect scaling."""
        if self.samples_per_s is None or not self.single_samples_per_s:
            return None
        return self.samples_per_s / (self.world_size * self.single_samples_per_s)

    @property
    def threads(self) -> int:
        """torch's threads per rank: the tuned ones, else one per CPU of its share."""
        return self.settings.threads or self.rank_cpus

    def torchrun(self) -> str:
        return torchrun_line(
            world_size=self.world_size,
            device_type=self.device_type,
            visible=self.visible,
            threads=self.threads,
            allocator=self.allocator,
            cpu_sets=self.cpu_sets,
        )

    @property
    def gradient_accumulation_steps(self) -> int:
        """Batches per optimizer step that keep the user's global batch (1: none do)."""
        return accumulation_steps(self.user_batch_size, self.global_batch_size)

    def lr_note(self) -> str | None:
        return lr_note(
            user_batch_size=self.user_batch_size,
            per_rank_batch_size=self.settings.batch_size,
            world_size=self.world_size,
            accumulation=self.gradient_accumulation_steps,
        )

    def to_code(self, dataset: str = "dataset") -> str:
        return ddp_code(
            settings=self.settings,
            kwargs=self.kwargs,
            backend=self.backend,
            device_type=self.device_type,
            world_size=self.world_size,
            launch=self.torchrun(),
            allocator=self.allocator,
            dataset=dataset,
        )

    def describe(self) -> list[str]:
        """Lines for the terminal."""
        lines = [
            f"DDP: {self.world_size} ranks ({self.backend}), per-rank batch "
            f"{self.settings.batch_size}, global batch {self.global_batch_size}, "
            f"{self.rank_cpus} CPU(s) per rank"
        ]
        if self.samples_per_s is not None:
            line = f"  {format_rate(self.samples_per_s)} samples/s across the ranks"
            if self.scaling_efficiency is not None:
                line += f", scaling efficiency {self.scaling_efficiency:.0%} vs one rank alone"
            lines.append(line)
        elif self.failure is not None:
            lines.append(f"  the DDP probe failed ({self.failure.kind}): {self.failure.message}")
        kwargs = ", ".join(f"{k}={v!r}" for k, v in sorted(self.kwargs.items()))
        lines.append(f"  DistributedDataParallel(model, {kwargs})")
        lines.append(f"  launch: {self.torchrun()}")
        if not self.cpu_sets:
            lines.append(
                "  (each rank's CPUs were not recorded, so the launch pins none; search "
                "again to get a line that pins each rank as it was measured)"
            )
        steps = self.gradient_accumulation_steps
        if steps > 1:
            lines.append(
                f"  gradient_accumulation_steps = {steps}: step the optimizer every {steps} "
                f"batches to keep your global batch of {self.user_batch_size}"
            )
        note = self.lr_note()
        if note:
            lines.append(f"  learning rate: {note}")
        return lines

    def to_dict(self) -> dict[str, Any]:
        """The ``ddp`` section of the export."""
        return {
            "world_size": self.world_size,
            "backend": self.backend,
            "device_type": self.device_type,
            "per_rank_batch_size": self.settings.batch_size,
            "global_batch_size": self.global_batch_size,
            "dataloader": self.settings.dataloader_kwargs(),
            "sampler": "torch.utils.data.distributed.DistributedSampler",
            "ddp_kwargs": dict(self.kwargs),
            "cpus_per_rank": self.rank_cpus,
            "cpu_sets": [list(cpus) for cpus in self.cpu_sets],
            "cuda_visible_devices": self.visible,
            "torchrun": self.torchrun(),
            "lr_note": self.lr_note(),
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "samples_per_s": self.samples_per_s,
            "single_samples_per_s": self.single_samples_per_s,
            "scaling_efficiency": self.scaling_efficiency,
            "batch_gain": self.batch_gain,
            "speedup": self.speedup,
            "settings": self.settings.to_dict(),
            "user_batch_size": self.user_batch_size,
            "figures": self.figures.to_dict() if self.figures else None,
            "measurements": [m.to_dict() for m in self.measurements],
            "notes": list(self.notes),
            "failure": self.failure.to_dict() if self.failure else None,
            "allocator": self.allocator,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DdpResult:
        return cls(
            world_size=data["world_size"],
            backend=data["backend"],
            device_type=data.get("device_type", "cpu"),
            settings=Settings.from_dict(data["settings"]),
            kwargs=dict(data.get("ddp_kwargs", {})),
            rank_cpus=data.get("cpus_per_rank", 1),
            cpu_sets=tuple(tuple(cpus) for cpus in data.get("cpu_sets", ())),
            user_batch_size=data.get("user_batch_size", data["settings"]["batch_size"]),
            visible=data.get("cuda_visible_devices"),
            figures=Figures.from_dict(data["figures"]) if data.get("figures") else None,
            single_samples_per_s=data.get("single_samples_per_s"),
            batch_gain=data.get("batch_gain"),
            speedup=data.get("speedup"),
            measurements=tuple(DdpMeasurement.from_dict(m) for m in data.get("measurements", ())),
            notes=tuple(data.get("notes", ())),
            failure=Failure.from_dict(data["failure"]) if data.get("failure") else None,
            allocator=data.get("allocator"),
        )
