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
from collections.abc import Mapping
from typing import Any, Literal

from autotune._format import count, format_rate
from autotune.probe import Figures, Measurement
from autotune.result import SearchResult
from autotune.settings import Settings

Verdict = Literal["data-bound", "compute-bound"]

DATA_BOUND = 0.15
"""Waiting for data (blocked in ``next()`` on the loader, the copy to the device apart)
longer than this share of each step makes a config data-bound."""
COPY_MATTERS = 0.05
"""A copy to the device taking more than this share of each step (outside the waits for
data) gets a line of its own."""
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
class Searched:
    """What the search covered, so advice never suggests a range it already tried."""

    max_workers: int | None = None
    """The most workers the space held; None: not known (advice may suggest more)."""
    max_echo: int | None = None
    """The highest echo the space held; None: not known."""

    @classmethod
    def from_space(cls, space: Mapping[str, Any]) -> Searched:
        """From a space as the study records it (``Space.to_dict``)."""
        return cls(
            max_workers=_highest(space.get("num_workers")),
            max_echo=_highest(space.get("echo")),
        )


def _highest(domain: Any) -> int | None:
    """The largest value of a recorded domain: {"fixed": v}, {"choices": [...]}, or
    {"low": a, "high": b}."""
    if not isinstance(domain, Mapping):
        return None
    if "fixed" in domain:
        return int(domain["fixed"])
    if domain.get("choices"):
        return int(max(domain["choices"]))
    if "high" in domain:
        return int(domain["high"])
    return None


@dataclasses.dataclass(frozen=True)
class _Loader:
    """What was measured of the loader alone: this config's, with the most workers, and
    the best of every loader-alone figure of the search."""

    data: float | None
    limit: float | None
    limit_workers: int | None
    best: float | None
    best_workers: int
    """The workers of ``best`` (0 when nothing was measured)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Diagnosis:
    """What limits one config, with the figures that show it."""

    subject: str
    """Whose diagnosis: "best", "default loader", or "default loader (the recommendation)"
    when the search kept the default."""
    measurement: Measurement
    verdict: Verdict
    wait_share: float
    """Share of each step's time spent waiting for data: blocked in ``next()`` on the loader."""
    copy_share: float = 0.0
    """Share of each step's time spent copying batches to the device, outside the waits
    for data (a copy queued while the training waits is hidden by the wait): it and
    ``wait_share`` never add up past 1."""
    device_busy_share: float | None = None
    """Share of each step's time the device was busy (its own clock, else NVML's
    utilisation); None on the CPU or where it was not measured."""
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
        if self.device_busy_share is not None:
            text += f", device busy {self.device_busy_share:.0%}"
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


CEILINGS_OFF = "search with ceilings=True"
"""How to have the ceilings measured where the search's options turned them off."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Context:
    """What the search knows beside one config's own figures, for its diagnosis."""

    loader_limit: Measurement | None = None
    """The loader alone with a worker per CPU."""
    cpus: int | None = None
    """The CPUs the search could use."""
    best_loader: Measurement | None = None
    """The loader-alone probe of the search that delivered the most (before echo): the
    loader is judged by it, not by one worker count."""
    searched: Searched = Searched()
    """What the search's space covered (advice never suggests it again)."""
    device: str | None = None
    """The device it trained on ("cpu", "cuda:0"...): pinned memory helps only the copy
    to an accelerator."""
    chosen: bool = False
    """The search recommends this config over the others it measured, so advice never
    points to a setting the search covered and found no faster."""
    no_ceilings: str = CEILINGS_OFF
    """How to have the ceilings measured, where they were not."""


def diagnose_config(
    subject: str,
    measurement: Measurement,
    *,
    compute: Figures | None = None,
    data: Figures | None = None,
    context: Context = Context(),
) -> Diagnosis:
    """The diagnosis of one measured config.

    Args:
        subject: whose diagnosis, for the text ("best", "default loader").
        measurement: the config's training figures.
        compute: its compute ceiling (mode "compute" at its batch size, AMP, threads).
        data: its data ceiling (its loader alone).
        context: what the search knows beside them.
    """
    settings = measurement.settings
    figures = measurement.figures
    wait = figures.wait_fraction
    echo = settings.echo
    compute_rate = _rate(compute)
    data_rate = _rate(data, echo)
    loader_limit = context.loader_limit
    limit_rate = _rate(loader_limit.figures, echo) if loader_limit else None
    limit_workers = loader_limit.settings.num_workers if loader_limit else None
    verdict: Verdict = "data-bound" if wait > DATA_BOUND else "compute-bound"
    evidence = _evidence(measurement, compute_rate, data_rate, limit_rate, limit_workers)
    loader = _loader(settings, data_rate, limit_rate, limit_workers, context.best_loader)
    advice = _verdict_advice(measurement, verdict, compute_rate, loader, context)
    advice += _caveats(measurement, compute_rate, loader.data, context.no_ceilings)
    advice += _copy(settings, figures.copy_fraction, context.device)
    return Diagnosis(
        subject=subject,
        measurement=measurement,
        verdict=verdict,
        wait_share=wait,
        copy_share=figures.copy_fraction,
        device_busy_share=figures.device_busy_fraction,
        compute_ceiling=compute_rate,
        data_ceiling=data_rate,
        loader_limit=limit_rate,
        limit_workers=limit_workers,
        advice=tuple(advice),
        evidence=tuple(evidence),
    )


def _evidence(
    measurement: Measurement,
    compute_rate: float | None,
    data_rate: float | None,
    limit_rate: float | None,
    limit_workers: int | None,
) -> list[str]:
    """The measured figures a verdict rests on, one per line."""
    settings = measurement.settings
    echo = settings.echo
    evidence = []
    if echo > 1:
        evidence.append(
            f"echo {echo}: {format_rate(measurement.figures.fresh_per_s)} fresh samples/s "
            "from the loader"
        )
    if compute_rate:
        evidence.append(
            f"compute ceiling (the model on batches already in memory): "
            f"{format_rate(compute_rate)} samples/s"
        )
    if data_rate:
        evidence.append(
            f"data ceiling (this loader alone, {count(settings.num_workers, 'worker')}): "
            f"{format_rate(data_rate)} samples/s"
        )
    if limit_rate and limit_workers is not None and limit_workers != settings.num_workers:
        evidence.append(
            f"the loader alone with {count(limit_workers, 'worker')}: "
            f"{format_rate(limit_rate)} samples/s"
        )
    return evidence


def _loader(
    settings: Settings,
    data_rate: float | None,
    limit_rate: float | None,
    limit_workers: int | None,
    best_loader: Measurement | None,
) -> _Loader:
    """What was measured of the loader alone, its best among them."""
    alone = [(data_rate, settings.num_workers), (limit_rate, limit_workers)]
    if best_loader is not None:
        alone.append((_rate(best_loader.figures, settings.echo), best_loader.settings.num_workers))
    best, best_workers = max(
        ((rate, workers) for rate, workers in alone if rate and workers is not None),
        default=(None, 0),
    )
    return _Loader(
        data=data_rate,
        limit=limit_rate,
        limit_workers=limit_workers,
        best=best,
        best_workers=best_workers,
    )


def _verdict_advice(
    measurement: Measurement,
    verdict: Verdict,
    compute: float | None,
    loader: _Loader,
    context: Context,
) -> list[str]:
    """What the verdict says can help, or why no loader setting can."""
    settings = measurement.settings
    rate = measurement.figures.samples_per_s
    cpus = context.cpus
    advice: list[str] = []
    if verdict == "data-bound":
        advice += _data_bound(
            settings, compute, loader, cpus, context.searched, chosen=context.chosen
        )
    elif compute and rate >= compute * NEAR:
        amp = " AMP (bf16/fp16)," if settings.amp == "off" else ""
        advice.append(
            f"the loader keeps up: the model trains at {rate / compute:.0%} of its compute "
            f"ceiling ({format_rate(compute)} samples/s on batches in memory). Loader settings "
            f"cannot make it faster;{amp} a larger batch, a faster device or a cheaper model can."
        )
    elif compute and rate < compute * CONTENTION and settings.num_workers > 0:
        workers = count(settings.num_workers, "worker")
        takes = "takes" if settings.num_workers == 1 else "take"
        advice.append(
            f"the training rarely waits yet runs at {rate / compute:.0%} of its compute "
            f"ceiling ({format_rate(compute)} samples/s): the loader's {workers} {takes} "
            f"CPU time from the training{f' on {cpus} CPUs' if cpus else ''}. Cheaper loading "
            "(preprocessed or cached data, augmentation on the device) frees it."
        )
    return advice


def _caveats(
    measurement: Measurement, compute: float | None, data: float | None, no_ceilings: str
) -> list[str]:
    """Slow worker start-up, and what makes the figures themselves doubtful or incomplete."""
    settings = measurement.settings
    figures = measurement.figures
    rate = figures.samples_per_s
    advice: list[str] = []
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
            f"the ceilings were not measured ({no_ceilings}) to tell whether a "
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
        # Pinned, it is queued on the compute stream: the host goes on, the device's
        # compute still waits for it.
        return [
            line + "pin_memory=True would shorten it: a pinned batch copies faster and "
            "without holding the host, which goes on loading and launching the step "
            "meanwhile; the copy still runs on the device's compute stream, so it "
            "overlaps the host's work, not the device's compute."
        ]
    return [line + "smaller samples (uint8, normalised on the device) would shorten it."]


def _data_bound(
    settings: Settings,
    compute: float | None,
    loader: _Loader,
    cpus: int | None,
    searched: Searched,
    *,
    chosen: bool,
) -> list[str]:
    """Why a data-bound config waits, and whether a loader setting can help."""
    advice: list[str] = []
    on_cpus = f" on {cpus} CPUs" if cpus else ""
    data, limit, limit_workers = loader.data, loader.limit, loader.limit_workers
    more_helps = bool(
        data
        and limit
        and limit_workers
        and limit_workers > settings.num_workers
        and limit > data * MORE_WORKERS
    )
    if settings.num_workers == 0 and chosen and searched.max_workers:
        advice.append(_workers_did_not_pay(loader, cpus, searched.max_workers))
    elif settings.num_workers == 0:
        advice.append(
            "loading happens in the training process (num_workers=0), one batch after the "
            "other between steps: worker processes load the next batches while the model trains."
        )
    elif more_helps and data and limit and limit_workers:
        advice.append(_more_workers(settings, data, limit, limit_workers, searched))
    if compute and loader.best and loader.best < compute * NEAR:
        advice.append(_loading_bound(settings, compute, loader, on_cpus, searched))
    elif compute and limit and settings.num_workers > 0 and not more_helps:
        advice.append(
            f"the loader alone delivers {format_rate(limit)} samples/s, enough for the model "
            f"({format_rate(compute)}), yet beside the training{on_cpus} this config waits: "
            "loading and training compete for the CPUs. Cheaper loading (preprocessed or "
            "cached data, augmentation on the device) helps; on a GPU, pin_memory speeds the "
            "copy."
        )
    return advice


def _workers_did_not_pay(loader: _Loader, cpus: int | None, max_workers: int) -> str:
    """A chosen config without workers waits for data, yet the search trained configs with
    workers and none was faster: say why, from what was measured, not that workers help."""
    text = (
        "loading happens in the training process (num_workers=0), between steps, yet the "
        f"search covered up to {count(max_workers, 'worker')} and none trained faster beyond "
        "the noise: "
    )
    data, limit, workers = loader.data, loader.limit, loader.limit_workers
    if data and limit and workers and limit < data:
        return text + (
            f"the loader alone delivers {format_rate(limit)} samples/s with "
            f"{count(workers, 'worker')} against {format_rate(data)} with none, so handing "
            "batches between processes costs more than loading them here."
        )
    on_cpus = f"on {cpus} CPUs" if cpus else "beside the training"
    return text + (
        f"{on_cpus}, workers take the CPU time the training needs. Only cheaper loading "
        "(preprocessed or cached data, augmentation on the device) shortens the wait."
    )


def _more_workers(
    settings: Settings, data: float, limit: float, limit_workers: int, searched: Searched
) -> str:
    """The loader alone is faster with more workers: widen the search only where its best
    sat on the bound of what it searched, below the workers that measured faster."""
    text = (
        f"the loader alone with {count(limit_workers, 'worker')} delivers {format_rate(limit)} "
        f"samples/s, {limit / data:.1f}x this loader's {format_rate(data)} with "
        f"{count(settings.num_workers, 'worker')}"
    )
    bound = searched.max_workers
    if bound is None or (settings.num_workers >= bound and limit_workers > bound):
        return (
            f"more workers would help: {text}; let the search try more "
            f'(space={{"num_workers": {{"low": 0, "high": {limit_workers}}}}}).'
        )
    return (
        f"{text}, yet the search trained with up to {count(bound, 'worker')} and "
        f"{settings.num_workers} trained fastest: beside the training, more workers cost "
        "the CPU time they save."
    )


def _loading_bound(
    settings: Settings, compute: float, loader: _Loader, on_cpus: str, searched: Searched
) -> str:
    """No loader setting measured can feed the model: the remedy lies outside them."""
    if settings.echo > 1 and searched.max_echo is not None and settings.echo >= searched.max_echo:
        echo = f'echo more than {settings.echo} (space={{"echo": [1, {2 * settings.echo}]}})'
    elif settings.echo > 1:
        echo = "raise echo"
    elif searched.max_echo is not None and searched.max_echo > 1:
        echo = "echo batches (searched: it did not pay here)"
    else:
        echo = 'echo batches (space={"echo": [1, 2, 4]}; it changes what is learned)'
    return (
        "loading (read, decode, augment) is the bottleneck whatever the loader's settings: "
        f"alone, at its best measured (with {count(loader.best_workers, 'worker')}{on_cpus}), "
        "it "
        f"delivers {format_rate(loader.best or 0)} samples/s while the model could train "
        f"{format_rate(compute)}. Only changes outside the loader close that gap: preprocess "
        "offline, cache decoded data, ship smaller samples (uint8, normalised on the device), "
        f"or {echo}."
    )


def diagnose(result: SearchResult) -> list[Diagnosis]:
    """The diagnoses of a search's winner and of its default loader (when measured and not
    itself the winner)."""
    cpus = result.machine.cpus or None
    searched = Searched.from_space(result.space)
    no_ceilings = (
        "the time budget left them out: a larger --budget keeps them"
        if result.budget is not None and result.budget.left_out_ceilings
        else CEILINGS_OFF
    )
    best_loader = _best_loader(result)
    if result.is_default:
        # The recommendation is the default loader itself: one diagnosis, not the same
        # figures twice under two names.
        ceilings = result.ceilings or result.baseline_ceilings
        subject = "default loader (the recommendation)"
    else:
        ceilings, subject = result.ceilings, "best"
    context = Context(
        loader_limit=result.loader_limit,
        cpus=cpus,
        best_loader=best_loader,
        searched=searched,
        device=result.device,
        no_ceilings=no_ceilings,
    )
    best = diagnose_config(
        subject,
        Measurement(settings=result.settings, figures=result.figures),
        compute=ceilings.get("compute"),
        data=ceilings.get("data"),
        context=dataclasses.replace(context, chosen=True),
    )
    diagnoses = [best]
    if result.baseline is not None and not result.is_default:
        diagnoses.append(
            diagnose_config(
                "default loader",
                result.baseline,
                compute=result.baseline_ceilings.get("compute"),
                data=result.baseline_ceilings.get("data"),
                context=context,
            )
        )
    return diagnoses


def _best_loader(result: SearchResult) -> Measurement | None:
    """The loader-alone probe of the search that delivered the most (before echo): the
    winner's data ceiling, the default's, or the loader with the most workers."""
    alone = [result.loader_limit]
    winner_data = result.ceilings.get("data")
    if winner_data is not None:
        alone.append(Measurement(settings=result.settings, figures=winner_data))
    default_data = result.baseline_ceilings.get("data")
    if result.baseline is not None and default_data is not None:
        alone.append(Measurement(settings=result.baseline.settings, figures=default_data))
    measured = [m for m in alone if m is not None and m.samples_per_s > 0]
    return max(measured, key=lambda m: m.samples_per_s, default=None)
