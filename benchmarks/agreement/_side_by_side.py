"""The probe and the plain loop, measured side by side in the same rounds.

The agreement check first searched, then timed the plain loop minutes later: on a
shared VM the machine itself drifted by a quarter between the two (hf-style-text's
default loader, docs/benchmark-history.md), and the drift read as disagreement. Here
each round measures every config twice, once with autotune's probe (a new process,
windows as a search's confirming round takes them) and once with the plain-loop checker
(a new process, no autotune code), one right after the other, the order alternating
between rounds, so that a drift moves both.

This module imports the probe; :mod:`benchmarks.common._checker` must not, and does not
import this one.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from autotune import Settings
from autotune.probe import ProbeRequest, WorkloadSource, run_probe
from benchmarks.common._checker import CheckerError, measure

WINDOW_SECONDS = 0.5
"""The probe's window, as a search takes it (``search = {"window_seconds": 0.5}``)."""

Say = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class Pair:
    """One config's figures, one per round, from each instrument."""

    probe: list[float]
    plain: list[float]


def probe_request(
    config: Path, settings: Settings, *, seconds: float, warmup: float, device: str, seed: int
) -> ProbeRequest:
    """The probe of ``settings`` as a search's confirming round takes it: a warm-up, then
    windows of :data:`WINDOW_SECONDS` adding up to ``seconds``."""
    return ProbeRequest(
        source=WorkloadSource(config_path=str(config)),
        settings=settings,
        device=device,
        window_seconds=WINDOW_SECONDS,
        max_windows=max(1, math.ceil(seconds / WINDOW_SECONDS)),
        warmup_seconds=warmup,
        seed=seed,
    )


def probe_rate(
    config: Path, settings: Settings, *, seconds: float, warmup: float, device: str, seed: int
) -> float:
    """samples/s of one probe of ``settings`` (:func:`probe_request`).

    Raises:
        CheckerError: the probe failed.
    """
    request = probe_request(
        config, settings, seconds=seconds, warmup=warmup, device=device, seed=seed
    )
    result = run_probe(request)
    if result.failure is not None:
        raise CheckerError(f"the probe of {settings.describe()} failed: {result.failure.message}")
    return result.figures.samples_per_s


def measure_pairs(
    config: Path,
    settings_list: Sequence[Settings],
    *,
    rounds: int,
    seconds: float,
    warmup: float,
    device: str,
    seed: int = 0,
    say: Say | None = None,
) -> list[Pair]:
    """Every config by the probe and by the plain loop in each round, one after the
    other (the probe first in even rounds, the plain loop first in odd ones)."""
    pairs = [Pair(probe=[], plain=[]) for _ in settings_list]
    instruments: dict[str, Callable[..., float]] = {"probe": probe_rate, "plain": measure}
    for index in range(rounds):
        order = ("probe", "plain") if index % 2 == 0 else ("plain", "probe")
        for settings, pair in zip(settings_list, pairs, strict=True):
            for kind in order:
                rate = instruments[kind](
                    config, settings, seconds=seconds, warmup=warmup, device=device, seed=seed
                )
                (pair.probe if kind == "probe" else pair.plain).append(rate)
                if say is not None:
                    say(f"round {index + 1}: {kind}: {settings.describe()}: {rate:,.0f}/s")
    return pairs
