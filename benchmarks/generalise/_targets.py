"""The generalisation targets, judged on the plain-loop checker's medians of one workload.

- the median of the choices >= 0.97 x the grid's best point;
- the worst choice >= 0.93 x the grid's best point;
- every choice >= 0.98 x the default loader, or the default itself chosen;
- every search's wall time <= 0.10 x the cost of measuring its whole space at the
  checker's precision: the configs in the space the search covered (its
  ``result.space``) x the checker's rounds x the mean wall time of one checker
  measurement in this run;
- every choice's checker median inside the interval autotune printed for it (its
  ``result.interval``: the 95% prediction interval of its confirming rounds; in runs
  saved before autotune printed one, the lowest and highest of them).

Where the checker's final set of rounds measured the default, every choice and the
grid's leaders again (:mod:`benchmarks.generalise._rounds`), the ratios are paired: the
median over those rounds of the choice's figure over the other config's in the same
round, against the leader with the highest final median. That leader is picked and
graded on the same rounds: of leaders that train alike, the highest of their noisy
medians sits above what any of them trains at, so a choice as fast as them reads below
1 (by 0.05 on average in the test's model of three leaders and a choice alike, readings
off by up to 30%). The verdicts keep that reading: it errs against the search, never for
it. Beside it, ``vs_first_leader`` holds the reading against the leader the first set
ranked first, graded on rounds that did not pick it: no winner's curse, but where the
first set ranked a lesser leader first it errs for the search, so it judges nothing. A
run without a final set (the runs before it) is judged as it was: on the ratio of the
first set's medians, against the grid point with the highest median.

Where the grid holds the default under another name (its twin,
:func:`benchmarks.generalise._rounds.default_twin`), ``figures["twin"]`` is the
default's ratio to it within each round: the checker set against itself, the distance
at which it reads two loaders that train alike apart. It judges nothing; it says how
close to its bound a verdict can be and still be a verdict.

A choice that is a grid point is read by that point's measurements, so where it is the
grid best its ratio is 1. The default is the one config measured under two names: where
a search chose the default and the grid best is its twin, the choice is the grid best
under its other name, and its ``vs_grid`` is 1 likewise (``vs_grid_measured`` keeps the
default's own reading, the twin's ratio). Read through its own row instead, such a
choice would be judged by the checker's distance from itself (as small-in-ram's was
once: all three searches chose the default and the grid best was its twin; see
docs/benchmark-history.md).

Pure functions of JSON-type figures, so the tests judge made-up figures on both sides
of every bound.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.common._checker import median
from benchmarks.common._verdicts import Verdict
from benchmarks.generalise._rounds import default_twin

MEDIAN_VS_GRID = 0.97
WORST_VS_GRID = 0.93
VS_DEFAULT = 0.98
SEARCH_VS_SPACE = 0.10
SHARED_KNOBS = ("pin_memory", "batch_size", "amp", "echo", "threads")
WORKER_KNOBS = ("prefetch_factor", "persistent_workers", "worker_threads")


def _values(domain: Mapping[str, Any] | None) -> list[Any]:
    """A knob's values in ``Space.to_dict``'s form: fixed, choices, or low..high."""
    if domain is None:
        return [None]
    if "choices" in domain:
        return list(domain["choices"])
    if "low" in domain:
        return list(range(domain["low"], domain["high"] + 1))
    return [domain.get("fixed")]


def space_size(space: Mapping[str, Any]) -> int:
    """How many distinct configs a space holds, read from ``SearchResult.space`` (the
    worker knobs count only with workers, as ``Space.size`` counts them)."""
    per_worker = 1
    for knob in WORKER_KNOBS:
        per_worker *= len(_values(space.get(knob)))
    count = sum(1 if workers == 0 else per_worker for workers in _values(space.get("num_workers")))
    for knob in SHARED_KNOBS:
        count *= len(_values(space.get(knob)))
    return count


def outside_by(value: float, interval: Sequence[float] | None) -> float | None:
    """How far ``value`` lies outside ``interval``, as a fraction of the bound it
    crosses: 0 inside, negative below, positive above; None without an interval."""
    if not interval:
        return None
    low, high = interval
    if value < low:
        return value / low - 1 if low > 0 else -1.0
    if value > high:
        return value / high - 1 if high > 0 else 1.0
    return 0.0


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0


def paired_ratio(numerator: Sequence[float | None], denominator: Sequence[float | None]) -> float:
    """The median over rounds of one config's figure over another's in the same round
    (rounds where either failed left out); 0 when no round has both."""
    return median([a / b for a, b in zip(numerator, denominator, strict=True) if a and b])


def _final(measurement: Mapping[str, Any]) -> list[float | None] | None:
    rounds: list[float | None] | None = measurement.get("final")
    return rounds


def _judged_on_final(measurements: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the final set took every config the verdicts compare: the default, each
    choice (the peer's too) and at least one grid point."""
    needed = [
        m for m in measurements if m["default"] or m["seeds"] or m.get("peer") or m.get("budgeted")
    ]
    leaders = [m for m in measurements if m["grid"] and _final(m)]
    return bool(leaders) and all(_final(m) for m in needed)


@dataclasses.dataclass(frozen=True)
class _Reading:
    """How one workload's checker figures are read: a config's figure, and its ratio to
    another config."""

    final: bool
    """True: the final set's rounds, ratios paired within a round; False: the first
    set's medians."""

    def figure(self, measurement: Mapping[str, Any]) -> float:
        return float(measurement["final_median"] if self.final else measurement["median"])

    def ratio(self, a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
        if self.final:
            return paired_ratio(a["final"], b["final"])
        return _ratio(self.figure(a), self.figure(b))


def _choice(
    search: Mapping[str, Any],
    measured: Mapping[str, Any] | None,
    best: Mapping[str, Any] | None,
    first_leader: Mapping[str, Any] | None,
    default: Mapping[str, Any] | None,
    reading: _Reading,
    first_best: float,
    space_cost_s: float,
    twin: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    figure = reading.figure(measured) if measured else 0.0
    gap = outside_by(figure, search["interval"])
    speedup = reading.ratio(measured, default) if measured and default else 0.0
    speedup_gap = outside_by(speedup, search.get("speedup_interval"))
    vs_grid = reading.ratio(measured, best) if measured and best else 0.0
    # The default chosen, and the grid best its twin: the choice is the grid best.
    is_grid_best = bool(search["is_default"] and twin is not None and best is twin)
    return {
        "seed": search["seed"],
        "describe": search["describe"],
        "samples_per_s": figure,
        "vs_grid": 1.0 if is_grid_best else vs_grid,
        "vs_grid_measured": vs_grid,
        "is_grid_best": is_grid_best,
        "vs_first_leader": (
            reading.ratio(measured, first_leader) if measured and first_leader else 0.0
        ),
        "first_vs_grid": _ratio(measured["median"], first_best) if measured else 0.0,
        "vs_default": speedup,
        "is_default": search["is_default"],
        "search_s": search["wall_s"],
        "space_size": search["space_size"],
        "space_cost_s": space_cost_s,
        "search_vs_space": _ratio(search["wall_s"], space_cost_s),
        "interval": search["interval"],
        "outside_by": gap,
        "inside": gap == 0.0,
        "speedup_interval": search.get("speedup_interval"),
        "speedup_inside": None if speedup_gap is None else speedup_gap == 0.0,
    }


def _peer(
    measured: Mapping[str, Any],
    best: Mapping[str, Any] | None,
    default: Mapping[str, Any] | None,
    reading: _Reading,
    first_best: float,
    twin: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The peer's choice read as a search's is (:func:`_choice`): against the grid best
    and the default, within the same rounds; the default chosen reads as the grid best
    where that is the default's twin. It judges nothing: the verdicts are autotune's."""
    vs_grid = reading.ratio(measured, best) if best else 0.0
    is_grid_best = bool(measured["default"] and twin is not None and best is twin)
    return {
        "describe": measured["describe"],
        "samples_per_s": reading.figure(measured),
        "vs_grid": 1.0 if is_grid_best else vs_grid,
        "vs_grid_measured": vs_grid,
        "is_grid_best": is_grid_best,
        "first_vs_grid": _ratio(measured["median"], first_best),
        "vs_default": reading.ratio(measured, default) if default else 0.0,
        "is_default": bool(measured["default"]),
    }


def assess(
    measurements: Sequence[Mapping[str, Any]],
    searches: Sequence[Mapping[str, Any]],
    *,
    rounds: int,
    measurement_s: float,
    cpus: int | None = None,
) -> dict[str, Any]:
    """One workload's figures and verdicts.

    Args:
        measurements: every config the checker measured, with its ``median`` and its
            roles (``grid``, ``default``, ``seeds``); the finalists also with their
            ``final`` rounds and ``final_median``.
        searches: every search, with its seed, ``interval``, ``wall_s``, ``space_size``
            and ``is_default``.
        rounds: the checker's rounds.
        measurement_s: the mean wall time of one checker measurement in this run.
        cpus: the CPUs the run saw: where given, the default's twin in the grid is
            found and its ratio to the default reported.
    """
    reading = _Reading(final=_judged_on_final(measurements))
    grid = [m for m in measurements if m["grid"]]
    first_best = max(grid, key=lambda m: m["median"]) if grid else None
    candidates = [m for m in grid if _final(m)] if reading.final else grid
    best = max(candidates, key=reading.figure) if candidates else None
    first_leader = max(candidates, key=lambda m: m["median"]) if candidates else None
    grid_best = reading.figure(best) if best else 0.0
    default_row = next((m for m in measurements if m["default"]), None)
    default = reading.figure(default_row) if default_row else 0.0
    by_seed = {seed: m for m in measurements for seed in m["seeds"]}
    twin_index = default_twin(measurements, cpus) if cpus is not None else None
    twin = measurements[twin_index] if twin_index is not None else None
    choices = [
        _choice(
            search,
            by_seed.get(search["seed"]),
            best,
            first_leader,
            default_row,
            reading,
            first_best["median"] if first_best else 0.0,
            search["space_size"] * rounds * measurement_s,
            twin,
        )
        for search in searches
    ]
    ratios = [c["vs_grid"] for c in choices]
    grid_cost_s = len(grid) * rounds * measurement_s
    figures = {
        "grid_best": {
            "describe": best["describe"] if best else None,
            "settings": best["settings"] if best else None,
            "samples_per_s": grid_best,
        },
        "judged_on": "final rounds" if reading.final else "first rounds",
        "first_leader": {
            "describe": first_leader["describe"] if first_leader else None,
            "samples_per_s": reading.figure(first_leader) if first_leader else 0.0,
        },
        "twin": _twin(default_row, twin),
        "first_grid_best": {
            "describe": first_best["describe"] if first_best else None,
            "samples_per_s": first_best["median"] if first_best else 0.0,
        },
        "grid_points": len(grid),
        "default_samples_per_s": default,
        "default_vs_grid": reading.ratio(default_row, best) if default_row and best else 0.0,
        "choices": choices,
        "spread": {"low": min(ratios, default=0.0), "high": max(ratios, default=0.0)},
        "grid_cost_s": grid_cost_s,
        "search_vs_grid": [_ratio(s["wall_s"], grid_cost_s) for s in searches],
        "space_cost": (
            "configs in the search's space x the checker's rounds x the mean wall time of "
            f"one checker measurement in this run ({rounds} x {measurement_s:.2f} s)"
        ),
    }
    peer = next((m for m in measurements if m.get("peer")), None)
    first = first_best["median"] if first_best else 0.0
    if peer is not None:
        figures["peer"] = _peer(peer, best, default_row, reading, first, twin)
    budgeted = next((m for m in measurements if m.get("budgeted")), None)
    if budgeted is not None and peer is not None:
        figures["budgeted"] = {
            **_peer(budgeted, best, default_row, reading, first, twin),
            "vs_peer": reading.ratio(budgeted, peer),
        }
    return {"figures": figures, "verdicts": [v.to_dict() for v in judge(choices)]}


def _twin(
    default: Mapping[str, Any] | None, twin: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The default (its row) against its twin in the grid (see the module docstring), on
    the final rounds where both have them, else on the first; None without either."""
    if twin is None or default is None:
        return None
    final = bool(_final(default) and _final(twin))
    key = "final" if final else "rounds"
    return {
        "describe": twin["describe"],
        "judged_on": "final rounds" if final else "first rounds",
        "rounds": len(default[key]),
        "ratio": paired_ratio(default[key], twin[key]),
    }


def judge(choices: Sequence[Mapping[str, Any]]) -> list[Verdict]:
    """The five verdicts over a workload's choices (from :func:`assess`)."""
    ratios = [c["vs_grid"] for c in choices]
    middle, worst = median(ratios), min(ratios, default=0.0)
    beaten = [c for c in choices if not c["is_default"]]
    vs_default = min((c["vs_default"] for c in beaten), default=1.0)
    cost = max((c["search_vs_space"] for c in choices), default=0.0)
    inside = [c for c in choices if c["inside"]]
    return [
        Verdict(
            target=f"median choice >= {MEDIAN_VS_GRID} x grid best",
            figure=middle,
            bound=MEDIAN_VS_GRID,
            passed=bool(choices) and middle >= MEDIAN_VS_GRID,
            detail=_grid_detail(choices),
        ),
        Verdict(
            target=f"worst choice >= {WORST_VS_GRID} x grid best",
            figure=worst,
            bound=WORST_VS_GRID,
            passed=bool(choices) and worst >= WORST_VS_GRID,
        ),
        Verdict(
            target=f"every choice >= {VS_DEFAULT} x default loader, or the default chosen",
            figure=vs_default,
            bound=VS_DEFAULT,
            passed=bool(choices) and vs_default >= VS_DEFAULT,
            detail=_defaults_detail(choices, beaten),
        ),
        Verdict(
            target=f"search time <= {SEARCH_VS_SPACE} x the space's cost",
            figure=cost,
            bound=SEARCH_VS_SPACE,
            passed=bool(choices) and cost <= SEARCH_VS_SPACE,
            detail=_per_seed(choices, "search_vs_space"),
        ),
        Verdict(
            target="choice inside the interval autotune printed",
            figure=len(inside) / len(choices) if choices else 0.0,
            bound=1.0,
            passed=bool(choices) and len(inside) == len(choices),
            detail=interval_detail(choices),
        ),
    ]


def _per_seed(choices: Sequence[Mapping[str, Any]], key: str) -> str:
    return ", ".join(f"seed {c['seed']} {c[key]:.3f}" for c in choices)


def vs_grid_text(choice: Mapping[str, Any]) -> str:
    """A choice's ratio to the grid best, saying where the choice is the grid best under
    the default's name, with its reading as measured."""
    text = f"{choice['vs_grid']:.3f}"
    if choice.get("is_grid_best"):
        text += f" (the grid best's twin; {choice['vs_grid_measured']:.3f} as measured)"
    return text


def _grid_detail(choices: Sequence[Mapping[str, Any]]) -> str:
    """Each choice against the grid best (:func:`vs_grid_text`)."""
    return ", ".join(f"seed {c['seed']} {vs_grid_text(c)}" for c in choices)


def _defaults_detail(
    choices: Sequence[Mapping[str, Any]], beaten: Sequence[Mapping[str, Any]]
) -> str:
    chosen = [str(c["seed"]) for c in choices if c["is_default"]]
    parts = [_per_seed(beaten, "vs_default")] if beaten else []
    if chosen:
        parts.append(f"the default chosen by seed {', '.join(chosen)}")
    return "; ".join(parts)


def interval_detail(choices: Sequence[Mapping[str, Any]]) -> str:
    """Where each choice's checker median lies against its printed interval."""
    parts = []
    for c in choices:
        gap = c["outside_by"]
        if gap is None:
            where = "no interval printed"
        elif gap == 0.0:
            where = "inside"
        else:
            where = f"{abs(gap):.1%} {'below' if gap < 0 else 'above'}"
        parts.append(f"seed {c['seed']} {where}")
    return ", ".join(parts)
