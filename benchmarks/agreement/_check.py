"""Does the probe grade configs as the user's own loop does?

For each workload: ``autotune.search(config, seed=...)`` with its default options (or
``trials=N``), then the default loader (``result.baseline``) and the choice
(``result.settings``) measured again in interleaved rounds, each round by autotune's
probe and by the plain-loop checker (:mod:`benchmarks.common._checker`, which shares no code
with the probe) one right after the other (:mod:`benchmarks.agreement._side_by_side`), so that
a machine that drifts between the search and the check moves both. A table per
workload sets the search's figure, the probe's and the plain loop's side by side.

The probe is timed as long as one probe of a search's confirming rounds
(:func:`confirming_seconds`, 4.5 s with the default options), the span behind every
figure a search prints, and the plain loop as long. A shorter span tests a figure no
search reports: io-bound's choice (15 persistent workers, an epoch about 1.5 s long)
read by 3 windows of 0.5 s came out in two modes, as the span held an epoch's start or
missed it, and apart from the plain loop; by 9 windows, as the plain loop
(``tools/probe_vs_plain.py``; docs/benchmark-history.md has the run).

``--from-studies DIR`` reads each workload's search from the study an earlier run kept
(``--study-dir``) instead of searching again: the side-by-side rounds alone.

A config **agrees** when the probe's median is within 5% of the plain loop's, or when
the plain loop's own spread between rounds (half its range over its median) covers
the gap: the loop cannot tell them apart more finely than that.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import autotune
from autotune import Settings
from benchmarks.common._checker import median, spread
from benchmarks.common._workloads import BenchWorkload

if TYPE_CHECKING:  # the result's module loads the probe: not needed to read a result
    from autotune import SearchResult

AGREEMENT = 0.05
"""The probe and the plain loop agree within this fraction of the plain loop's median."""
DEFAULT_ROUNDS = 5

Say = Callable[[str], None]


def confirming_seconds() -> float:
    """The timed part of one probe in a search's confirming rounds, with the default
    options: its windows, end to end."""
    options = autotune.SearchOptions()
    return options.window_seconds * options.max_windows


@dataclasses.dataclass(frozen=True, kw_only=True)
class AgreementOptions:
    """How long to search and to measure."""

    rounds: int = DEFAULT_ROUNDS
    """Interleaved rounds of the plain loop."""
    seconds: float = dataclasses.field(default_factory=confirming_seconds)
    """Timed part of one measurement, by the probe and by the plain loop."""
    warmup: float = 0.5
    """Untimed training before it."""
    trials: int | None = None
    """autotune's exploration trials; None: its default."""
    seed: int = 0
    study_dir: Path | None = None
    """Where the searches' studies are kept; None: a temporary folder, removed."""
    from_studies: Path | None = None
    """Read each workload's search from its newest study here (``agreement-<config's
    stem>-seed<seed>-*.db``, as ``study_dir`` keeps them) instead of searching."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProbeSide:
    """One config as autotune's search measured it."""

    label: str
    settings: Settings
    samples_per_s: float | None
    """The probe's figure (its median confirming round); None when not measured."""
    rounds: tuple[float, ...]
    """The probe's samples/s in each confirming round (empty when unknown)."""


def probe_sides(result: SearchResult, user_batch: int) -> list[ProbeSide]:
    """The default loader and the choice, with the figures the search gave them."""
    baseline = result.baseline
    return [
        ProbeSide(
            label="default",
            settings=baseline.settings if baseline else Settings(batch_size=user_batch),
            samples_per_s=baseline.samples_per_s if baseline else None,
            rounds=baseline_rounds(result),
        ),
        ProbeSide(
            label="autotune",
            settings=result.settings,
            samples_per_s=result.samples_per_s,
            rounds=result.rates,
        ),
    ]


def baseline_rounds(result: SearchResult) -> tuple[float, ...]:
    """The default loader's samples/s in each confirming round: the choice's rate over
    the speedup of each round (both were measured in every round, side by side)."""
    rates, ratios = result.rates, result.speedup_rounds
    if result.baseline is None or not rates or len(rates) != len(ratios):
        return ()
    if any(ratio <= 0 for ratio in ratios):
        return ()
    return tuple(rate / ratio for rate, ratio in zip(rates, ratios, strict=True))


def verdict(probe: float | None, plain_rounds: Sequence[float]) -> tuple[bool, str]:
    """Whether the probe's figure agrees with the plain loop's rounds, and why."""
    plain = median(plain_rounds)
    if probe is None or probe <= 0 or plain <= 0:
        return False, "no figure to compare"
    gap = abs(probe / plain - 1)
    if gap <= AGREEMENT:
        return True, f"agrees: within {AGREEMENT:.0%} ({gap:.1%} apart)"
    noise = spread(plain_rounds)
    if gap <= noise:
        return True, f"agrees: the plain loop's spread (±{noise:.1%}) covers the {gap:.1%} gap"
    return False, (
        f"disagrees: {gap:.1%} apart, beyond {AGREEMENT:.0%} and the plain loop's "
        f"spread (±{noise:.1%})"
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Searched:
    """One search of a workload, as a check runs it: a user's call with no flags."""

    result: SearchResult
    options: dict[str, Any]
    """What ``autotune.search`` was given, the study left out."""
    study: Path
    wall_s: float | None
    """Wall time of the call: preflight, exploration, confirmation and ceilings; None:
    read from a study searched before."""


def study_prefix(workload: BenchWorkload, seed: int, tag: str = "agreement") -> str:
    """How the study files of ``workload``'s searches with ``seed`` begin: the time they
    started follows, so that :func:`read_search` finds what :func:`run_search` kept."""
    return f"{tag}-{workload.config.stem}-seed{seed}-"


def run_search(
    workload: BenchWorkload,
    folder: Path,
    *,
    seed: int,
    trials: int | None,
    machine: autotune.Machine,
    say: Say,
    tag: str = "agreement",
    budget: float | None = None,
) -> Searched:
    """``autotune.search(config, seed=...)`` with its default options (or ``trials``, or a
    time ``budget`` in seconds), its study in ``folder``; on a machine with several GPUs,
    one process on one device, as the plain loop trains."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    study = folder / f"{study_prefix(workload, seed, tag)}{stamp}.db"
    search: dict[str, Any] = {"seed": seed, "study": str(study)}
    if trials is not None:
        search["trials"] = trials
    if budget is not None:
        search["budget"] = budget
    if len(machine.gpus) > 1:
        search["gpus"] = 0
    say(f"autotune.search {workload.config.name} ({search})")
    began = time.perf_counter()
    result = autotune.search(workload.config, progress=autotune.LineProgress(sys.stderr), **search)
    return Searched(
        result=result,
        options={k: v for k, v in search.items() if k != "study"},
        study=study,
        wall_s=time.perf_counter() - began,
    )


def read_search(workload: BenchWorkload, folder: Path, *, seed: int, say: Say) -> Searched:
    """The newest search of ``workload`` with ``seed`` kept in ``folder`` by
    :func:`run_search`.

    Raises:
        FileNotFoundError: ``folder`` holds none.
    """
    pattern = f"{study_prefix(workload, seed)}*.db"
    found = sorted(folder.glob(pattern))  # the stamp sorts by time
    if not found:
        raise FileNotFoundError(
            f"no study {pattern} in {folder}; run the check with --study-dir {folder} first, "
            "or leave out --from-studies to search"
        )
    say(f"reading the search from {found[-1]}")
    return Searched(
        result=autotune.load(found[-1]), options={"seed": seed}, study=found[-1], wall_s=None
    )


def run_workload(
    workload: BenchWorkload, options: AgreementOptions, machine: autotune.Machine, say: Say
) -> dict[str, Any]:
    """Search one workload, measure the default and the choice with the plain loop;
    returns its section of the results (JSON types only)."""
    began = time.perf_counter()
    if options.from_studies is not None:
        searched = read_search(workload, options.from_studies, seed=options.seed, say=say)
    else:
        with study_folder(options.study_dir) as folder:
            searched = run_search(
                workload, folder, seed=options.seed, trials=options.trials, machine=machine, say=say
            )
    result = searched.result
    sides = probe_sides(result, result.user_batch)
    pairs = _side_by_side(workload, sides, options, result.device, say)
    return {
        "name": workload.name,
        "config": workload.config.relative_to(workload.config.parents[2]).as_posix(),
        "device": result.device,
        "search": {
            "options": searched.options,
            "study": str(searched.study) if options.study_dir or options.from_studies else None,
            "read": options.from_studies is not None,
            "wall_s": searched.wall_s,
            "search_time": result.search_time.to_dict() if result.search_time else None,
            "confirmed": result.confirmed,
            "probe_rounds": result.rounds,
            "probe_noise": result.noise,
            "is_default": result.is_default,
        },
        "rows": [_row(side, *pairs[side.settings.key()]) for side in sides],
        "wall_s": time.perf_counter() - began,
    }


@contextmanager
def study_folder(kept: Path | None) -> Iterator[Path]:
    """``kept`` (made if missing), or a temporary folder removed after."""
    if kept is not None:
        kept.mkdir(parents=True, exist_ok=True)
        yield kept
        return
    with tempfile.TemporaryDirectory(prefix="autotune-studies-") as folder:
        yield Path(folder)


def _side_by_side(
    workload: BenchWorkload,
    sides: Sequence[ProbeSide],
    options: AgreementOptions,
    device: str,
    say: Say,
) -> dict[str, tuple[list[float], list[float]]]:
    """The probe's and the plain loop's rounds of each distinct config (the default and
    the choice may be one config: it is then measured once)."""
    # Loads the probe: not when a result is only read.
    from benchmarks.agreement import _side_by_side

    distinct = list({side.settings.key(): side.settings for side in sides}.values())
    say(
        f"probe and plain loop: {len(distinct)} config(s), {options.rounds} interleaved "
        "rounds, side by side"
    )
    pairs = _side_by_side.measure_pairs(
        workload.config,
        distinct,
        rounds=options.rounds,
        seconds=options.seconds,
        warmup=options.warmup,
        device=device,
        seed=options.seed,
        say=say,
    )
    return {
        settings.key(): (pair.probe, pair.plain)
        for settings, pair in zip(distinct, pairs, strict=True)
    }


def _row(side: ProbeSide, probe_rounds: list[float], plain_rounds: list[float]) -> dict[str, Any]:
    plain = median(plain_rounds)
    probe = median(probe_rounds) if probe_rounds else None
    agrees, why = verdict(probe, plain_rounds)
    return {
        "config": side.label,
        "settings": side.settings.to_dict(),
        "describe": side.settings.describe(),
        "search": {
            "samples_per_s": side.samples_per_s,
            "rounds": list(side.rounds),
            "interval": [min(side.rounds), max(side.rounds)] if len(side.rounds) > 1 else None,
        },
        "probe": {"samples_per_s": probe, "rounds": probe_rounds, "spread": spread(probe_rounds)},
        "plain": {"samples_per_s": plain, "rounds": plain_rounds, "spread": spread(plain_rounds)},
        "ratio": probe / plain if probe and plain > 0 else None,
        "search_ratio": side.samples_per_s / plain if side.samples_per_s and plain > 0 else None,
        "agrees": agrees,
        "why": why,
    }


# --------------------------------------------------------------------- the table
HEADER = (
    "| config | settings | search's samples/s (rounds' range) | probe samples/s (spread) | "
    "plain loop samples/s (spread) | probe / plain | verdict |"
)


def rate_text(value: float | None) -> str:
    """Samples/s as the tables print them: thousands separated, three digits below 100."""
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _cells(row: Mapping[str, Any]) -> list[str]:
    search, probe, plain = row["search"], row["probe"], row["plain"]
    search_text = rate_text(search["samples_per_s"])
    if search["interval"]:
        low, high = search["interval"]
        search_text += f" ({rate_text(low)}-{rate_text(high)})"
    ratio = row["ratio"]
    return [
        row["config"],
        row["describe"],
        search_text,
        f"{rate_text(probe['samples_per_s'])} (±{100 * probe['spread']:.1f}%)",
        f"{rate_text(plain['samples_per_s'])} (±{100 * plain['spread']:.1f}%)",
        "-" if ratio is None else f"{ratio:.3f}",
        row["why"],
    ]


def markdown(section: Mapping[str, Any]) -> str:
    """One workload's table (or its error), in markdown."""
    title = f"### {section['name']}"
    if "error" in section:
        return f"{title}\n\nFAILED: {section['error']}\n"
    lines = [title, "", HEADER, "|" + " --- |" * 7]
    lines += ["| " + " | ".join(_cells(row)) + " |" for row in section["rows"]]
    search = section["search"]
    took = (
        f"search read from {Path(search['study']).name}"
        if search.get("read")
        else f"search {search['wall_s']:.0f} s"
    )
    lines += [
        "",
        f"Probe: {search['probe_rounds']} confirming rounds, noise {search['probe_noise']:.1%}"
        f"{'' if search['confirmed'] else ', not confirmed'}; {took}. "
        f"Device: {section['device']}.",
    ]
    return "\n".join(lines) + "\n"
