"""Why a training waits: data-bound or compute-bound, and what can help.

Pure functions over figures. A config's diagnosis sets its throughput beside
two ceilings measured on the same machine:

    compute ceiling   the same training on batches already in memory: the most
                      this model trains, whatever the loader does
    data ceiling      the same loader with no model: the most it delivers
    loader limit      the loader alone with a worker per CPU: about the most any
                      worker count gets out of the dataset

and says, with the figures that support it, whether a loader setting can help
or the remedy lies outside the settings (preprocess, cache, echo, a faster model).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from autotune._format import format_rate
from autotune.probe import Figures, Measurement
from autotune.result._result import SearchResult
from autotune.settings._settings import Settings

Verdict = Literal["data-bound", "compute-bound"]

DATA_BOUND = 0.15
"""Waiting for data (blocked in ``next()`` on the loader, the copy to the device apart)
longer than this share of each step makes a config data-bound."""
COPY_MATTERS = 0.05
"""A copy to the device taking more than this share of each step gets a line of its own."""
NEAR = 0.9
"""Within this fraction of a ceiling counts as at the ceiling."""
CONTENTION = 0.8
"""Below this fraction of the compute ceiling without waiting: something takes the CPU."""
SLOW_STARTUP_S = 1.0
"""Worker start-up that costs this much at every epoch is worth persistent workers."""
ABOVE = 1.1
"""Measured this far above a ceiling: the machine's load changed between measurements."""
MORE_WORKERS = 1.2
"""The loader alone this much faster with more workers: more workers would help."""
NOISY = 0.15
"""Windows spread more than this (stdev / mean): the figures are approximate."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Diagnosis:
    """What limits one config, with the figures that show it."""

    subject: str
    """Whose diagnosis: "best" or "default loader"."""
    measurement: Measurement
    verdict: Verdict
    wait_share: float
    """Share of each step's time spent waiting for data: blocked in ``next()`` on the loader."""
    copy_share: float = 0.0
    """Share of each step's time spent copying batches to the device."""
    compute_ceiling: float | None
    """samples/s of the model on batches in memory, at this config's batch size, AMP, threads."""
    data_ceiling: float | None
    """samples/s this loader delivers alone (times echo: samples the model trains on)."""
    loader_limit: float | None
    """samples/s the loader delivers alone with a worker per CPU (times echo)."""
    limit_workers: int | None
    """The workers of that measurement."""
    advice: tuple[str, ...]
    """Plain-language advice, each with the figures behind it."""
    evidence: tuple[str, ...]
    """The measured figures the verdict rests on, one per line."""

    @property
    def samples_per_s(self) -> float:
        return self.measurement.samples_per_s

    @property
    def ceiling(self) -> float | None:
        """min(compute ceiling, data ceiling)."""
        values = [v for v in (self.compute_ceiling, self.data_ceiling) if v]
        return min(values) if values else None

    @property
    def bound_by(self) -> str | None:
        """Which ceiling is the lower: "data" or "compute"."""
        if self.compute_ceiling and self.data_ceiling:
            return "data" if self.data_ceiling < self.compute_ceiling else "compute"
        return None

    @property
    def of_ceiling(self) -> float | None:
        """Throughput as a fraction of min(ceilings)."""
        ceiling = self.ceiling
        return self.samples_per_s / ceiling if ceiling else None

    def headline(self) -> str:
        """One line: verdict, throughput, wait share, share of the ceiling."""
        text = (
            f"{self.subject}: {self.verdict}, {format_rate(self.samples_per_s)} samples/s, "
            f"waiting for data {self.wait_share:.0%} of each step"
        )
        if self.of_ceiling is not None and self.ceiling is not None:
            which = f", the {self.bound_by} ceiling" if self.bound_by else ""
            text += (
                f"; {self.of_ceiling:.0%} of min(ceilings) = {format_rate(self.ceiling)} "
                f"samples/s{which}"
            )
        return text


def _rate(figures: Figures | None, scale: int = 1) -> float | None:
    if figures is None or figures.samples_per_s <= 0:
        return None
    return figures.samples_per_s * scale


def diagnose_config(
    subject: str,
    measurement: Measurement,
    *,
    compute: Figures | None = None,
    data: Figures | None = None,
    loader_limit: Measurement | None = None,
    cpus: int | None = None,
    device: str | None = None,
) -> Diagnosis:
    """The diagnosis of one measured config.

    Args:
        subject: whose diagnosis, for the text ("best", "default loader").
        measurement: the config's training figures.
        compute: its compute ceiling (mode "compute" at its batch size, AMP, threads).
        data: its data ceiling (its loader alone).
        loader_limit: the loader alone with a worker per CPU.
        cpus: the CPUs the search could use.
        device: the device it trained on ("cpu", "cuda:0"...): pinned memory helps only
            the copy to an accelerator.
    """
    settings = measurement.settings
    figures = measurement.figures
    wait = figures.wait_fraction
    echo = settings.echo
    compute_rate = _rate(compute)
    data_rate = _rate(data, echo)
    limit_rate = _rate(loader_limit.figures, echo) if loader_limit else None
    limit_workers = loader_limit.settings.num_workers if loader_limit else None
    verdict: Verdict = "data-bound" if wait > DATA_BOUND else "compute-bound"

    evidence = []
    if echo > 1:
        evidence.append(
            f"echo {echo}: {format_rate(figures.fresh_per_s)} fresh samples/s from the loader"
        )
    if compute_rate:
        evidence.append(
            f"compute ceiling (the model on batches already in memory): "
            f"{format_rate(compute_rate)} samples/s"
        )
    if data_rate:
        evidence.append(
            f"data ceiling (this loader alone, {settings.num_workers} workers): "
            f"{format_rate(data_rate)} samples/s"
        )
    if limit_rate and limit_workers is not None and limit_workers != settings.num_workers:
        evidence.append(
            f"the loader alone with {limit_workers} workers: {format_rate(limit_rate)} samples/s"
        )

    advice = _advice(measurement, verdict, compute_rate, data_rate, limit_rate, limit_workers, cpus)
    advice += _copy(settings, figures.copy_fraction, device)
    return Diagnosis(
        subject=subject,
        measurement=measurement,
        verdict=verdict,
        wait_share=wait,
        copy_share=figures.copy_fraction,
        compute_ceiling=compute_rate,
        data_ceiling=data_rate,
        loader_limit=limit_rate,
        limit_workers=limit_workers,
        advice=tuple(advice),
        evidence=tuple(evidence),
    )


def _advice(
    measurement: Measurement,
    verdict: Verdict,
    compute: float | None,
    data: float | None,
    limit: float | None,
    limit_workers: int | None,
    cpus: int | None,
) -> list[str]:
    settings = measurement.settings
    figures = measurement.figures
    rate = figures.samples_per_s
    advice: list[str] = []
    if verdict == "data-bound":
        advice += _data_bound(settings, compute, data, limit, limit_workers, cpus)
    elif compute and rate >= compute * NEAR:
        amp = " AMP (bf16/fp16)," if settings.amp == "off" else ""
        advice.append(
            f"the loader keeps up: the model trains at {rate / compute:.0%} of its compute "
            f"ceiling ({format_rate(compute)} samples/s on batches in memory). Loader settings "
            f"cannot make it faster;{amp} a larger batch, a faster device or a cheaper model can."
        )
    elif compute and rate < compute * CONTENTION and settings.num_workers > 0:
        workers = settings.num_workers
        advice.append(
            f"the training rarely waits yet runs at {rate / compute:.0%} of its compute "
            f"ceiling ({format_rate(compute)} samples/s): the loader's {workers} worker(s) take "
            f"CPU time from the training{f' on {cpus} CPUs' if cpus else ''}. Cheaper loading "
            "(preprocessed or cached data, augmentation on the device) frees it."
        )
    if (
        figures.startup_s is not None
        and figures.startup_s >= SLOW_STARTUP_S
        and settings.num_workers > 0
        and not settings.persistent_workers
    ):
        advice.append(
            f"workers take {figures.startup_s:.1f} s to start at every epoch: "
            "persistent_workers=True pays that once."
        )
    ceiling = min((v for v in (compute, data) if v), default=None)
    if ceiling and rate > ceiling * ABOVE:
        advice.append(
            f"it measured {rate / ceiling:.0%} of a ceiling it cannot beat "
            f"({format_rate(ceiling)} samples/s): the two were measured at different moments "
            "and the machine's load changed between them (other processes?); measure on a "
            "quiet machine for firm figures."
        )
    if compute is None and data is None:
        advice.append(
            "the ceilings were not measured (search with ceilings=True) to tell whether a "
            "loader setting or only a change outside them can help."
        )
    if figures.window_spread > NOISY:
        advice.append(
            f"its windows vary by {figures.window_spread:.0%} (stdev / mean): read these "
            "figures as approximate; a longer window_seconds steadies them."
        )
    return advice


def _copy(settings: Settings, share: float, device: str | None) -> list[str]:
    """A line on the copy to the device, when it takes a share of each step that matters."""
    if share <= COPY_MATTERS:
        return []
    line = f"host-to-device copy: {share:.0%} of each step; "
    accelerator = device is not None and device.split(":")[0] != "cpu"
    if accelerator and not settings.pin_memory:
        # From pageable memory the copy blocks the host and goes through a staging buffer.
        return [
            line + "pin_memory would overlap it: with pin_memory=True batches copy "
            "asynchronously, and faster."
        ]
    return [line + "smaller samples (uint8, normalised on the device) would shorten it."]


def _data_bound(
    settings: Settings,
    compute: float | None,
    data: float | None,
    limit: float | None,
    limit_workers: int | None,
    cpus: int | None,
) -> list[str]:
    """Why a data-bound config waits, and whether a loader setting can help."""
    advice: list[str] = []
    on_cpus = f" on {cpus} CPUs" if cpus else ""
    more_helps = bool(
        data
        and limit
        and limit_workers
        and limit_workers > settings.num_workers
        and limit > data * MORE_WORKERS
    )
    if settings.num_workers == 0:
        advice.append(
            "loading happens in the training process (num_workers=0), one batch after the "
            "other between steps: worker processes load the next batches while the model trains."
        )
    elif more_helps and data and limit:
        advice.append(
            f"more workers would help: the loader alone with {limit_workers} workers delivers "
            f"{format_rate(limit)} samples/s, {limit / data:.1f}x this loader's "
            f"{format_rate(data)} with {settings.num_workers}; let the search try more "
            f'(space={{"num_workers": {{"low": 0, "high": {limit_workers}}}}}).'
        )
    if compute and limit and limit < compute * NEAR:
        echo = (
            "raise echo"
            if settings.echo > 1
            else 'echo batches (space={"echo": [1, 2, 4]}; it changes what is learned)'
        )
        advice.append(
            "loading (read, decode, augment) is the bottleneck whatever the loader's settings: "
            f"alone, with {limit_workers} workers{on_cpus}, it delivers {format_rate(limit)} "
            f"samples/s while the model could train {format_rate(compute)}. Only changes "
            "outside the loader close that gap: preprocess offline, cache decoded data, ship "
            f"smaller samples (uint8, normalised on the device), or {echo}."
        )
    elif compute and limit and settings.num_workers > 0 and not more_helps:
        advice.append(
            f"the loader alone delivers {format_rate(limit)} samples/s, enough for the model "
            f"({format_rate(compute)}), yet beside the training{on_cpus} this config waits: "
            "loading and training compete for the CPUs. Cheaper loading (preprocessed or "
            "cached data, augmentation on the device) helps; on a GPU, pin_memory speeds the "
            "copy."
        )
    return advice


def diagnose(result: SearchResult) -> list[Diagnosis]:
    """The diagnoses of a search's winner and of its default loader (when measured)."""
    cpus = result.machine.cpus or None
    best = diagnose_config(
        "best",
        Measurement(settings=result.settings, figures=result.figures),
        compute=result.ceilings.get("compute"),
        data=result.ceilings.get("data"),
        loader_limit=result.loader_limit,
        cpus=cpus,
        device=result.device,
    )
    diagnoses = [best]
    if result.baseline is not None:
        diagnoses.append(
            diagnose_config(
                "default loader",
                result.baseline,
                compute=result.baseline_ceilings.get("compute"),
                data=result.baseline_ceilings.get("data"),
                loader_limit=result.loader_limit,
                cpus=cpus,
                device=result.device,
            )
        )
    return diagnoses
