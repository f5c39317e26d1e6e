"""The DDP stage: the chosen config run as real DDP on every rank, its DDP keywords tuned.

After choosing (every trial measured one rank with its share of the node), the
winner, and with ``ddp_finalists`` every finalist, is run as
DistributedDataParallel across all ranks (NCCL on GPUs, gloo on CPU), each
rank with its own loader and ``DistributedSampler``. That gives the aggregate
samples/s and the scaling efficiency: aggregate / (ranks x one rank alone).

Then the DDP keywords that matter for this model are tuned, one at a time from
DDP's defaults, each measured: ``gradient_as_bucket_view`` and
``static_graph`` always; ``bucket_cap_mb`` when the gradients span more than
one bucket; buffer broadcasting when the model has buffers. A keyword keeps
its default unless another value is faster by more than the tolerance and the noise.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torch.nn.parallel import DistributedDataParallel

from autotune._choose import Candidate, cheapest_within
from autotune._launch import ddp_code, lr_note, torchrun_line
from autotune._options import SearchOptions
from autotune._placement import Placement
from autotune._probe import Failure, Figures, ProbeRequest, run_probe
from autotune._progress import Progress, format_rate
from autotune._settings import Settings

if TYPE_CHECKING:
    from autotune._result import Measurement

BUCKET_CAP_MB = 25
"""DDP's default bucket size."""
BUCKET_CHOICES = (5, 100)
"""Bucket sizes tried besides the default."""
_MIB = 2**20


def buffer_keyword() -> str:
    """The DDP keyword that turns off broadcasting buffers each forward in this torch
    (``forward_sync_buffers`` replaced ``broadcast_buffers`` in recent versions)."""
    parameters = inspect.signature(DistributedDataParallel.__init__).parameters
    return "forward_sync_buffers" if "forward_sync_buffers" in parameters else "broadcast_buffers"


def default_kwargs(buffers: bool) -> dict[str, Any]:
    """DDP's own defaults for the knobs tuned here."""
    kwargs: dict[str, Any] = {
        "bucket_cap_mb": BUCKET_CAP_MB,
        "gradient_as_bucket_view": False,
        "static_graph": False,
    }
    if buffers:
        kwargs[buffer_keyword()] = True
    return kwargs


def knob_grid(info: dict[str, Any]) -> tuple[list[tuple[str, tuple[Any, ...]]], list[str]]:
    """The DDP knobs worth measuring for this model (with the values to try besides the
    default), and notes on those left out."""
    grid: list[tuple[str, tuple[Any, ...]]] = [
        ("gradient_as_bucket_view", (True,)),
        ("static_graph", (True,)),
    ]
    notes = []
    gradient_bytes = info.get("gradient_bytes")
    if gradient_bytes is None or gradient_bytes > min(BUCKET_CHOICES) * _MIB:
        grid.append(("bucket_cap_mb", BUCKET_CHOICES))
    else:
        notes.append(
            f"bucket_cap_mb: left out: the gradients ({gradient_bytes / 2**10:,.0f} KiB) fit "
            "in one bucket of any size tried."
        )
    if info.get("buffers"):
        grid.append((buffer_keyword(), (False,)))
    else:
        notes.append(f"{buffer_keyword()}: left out: the model has no buffers.")
    return grid, notes


def planned_probes(info: dict[str, Any], options: SearchOptions, finalists: int) -> int:
    """DDP probes the stage will run (one more if the model turns out to have unused
    parameters)."""
    knobs = sum(len(values) for _, values in knob_grid(info)[0]) if options.ddp_knobs else 0
    return (max(1, finalists) if options.ddp_finalists else 1) + knobs


def keep_default_unless_faster(
    default: Any,
    base: Figures,
    tried: Sequence[tuple[Any, Figures | None]],
    tolerance: float,
) -> Any:
    """The default value, unless a tried value beat it by more than ``tolerance`` and
    more than twice the noise of the two measurements (their windows' spread over the
    square root of their count); then the fastest such value. A failed try (None) never
    wins."""
    choice, best = default, base.samples_per_s
    for value, figures in tried:
        if figures is None:
            continue
        margin = max(tolerance, 2.0 * _noise(base, figures))
        rate = figures.samples_per_s
        if rate > base.samples_per_s * (1.0 + margin) and rate > best:
            choice, best = value, rate
    return choice


def _noise(a: Figures, b: Figures) -> float:
    """Relative standard error of the difference of two throughputs."""
    return math.sqrt(sum(f.window_spread**2 / max(1, len(f.windows)) for f in (a, b)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class DdpMeasurement:
    """One DDP probe: a config, DDP keywords, and the aggregate figures of all ranks."""

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
    user_batch_size: int
    """The batch size the user trains with today."""
    visible: str | None = None
    """CUDA_VISIBLE_DEVICES of the selected GPUs; None: the environment's."""
    figures: Figures | None = None
    """The aggregate figures of the chosen DDP config; None when it failed."""
    single_samples_per_s: float | None = None
    """One rank alone, with its share of the node (the confirming measurement)."""
    measurements: tuple[DdpMeasurement, ...] = ()
    notes: tuple[str, ...] = ()
    failure: Failure | None = None
    """Why the DDP probe of the chosen config failed (the settings still apply per rank)."""

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
        )

    def lr_note(self) -> str | None:
        return lr_note(
            user_batch_size=self.user_batch_size,
            per_rank_batch_size=self.settings.batch_size,
            world_size=self.world_size,
        )

    def to_code(self, dataset: str = "dataset") -> str:
        return ddp_code(
            settings=self.settings,
            kwargs=self.kwargs,
            backend=self.backend,
            device_type=self.device_type,
            world_size=self.world_size,
            launch=self.torchrun(),
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
            "cuda_visible_devices": self.visible,
            "torchrun": self.torchrun(),
            "lr_note": self.lr_note(),
            "samples_per_s": self.samples_per_s,
            "single_samples_per_s": self.single_samples_per_s,
            "scaling_efficiency": self.scaling_efficiency,
            "settings": self.settings.to_dict(),
            "user_batch_size": self.user_batch_size,
            "figures": self.figures.to_dict() if self.figures else None,
            "measurements": [m.to_dict() for m in self.measurements],
            "notes": list(self.notes),
            "failure": self.failure.to_dict() if self.failure else None,
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
            user_batch_size=data.get("user_batch_size", data["settings"]["batch_size"]),
            visible=data.get("cuda_visible_devices"),
            figures=Figures.from_dict(data["figures"]) if data.get("figures") else None,
            single_samples_per_s=data.get("single_samples_per_s"),
            measurements=tuple(DdpMeasurement.from_dict(m) for m in data.get("measurements", ())),
            notes=tuple(data.get("notes", ())),
            failure=Failure.from_dict(data["failure"]) if data.get("failure") else None,
        )


class _Prober:
    """Runs DDP probes of one search and keeps every measurement."""

    def __init__(self, placement: Placement, template: ProbeRequest, progress: Progress) -> None:
        self.placement = placement
        self.template = template
        self.progress = progress
        self.measurements: list[DdpMeasurement] = []

    def __call__(self, settings: Settings, kwargs: dict[str, Any], role: str) -> DdpMeasurement:
        request = self.placement.ddp_request(
            dataclasses.replace(self.template, settings=settings), kwargs
        )
        result = run_probe(request)
        measurement = DdpMeasurement(
            settings=settings,
            kwargs=dict(kwargs),
            figures=result.figures,
            failure=result.failure,
            role=role,
        )
        self.measurements.append(measurement)
        changed = ", ".join(f"{k}={v!r}" for k, v in sorted(kwargs.items()))
        outcome = (
            f"FAILED ({result.failure.kind}): {result.failure.message}"
            if result.failure
            else f"{format_rate(result.figures.samples_per_s)} samples/s"
        )
        self.progress.message(f"ddp {role:<8} {settings.describe()} [{changed}]  {outcome}")
        return measurement


def run_ddp_stage(
    *,
    placement: Placement,
    template: ProbeRequest,
    winner: Measurement,
    finalists: Sequence[Measurement],
    info: dict[str, Any],
    options: SearchOptions,
    progress: Progress,
    user_batch_size: int,
    later: int = 0,
) -> tuple[Measurement, DdpResult]:
    """DDP-probe the winner (or every finalist), tune the DDP keywords, and return the
    winner (another finalist when DDP figures chose it) with the ``ddp`` section;
    ``later`` probes follow the stage (for the progress estimate)."""
    probe = _Prober(placement, template, progress)
    buffers = bool(info.get("buffers"))
    base = default_kwargs(buffers)
    notes: list[str] = []
    contenders = list(finalists) if options.ddp_finalists and finalists else [winner]
    if winner.settings not in [c.settings for c in contenders]:
        contenders.insert(0, winner)
    progress.phase(
        "ddp",
        f"{len(contenders)} config(s) as DDP across {placement.describe()} ({placement.backend})",
    )
    progress.plan("ddp", planned_probes(info, options, len(contenders)), None, later=later)
    runs: dict[str, DdpMeasurement] = {}
    for contender in contenders:
        role = "winner" if contender.settings == winner.settings else "finalist"
        run = probe(contender.settings, base, role)
        if run.failure is not None and "find_unused_parameters" in run.failure.message:
            # DDP's own advice: some parameters get no gradient in a step.
            base = {**base, "find_unused_parameters": True}
            notes.append("find_unused_parameters=True: some parameters get no gradient.")
            run = probe(contender.settings, base, role)
        runs[contender.settings.key()] = run
    measured = [Candidate(m.settings, m.samples_per_s) for m in runs.values() if m.samples_per_s]
    if len(measured) > 1:
        pick = cheapest_within(measured, options.tolerance).settings
        winner = next(c for c in contenders if c.settings == pick)
    chosen = runs[winner.settings.key()]
    kwargs = dict(base)
    if chosen.failure is None and options.ddp_knobs:
        chosen, kwargs, knob_notes = _tune_knobs(probe, chosen, kwargs, info, options.tolerance)
        notes += knob_notes
    result = DdpResult(
        world_size=placement.ranks,
        backend=placement.backend,
        device_type=placement.device_type,
        settings=winner.settings,
        kwargs=kwargs,
        rank_cpus=placement.rank_cpus,
        user_batch_size=user_batch_size,
        visible=placement.visible,
        figures=chosen.figures if chosen.failure is None else None,
        single_samples_per_s=winner.samples_per_s,
        measurements=tuple(probe.measurements),
        notes=tuple(notes),
        failure=chosen.failure,
    )
    return winner, result


def _tune_knobs(
    probe: _Prober,
    current: DdpMeasurement,
    kwargs: dict[str, Any],
    info: dict[str, Any],
    tolerance: float,
) -> tuple[DdpMeasurement, dict[str, Any], list[str]]:
    grid, notes = knob_grid(info)
    for knob, values in grid:
        tried: list[tuple[Any, Figures | None]] = []
        runs = {}
        for value in values:
            run = probe(current.settings, {**kwargs, knob: value}, "knob")
            tried.append((value, None if run.failure else run.figures))
            runs[repr(value)] = run
        choice = keep_default_unless_faster(kwargs[knob], current.figures, tried, tolerance)
        if choice != kwargs[knob]:
            kwargs = {**kwargs, knob: choice}
            current = runs[repr(choice)]
    return current, kwargs, notes
