"""How often the plain-loop checker's figure for a choice lay inside an interval drawn
from the search's confirming rounds, over generalisation results files.

For every choice a results file judged, from the rounds the search recorded
(``rates``, ``speedup_rounds``):

- ``printed``: the samples/s interval the search printed at that commit;
- ``range``: the lowest and highest of the rounds;
- ``predict``: the 95% prediction interval autotune prints now
  (:func:`autotune.result._predict.prediction_interval`);

and the same for the speedup over the default (the checker's paired ratio of the
choice over the default loader).

::

    python tools/interval_coverage.py benchmarks/results/generalise-2026-11-2*.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune.result._predict import prediction_interval
from benchmarks.generalise._targets import outside_by


def inside(value: float, interval: Sequence[float] | None) -> bool | None:
    """Whether ``value`` lies in ``interval``, as the benchmark's interval target reads
    it (:func:`benchmarks.generalise._targets.outside_by`); None without one."""
    gap = outside_by(value, interval)
    return None if gap is None else gap == 0.0


def spanned(values: Sequence[float]) -> tuple[float, float] | None:
    """The lowest and highest of ``values``: the interval autotune printed before the
    prediction interval; None for fewer than 2."""
    return (min(values), max(values)) if len(values) > 1 else None


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per judged choice: its checker figures and which intervals held them."""
    found = []
    for section in results["workloads"]:
        if "error" in section:
            continue
        choices = {c["seed"]: c for c in section["figures"]["choices"]}
        for search in section["searches"]:
            choice = choices.get(search["seed"])
            if choice is None or not choice["samples_per_s"]:
                continue
            rates, speedups = search["rates"], search["speedup_rounds"]
            figure, speedup = choice["samples_per_s"], choice["vs_default"]
            predicted = prediction_interval(rates)
            found.append(
                {
                    "workload": section["name"],
                    "seed": search["seed"],
                    "printed": inside(figure, search["interval"]),
                    "range": inside(figure, spanned(rates)),
                    "predict": inside(figure, predicted),
                    "predict_width": predicted[1] / predicted[0] if predicted else None,
                    "error": math.log(figure / statistics.median(rates)) if rates else None,
                    "speedup_range": inside(speedup, spanned(speedups)),
                    "speedup_predict": inside(speedup, prediction_interval(speedups))
                    if speedup
                    else None,
                }
            )
    return found


def count(found: Sequence[dict[str, Any]], key: str) -> str:
    judged = [r[key] for r in found if r[key] is not None]
    return f"{sum(judged)}/{len(judged)}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="generalise results (JSON)")
    args = parser.parse_args(argv)
    keys = ("printed", "range", "predict", "speedup_range", "speedup_predict")
    print("| file | commit | workloads | choices | " + " | ".join(keys) + " |")
    print("| --- " * (4 + len(keys)) + "|")
    every: list[dict[str, Any]] = []
    for path in args.files:
        results = json.loads(path.read_text())
        found = rows(results)
        every += found
        names = ", ".join(sorted({r["workload"] for r in found}))
        cells = " | ".join(count(found, k) for k in keys)
        print(f"| {path.name} | {results['commit'][:7]} | {names} | {len(found)} | {cells} |")
    print(f"| all | | | {len(every)} | " + " | ".join(count(every, k) for k in keys) + " |")
    widths = [r["predict_width"] for r in every if r["predict_width"]]
    errors = [abs(r["error"]) for r in every if r["error"] is not None]
    if widths and errors:
        print(
            f"\nprediction interval, high / low: median {statistics.median(widths):.2f}, "
            f"largest {max(widths):.2f}; |log(checker / search median)|: median "
            f"{statistics.median(errors):.3f}, largest {max(errors):.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
