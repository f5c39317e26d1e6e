"""The generalisation benchmark on a simulated accelerator: what a GPU user watches.

For every config the checker measured on a simulated device (:mod:`benchmarks.simdevice`)
the figures gain the device's utilisation (its busy time over the timed part's wall
time, the median of its rounds), its ceiling at that config's batch size and AMP mode,
the physical limit ``min(device ceiling, data ceiling)`` and the config's samples/s over
that limit (:mod:`benchmarks.common._device_limits`). One more target is judged: each search's
choice keeps the device busy at least ``BUSY_SHARE x min(1, data ceiling / device
ceiling)`` of the time, read on the final rounds where the final set took it.

Pure functions of JSON-type figures, so the tests judge made-up figures on both sides of
the bound.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.common._checker import median
from benchmarks.common._device_limits import BUSY_SHARE, busy_bound, physical_limit
from benchmarks.common._verdicts import Verdict


def readings(measurement: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A measurement's device readings, the final set's where it has them."""
    rounds = measurement.get("final_device_readings") or measurement.get("device_readings") or []
    return [r for r in rounds if r]


def on_device(measurements: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the checker read a simulated device for any of these measurements."""
    return any(readings(m) for m in measurements)


def config_figures(measurement: Mapping[str, Any], data_ceiling: float) -> dict[str, Any] | None:
    """One config's device figures; None where no round read the device."""
    found = readings(measurement)
    if not found:
        return None
    ceiling = median([r["ceiling"] for r in found])
    rate = measurement.get("final_median") or measurement["median"]
    limit = physical_limit(ceiling, data_ceiling)
    return {
        "describe": measurement["describe"],
        "samples_per_s": rate,
        "utilisation": median([r["utilisation"] for r in found]),
        "device_ceiling": ceiling,
        "limit": limit,
        "vs_limit": rate / limit if limit > 0 else 0.0,
        "busy_bound": busy_bound(ceiling, data_ceiling),
    }


def assess_device(
    measurements: Sequence[Mapping[str, Any]],
    searches: Sequence[Mapping[str, Any]],
    data_ceiling: float | None,
) -> dict[str, Any]:
    """``{"simulated_device": {...}}``: every device config's figures and the busy verdict; empty
    where no measurement read a simulated device or no data ceiling was measured."""
    if data_ceiling is None or not on_device(measurements):
        return {}
    configs = [config_figures(m, data_ceiling) for m in measurements]
    by_seed = {seed: i for i, m in enumerate(measurements) for seed in m["seeds"]}
    choices = []
    for search in searches:
        index = by_seed.get(search["seed"])
        figures = configs[index] if index is not None else None
        share = figures["utilisation"] / figures["busy_bound"] if figures else 0.0
        choices.append({"seed": search["seed"], "busy_vs_bound": share, **(figures or {})})
    verdict = busy_verdict(choices, _most_busy([c for c in configs if c is not None]))
    return {
        "simulated_device": {
            "data_ceiling": data_ceiling,
            "configs": [c for c in configs if c is not None],
            "choices": choices,
            "verdict": verdict.to_dict(),
        }
    }


def busy_verdict(
    choices: Sequence[Mapping[str, Any]], most: Mapping[str, Any] | None = None
) -> Verdict:
    """Every choice keeps the device busy >= BUSY_SHARE of the share it can be busy;
    the detail names ``most``, the measured config closest to its bound, since the bound
    takes the loader alone and no config may come near it."""
    worst = min((c["busy_vs_bound"] for c in choices), default=0.0)
    detail = ", ".join(
        f"seed {c['seed']} busy {c.get('utilisation', 0.0):.3f} of {c.get('busy_bound', 0.0):.3f}"
        for c in choices
    )
    if most is not None:
        detail += (
            f"; of every config measured, the most: {most['busy_vs_bound']:.3f} x its bound "
            f"({most['describe']}, busy {most['utilisation']:.3f} of {most['busy_bound']:.3f})"
        )
    return Verdict(
        target=f"choice keeps the device busy >= {BUSY_SHARE} x min(1, data/device ceiling)",
        figure=worst,
        bound=BUSY_SHARE,
        passed=bool(choices) and worst >= BUSY_SHARE,
        detail=detail,
    )


def _most_busy(configs: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The config busy the largest share of its bound, with that share; None for none."""
    shares = [
        {**c, "busy_vs_bound": c["utilisation"] / c["busy_bound"]}
        for c in configs
        if c["busy_bound"] > 0
    ]
    return max(shares, key=lambda c: c["busy_vs_bound"], default=None)


def device_lines(section: Mapping[str, Any]) -> list[str]:
    """A section's device table and verdict, in markdown; none off a simulated device."""
    device = section.get("simulated_device")
    if not device:
        return []
    lines = [
        f"On the simulated accelerator: data ceiling with every CPU "
        f"{device['data_ceiling']:,.0f} samples/s.",
        "",
        "| config | samples/s | device busy | device ceiling | limit | × limit |",
        "|---|---|---|---|---|---|",
    ]
    for c in device["configs"]:
        lines.append(
            f"| {c['describe']} | {c['samples_per_s']:,.0f} | {c['utilisation']:.3f} | "
            f"{c['device_ceiling']:,.0f} | {c['limit']:,.0f} | {c['vs_limit']:.3f} |"
        )
    verdict = device["verdict"]
    lines += [
        "",
        f"- {'PASS' if verdict['passed'] else 'FAIL'} {verdict['target']}: "
        f"{verdict['figure']:.3f} ({verdict['detail']})",
        "",
    ]
    return lines
