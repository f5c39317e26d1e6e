"""The result of a search: the chosen settings with the figures that chose them.

Saved in the study, exported as JSON, loaded back on any machine (with a
warning when the machine differs from the one it was tuned on).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune._errors import ConfigError, StudyError
from autotune.machine._machine import Machine
from autotune.probe import Figures, Measurement
from autotune.result._ddp import DdpResult
from autotune.settings._settings import Settings

EXPORT_FORMAT = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchResult:
    """What a search chose, and the measurements behind the choice."""

    settings: Settings
    """The chosen config."""
    figures: Figures
    """The chosen config's figures, from its confirming measurement."""
    device: str
    machine: Machine
    """The machine it was tuned on."""
    baseline: Measurement | None = None
    """The default DataLoader (num_workers=0, the config's batch size), measured alongside."""
    finalists: tuple[Measurement, ...] = ()
    """Every config re-measured before choosing, the winner among them."""
    ceilings: dict[str, Figures] = dataclasses.field(default_factory=dict)
    """"compute": the model on batches held in memory; "data": the winner's loader alone."""
    baseline_ceilings: dict[str, Figures] = dataclasses.field(default_factory=dict)
    """The same two ceilings for the default DataLoader (its batch size and threads)."""
    loader_limit: Measurement | None = None
    """The winner's loader alone with the most workers the default space tries (4 per CPU,
    at most 32): about the most any worker count gets out of this dataset here."""
    tolerance: float = 0.0
    confirmed: bool = True
    """False when chosen from exploration figures alone (the search did not finish)."""
    workload: dict[str, Any] = dataclasses.field(default_factory=dict)
    """What the preflight learned of the workload (dataset length, parameters...)."""
    study_path: str | None = None
    study_name: str | None = None
    collate_fn: Callable[[list[Any]], Any] | None = dataclasses.field(
        default=None, compare=False, repr=False
    )
    """The workload's collate_fn, when the result comes from a search in this process."""
    ddp: DdpResult | None = None
    """With several ranks: the DDP settings (world size, batches, DDP keywords, torchrun
    line) and what the DDP probes measured; ``settings`` are then per rank."""

    # ----------------------------------------------------------------- figures
    @property
    def samples_per_s(self) -> float:
        """The chosen config's throughput."""
        return self.figures.samples_per_s

    @property
    def speedup(self) -> float | None:
        """Chosen throughput / the default DataLoader's, measured in the same search."""
        if self.baseline is None or self.baseline.samples_per_s <= 0:
            return None
        return self.samples_per_s / self.baseline.samples_per_s

    @property
    def ceiling(self) -> float | None:
        """min(compute ceiling, data ceiling): what no loader setting can beat.

        Both in samples the model trains on: with echo each loaded batch is trained on
        ``echo`` times, so the loader alone feeds ``echo`` times its own rate.
        """
        values = []
        for name, figures in self.ceilings.items():
            scale = self.settings.echo if name == "data" else 1
            if figures.samples_per_s > 0:
                values.append(figures.samples_per_s * scale)
        return min(values) if values else None

    # ----------------------------------------------------------------- use
    def loader(self, dataset: Any, **overrides: Any) -> Any:
        """A tuned ``torch.utils.data.DataLoader`` over ``dataset``.

        Args:
            dataset: the dataset to load (usually the one tuned on).
            **overrides: DataLoader keywords that win over the tuned ones
                (``collate_fn``, ``sampler``, ``drop_last``...).
        """
        if self.collate_fn is not None:
            overrides.setdefault("collate_fn", self.collate_fn)
        return self.settings.loader(dataset, **overrides)

    def to_code(self, dataset: str = "dataset") -> str:
        """Python source that builds the tuned loader (per rank, with DDP, when tuned for
        several ranks)."""
        if self.ddp is not None:
            return self.ddp.to_code(dataset=dataset)
        return self.settings.to_code(dataset=dataset, device=self.device)

    # ----------------------------------------------------------------- as data
    def to_dict(self) -> dict[str, Any]:
        """Everything, as JSON types: what ``autotune export`` writes."""
        return {
            "format": EXPORT_FORMAT,
            "settings": self.settings.to_dict(),
            "dataloader": self.settings.dataloader_kwargs(),
            "device": self.device,
            "figures": self.figures.to_dict(),
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "speedup": self.speedup,
            "finalists": [m.to_dict() for m in self.finalists],
            "ceilings": {k: f.to_dict() for k, f in self.ceilings.items()},
            "baseline_ceilings": {k: f.to_dict() for k, f in self.baseline_ceilings.items()},
            "loader_limit": self.loader_limit.to_dict() if self.loader_limit else None,
            "tolerance": self.tolerance,
            "confirmed": self.confirmed,
            "machine": self.machine.to_dict(),
            "workload": self.workload,
            "study": {"path": self.study_path, "name": self.study_name},
            "ddp": self.ddp.to_dict() if self.ddp else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchResult:
        """Rebuild from :meth:`to_dict`."""
        fmt = data.get("format", EXPORT_FORMAT)
        if isinstance(fmt, int) and fmt > EXPORT_FORMAT:
            raise StudyError(
                f"these settings were written by a newer autotune (format {fmt}; this version "
                f"reads up to {EXPORT_FORMAT}); upgrade autotune."
            )
        study = data.get("study") or {}
        return cls(
            settings=Settings.from_dict(data["settings"]),
            figures=Figures.from_dict(data["figures"]),
            device=data.get("device", "cpu"),
            machine=Machine.from_dict(data.get("machine", {})),
            baseline=Measurement.from_dict(data["baseline"]) if data.get("baseline") else None,
            finalists=tuple(Measurement.from_dict(m) for m in data.get("finalists", ())),
            ceilings={k: Figures.from_dict(v) for k, v in (data.get("ceilings") or {}).items()},
            baseline_ceilings={
                k: Figures.from_dict(v) for k, v in (data.get("baseline_ceilings") or {}).items()
            },
            loader_limit=(
                Measurement.from_dict(data["loader_limit"]) if data.get("loader_limit") else None
            ),
            tolerance=data.get("tolerance", 0.0),
            confirmed=data.get("confirmed", True),
            workload=data.get("workload", {}),
            study_path=study.get("path"),
            study_name=study.get("name"),
            ddp=DdpResult.from_dict(data["ddp"]) if data.get("ddp") else None,
        )

    @classmethod
    def from_json_file(cls, path: Path) -> SearchResult:
        """Read settings written by ``autotune export``."""
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise ConfigError(f"{path}: cannot read exported settings ({error}).") from None
        if not isinstance(data, dict) or "settings" not in data:
            raise ConfigError(f"{path}: not settings written by `autotune export`.")
        try:
            return cls.from_dict(data)
        except (KeyError, TypeError, ConfigError) as error:
            raise ConfigError(f"{path}: malformed exported settings ({error}).") from None
