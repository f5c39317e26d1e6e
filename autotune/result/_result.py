"""The result of a search: the chosen settings with the figures that chose them.

Saved in the study, exported as JSON, loaded back on any machine (with a
warning when the machine differs from the one it was tuned on).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune._errors import ConfigError, StudyError
from autotune._format import format_rate
from autotune._noise import DEFAULT_TOLERANCE, LogSpread
from autotune.machine import Machine
from autotune.probe import Figures, Measurement
from autotune.result._budget import BudgetPlan
from autotune.result._confirmation import Confirmation
from autotune.result._ddp import DdpResult
from autotune.result._launch import accumulation_steps, lr_note
from autotune.result._predict import LEVEL, prediction_interval
from autotune.result._search_time import SearchTime
from autotune.settings import Settings

EXPORT_FORMAT = 1
_PREDICTED = f"{LEVEL:.0%} prediction"
"""How an interval is introduced: where the next measurement lies with that probability."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchResult(Confirmation):
    """What a search chose, and the measurements behind the choice (the confirming
    rounds' among them, see :class:`Confirmation`)."""

    settings: Settings
    """The chosen config."""
    figures: Figures
    """The chosen config's figures, from its confirming measurement."""
    device: str
    machine: Machine
    """The machine it was tuned on."""
    ceilings: dict[str, Figures] = dataclasses.field(default_factory=dict)
    """"compute": the model on batches held in memory; "data": the winner's loader alone."""
    baseline_ceilings: dict[str, Figures] = dataclasses.field(default_factory=dict)
    """The same two ceilings for the default DataLoader (its batch size and threads)."""
    loader_limit: Measurement | None = None
    """The winner's loader alone with the most workers the default space tries (4 per CPU,
    at most 32): about the most any worker count gets out of this dataset here."""
    tolerance: float = DEFAULT_TOLERANCE
    """Configs within this fraction of the best counted as equally fast when it was chosen
    (a result saved without one was chosen under the default)."""
    user_batch_size: int | None = None
    """The batch size the user trains with today (the default loader's)."""
    space: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The space the search covered, as the study records it (``Space.to_dict``)."""
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
    search_time: SearchTime | None = None
    """How long the search that chose it took, by stage; None for a study written before
    it was kept, and for a choice made online."""
    budget: BudgetPlan | None = None
    """With a time budget: how the stages were planned to fit it, and what was left out."""

    # ----------------------------------------------------------------- figures
    @property
    def samples_per_s(self) -> float:
        """The chosen config's throughput."""
        return self.figures.samples_per_s

    @property
    def speedup(self) -> float | None:
        """Chosen throughput / the default DataLoader's, measured in the same search: the
        median of the rounds' ratios. None when the default itself is recommended (no
        speedup against itself) or was not measured."""
        if self.is_default:
            return None
        if self.speedup_rounds:
            return statistics.median(self.speedup_rounds)
        if self.ddp is not None and self.ddp.speedup is not None:
            return self.ddp.speedup
        if self.baseline is None or self.baseline.samples_per_s <= 0:
            return None
        return self.samples_per_s / self.baseline.samples_per_s

    @property
    def speedup_interval(self) -> tuple[float, float] | None:
        """Where the speedup over the default lies with 95% probability when measured
        again: the prediction interval of the per-round speedups, their spread pooled over
        the finalists measured in the same rounds (two rounds or more;
        :func:`autotune.result._predict.prediction_interval`)."""
        if self.is_default:
            return None
        return prediction_interval(self.speedup_rounds, self.speedup_spread)

    @property
    def interval(self) -> tuple[float, float] | None:
        """Where the chosen config's samples/s lies with 95% probability when measured
        again: the prediction interval of its rounds, with their spread pooled over every
        config the rounds measured (:mod:`autotune.result._predict`); wider than their
        range, which holds a new measurement only half the time with 3 rounds."""
        return prediction_interval(self.rates, self.rates_spread)

    def speedup_text(self) -> str | None:
        """ "1.31x (95% prediction 1.13-1.52, 3 rounds)": the speedup with its prediction
        interval; None when there is no speedup to state."""
        speedup = self.speedup
        if speedup is None:
            return None
        interval = self.speedup_interval
        if interval is None:
            if self.ddp is not None and self.ddp.speedup is not None and not self.speedup_rounds:
                return f"{speedup:.2f}x (one rank's rounds times the larger batch's gain as DDP)"
            return f"{speedup:.2f}x"
        rounds = len(self.speedup_rounds)
        return f"{speedup:.2f}x ({_PREDICTED} {interval[0]:.2f}-{interval[1]:.2f}, {rounds} rounds)"

    def rate_text(self) -> str:
        """The chosen samples/s, with its prediction interval when there were several
        rounds: "1,400 samples/s (95% prediction 979-1,994, 3 rounds)"."""
        text = f"{format_rate(self.samples_per_s)} samples/s"
        interval = self.interval
        if interval is not None:
            text += (
                f" ({_PREDICTED} {format_rate(interval[0])}-{format_rate(interval[1])}, "
                f"{len(self.rates)} rounds)"
            )
        return text

    def default_text(self) -> str:
        """Why the default DataLoader is the recommendation."""
        if self.at_ceiling is not None:
            return (
                f"the default DataLoader is the recommendation: it trains within "
                f"{self.tolerance:.0%} of the model's highest compute ceiling "
                f"({format_rate(self.at_ceiling)} samples/s on batches in memory), so no "
                "loader setting can speed it up; keep your loader as it is"
            )
        return (
            f"the default DataLoader is the recommendation: no config beat it beyond the "
            f"noise (max(tolerance {self.tolerance:.0%}, {self.noise:.0%} between "
            f"{self.rounds} rounds)); keep your loader as it is"
        )

    @property
    def caveat(self) -> str | None:
        """What to keep in mind before trusting the figures; None when confirmed."""
        if self.confirmed:
            return None
        if self.workload.get("online"):
            return "chosen online, from windows of the training's own steps; not re-measured"
        return (
            "not confirmed: chosen from exploration figures alone (the search did not "
            "re-measure it in its confirming rounds); run the search again to confirm it"
        )

    @property
    def user_batch(self) -> int:
        """The user's batch size: as recorded, else the default loader's."""
        if self.user_batch_size is not None:
            return self.user_batch_size
        if self.baseline is not None:
            return self.baseline.settings.batch_size
        return self.settings.batch_size

    @property
    def world_size(self) -> int:
        """Ranks the settings are for: the DDP world, or 1."""
        return self.ddp.world_size if self.ddp is not None else 1

    @property
    def gradient_accumulation_steps(self) -> int:
        """Batches per optimizer step that keep the user's global batch: the user's batch
        over the chosen global one, when that divides evenly; else 1."""
        return accumulation_steps(self.user_batch, self.settings.batch_size * self.world_size)

    @property
    def global_batch_size(self) -> int:
        """Samples per optimizer step: per-rank batch x ranks x accumulation."""
        return self.settings.batch_size * self.world_size * self.gradient_accumulation_steps

    def lr_note(self) -> str | None:
        """What the chosen batch means for the learning rate; None when the global batch
        is the user's."""
        return lr_note(
            user_batch_size=self.user_batch,
            per_rank_batch_size=self.settings.batch_size,
            world_size=self.world_size,
            accumulation=self.gradient_accumulation_steps,
        )

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
        several ranks), with the accumulation and learning-rate notes of its batch."""
        if self.ddp is not None:
            code = self.ddp.to_code(dataset=dataset)
        else:
            code = self.settings.to_code(
                dataset=dataset, device=self.device, allocator=self.workload.get("allocator")
            )
        return code + "".join(f"{line}\n" for line in self.batch_notes(comment=True))

    def batch_notes(self, *, comment: bool = False) -> list[str]:
        """The accumulation and learning-rate lines for a batch other than the user's."""
        lead = "# " if comment else ""
        lines = []
        steps = self.gradient_accumulation_steps
        if steps > 1:
            lines.append(
                f"{lead}gradient_accumulation_steps = {steps}: step the optimizer every "
                f"{steps} batches to keep your global batch of {self.user_batch}"
            )
        note = self.lr_note()
        if note:
            lines.append(f"{lead}learning rate: {note}")
        return lines

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
            "speedup_interval": list(self.speedup_interval) if self.speedup_interval else None,
            "rounds": self.rounds,
            "noise": self.noise,
            "rates": list(self.rates),
            "rates_spread": self.rates_spread.to_dict() if self.rates_spread else None,
            "speedup_rounds": list(self.speedup_rounds),
            "speedup_spread": self.speedup_spread.to_dict() if self.speedup_spread else None,
            "is_default": self.is_default,
            "at_ceiling": self.at_ceiling,
            "user_batch_size": self.user_batch,
            "space": self.space,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "global_batch_size": self.global_batch_size,
            "lr_note": self.lr_note(),
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
            "search_time": self.search_time.to_dict() if self.search_time else None,
            "budget": self.budget.to_dict() if self.budget else None,
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
            tolerance=data.get("tolerance", DEFAULT_TOLERANCE),
            confirmed=data.get("confirmed", True),
            rounds=data.get("rounds", 0),
            noise=data.get("noise", 0.0),
            rates=tuple(data.get("rates", ())),
            rates_spread=(
                LogSpread.from_dict(data["rates_spread"]) if data.get("rates_spread") else None
            ),
            speedup_rounds=tuple(data.get("speedup_rounds", ())),
            speedup_spread=(
                LogSpread.from_dict(data["speedup_spread"]) if data.get("speedup_spread") else None
            ),
            is_default=data.get("is_default", False),
            at_ceiling=data.get("at_ceiling"),
            user_batch_size=data.get("user_batch_size"),
            space=dict(data.get("space") or {}),
            workload=data.get("workload", {}),
            study_path=study.get("path"),
            study_name=study.get("name"),
            ddp=DdpResult.from_dict(data["ddp"]) if data.get("ddp") else None,
            search_time=(
                SearchTime.from_dict(data["search_time"]) if data.get("search_time") else None
            ),
            budget=BudgetPlan.from_dict(data["budget"]) if data.get("budget") else None,
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
