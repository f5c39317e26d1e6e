"""The targets of the suite, judged on one workload's final (interleaved) figures.

- autotune's choice >= 0.97 x the oracle's throughput;
- autotune's search time <= 0.15 x the exhaustive grid's;
- autotune's choice >= 0.90 x min(compute ceiling, data ceiling);
- autotune's choice >= 0.98 x the defaults' (compute-bound included);
- on io-bound and cpu-decode, clearly above every baseline that is not the
  oracle: at least ``CLEAR_MARGIN`` above it, unless that baseline's config is
  itself within ``CLEAR_MARGIN`` of the oracle's (no better config exists).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from autotune._noise import DEFAULT_TOLERANCE

VS_ORACLE = 0.97
SEARCH_VS_GRID = 0.15
VS_CEILING = 0.90
VS_DEFAULTS = 0.98
CLEAR_MARGIN = DEFAULT_TOLERANCE
"""autotune's own default tolerance: the noise within which configs count as equal."""
BASELINES = ("defaults", "rule of thumb", "greedy sweep", "loader-only")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Verdict:
    """One target on one workload: the figure, the bound, and whether it holds."""

    target: str
    figure: float
    bound: float
    passed: bool
    detail: str = ""

    def line(self) -> str:
        mark = "PASS" if self.passed else "FAIL"
        text = f"{mark}  {self.target}: {self.figure:.3f} (bound {self.bound:g})"
        return f"{text}; {self.detail}" if self.detail else text

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0


@dataclasses.dataclass(frozen=True)
class SharedCpu:
    """What loader and model can train together when they share the CPUs."""

    samples_per_s: float
    load_cost: float
    """Seconds of all the CPUs' time the cheapest measured loading took per sample."""
    load_config: str
    train_cost: float
    """Seconds of all the CPUs' time the cheapest measured training step took per sample."""
    train_config: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _cheapest(probes: Iterable[Mapping[str, Any]]) -> tuple[float, str] | None:
    costs = [
        (p["cpu_busy"] / p["samples_per_s"], p["describe"])
        for p in probes
        if p.get("cpu_busy") and p.get("samples_per_s")
    ]
    return min(costs) if costs else None


def shared_cpu_limit(
    compute: Iterable[Mapping[str, Any]], data: Iterable[Mapping[str, Any]]
) -> SharedCpu | None:
    """About the most loader and model can train together on the same CPUs.

    ``compute`` and ``data`` are the ceilings' probes (``Measured.to_dict()``: their
    samples/s, the share of the CPUs kept busy, the config). A probe that kept a share
    ``busy`` of the CPUs busy at ``rate`` samples/s took ``busy / rate`` seconds of all
    the CPUs per sample. Side by side on the same CPUs, loading and training each take
    at least the cheapest such cost measured, and the costs add up: training runs at
    most about ``1 / (load_cost + train_cost)`` samples/s, below min(compute, data)
    wherever both are CPU work (decoding, training on the CPU). An estimate, not a
    strict bound: a config cheaper per sample than any measured would lift it.
    None when no probe recorded how busy the CPUs were.
    """
    load, train = _cheapest(data), _cheapest(compute)
    if load is None or train is None:
        return None
    return SharedCpu(
        samples_per_s=1 / (load[0] + train[0]),
        load_cost=load[0],
        load_config=load[1],
        train_cost=train[0],
        train_config=train[1],
    )


def judge(
    medians: Mapping[str, float],
    search_s: Mapping[str, float],
    ceiling: float,
    *,
    must_beat_baselines: bool,
    shared: float | None = None,
) -> list[Verdict]:
    """The verdicts for one workload.

    Args:
        medians: each strategy's interleaved median samples/s, by strategy name.
        search_s: each strategy's search wall time, by strategy name.
        ceiling: min(compute ceiling, data ceiling), interleaved medians.
        must_beat_baselines: judge the "clearly above every baseline" target.
        shared: the samples/s of :func:`shared_cpu_limit`, quoted beside the ceiling
            target (not judged).
    """
    ours = medians["autotune"]
    best = medians["oracle"]
    ceiling_detail = f"oracle reaches {_ratio(best, ceiling):.3f}"
    if shared is not None and shared < ceiling:
        ceiling_detail += (
            f"; of the {shared:,.0f} samples/s loader and model can share the CPUs for, "
            f"autotune reaches {_ratio(ours, shared):.3f}, the oracle {_ratio(best, shared):.3f}"
        )
    verdicts = [
        Verdict(
            target="autotune >= 0.97 x oracle",
            figure=_ratio(ours, best),
            bound=VS_ORACLE,
            passed=_ratio(ours, best) >= VS_ORACLE,
        ),
        Verdict(
            target="search time <= 0.15 x grid",
            figure=_ratio(search_s["autotune"], search_s["oracle"]),
            bound=SEARCH_VS_GRID,
            passed=_ratio(search_s["autotune"], search_s["oracle"]) <= SEARCH_VS_GRID,
            detail=f"{search_s['autotune']:.0f} s vs {search_s['oracle']:.0f} s",
        ),
        Verdict(
            target="autotune >= 0.90 x ceiling",
            figure=_ratio(ours, ceiling),
            bound=VS_CEILING,
            passed=_ratio(ours, ceiling) >= VS_CEILING,
            detail=ceiling_detail,
        ),
        Verdict(
            target="autotune >= 0.98 x defaults",
            figure=_ratio(ours, medians["defaults"]),
            bound=VS_DEFAULTS,
            passed=_ratio(ours, medians["defaults"]) >= VS_DEFAULTS,
        ),
    ]
    if must_beat_baselines:
        verdicts.append(beats_baselines(medians))
    return verdicts


def beats_baselines(medians: Mapping[str, float]) -> Verdict:
    """autotune clearly above each baseline, or that baseline already at the oracle."""
    ours, best = medians["autotune"], medians["oracle"]
    worst_margin = float("inf")
    notes = []
    passed = True
    for name in BASELINES:
        theirs = medians[name]
        margin = _ratio(ours, theirs)
        worst_margin = min(worst_margin, margin)
        if margin >= 1 + CLEAR_MARGIN:
            continue
        if _ratio(theirs, best) >= 1 - CLEAR_MARGIN:
            notes.append(
                f"{name} is already within {CLEAR_MARGIN:.0%} of the oracle ({margin:.3f}x)"
            )
        else:
            passed = False
            notes.append(f"not clearly above {name} ({margin:.3f}x)")
    return Verdict(
        target="clearly above every baseline",
        figure=worst_margin,
        bound=1 + CLEAR_MARGIN,
        passed=passed,
        detail="; ".join(notes) if notes else "lowest ratio to a baseline",
    )
