"""How finely the generalisation benchmark's plain-loop checker reads, from saved runs.

For each workload section of each results file, judged again by this version's rules
(:func:`benchmarks.generalise._report.merge`'s reading: nothing is measured again):

- ``twin``: the default loader over its twin in the grid (the same config under another
  name), paired within each round: the checker set against itself;
- for a section judged on a final set, the median and worst choice against the grid
  best (the verdicts' reading) and against the leader the first set ranked first.

Then, over every section, how many twins fell within autotune's default tolerance and
within 5% of 1. Prints a markdown table; ``--json`` writes the figures too.

::

    python tools/checker_resolution.py benchmarks/results/generalise-*.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune._noise import DEFAULT_TOLERANCE
from benchmarks.generalise._report import _judged_again


def rows(path: Path) -> list[dict[str, Any]]:
    """One row per judged workload section of a results file."""
    found = []
    for section in json.loads(path.read_text())["workloads"]:
        if "error" in section:
            continue
        figures = _judged_again(section)["figures"]
        choices = figures["choices"]
        final = figures["judged_on"] == "final rounds"
        verdict = [c["vs_grid"] for c in choices]
        first = [c["vs_first_leader"] for c in choices]
        found.append(
            {
                "file": path.name,
                "workload": section["name"],
                "judged_on": figures["judged_on"],
                "twin": figures["twin"],
                "median_vs_grid": statistics.median(verdict) if verdict else None,
                "worst_vs_grid": min(verdict, default=None),
                "median_vs_first_leader": statistics.median(first) if final and first else None,
                "worst_vs_first_leader": min(first, default=None) if final else None,
            }
        )
    return found


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def markdown(found: list[dict[str, Any]]) -> str:
    lines = [
        "| results file | workload | checker vs itself | median / worst × grid best "
        "| median / worst × first leader |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in found:
        twin = row["twin"]
        twin_text = f"{twin['ratio']:.3f} ({twin['rounds']} {twin['judged_on']})" if twin else "-"
        lines.append(
            f"| {row['file']} | {row['workload']} | {twin_text} | "
            f"{_cell(row['median_vs_grid'])} / {_cell(row['worst_vs_grid'])} | "
            f"{_cell(row['median_vs_first_leader'])} / {_cell(row['worst_vs_first_leader'])} |"
        )
    ratios = sorted(row["twin"]["ratio"] for row in found if row["twin"])
    if ratios:
        within = {b: sum(abs(r - 1) <= b for r in ratios) for b in (DEFAULT_TOLERANCE, 0.05)}
        lines += [
            "",
            f"Checker vs itself over {len(ratios)} sections: {ratios[0]:.3f}-{ratios[-1]:.3f}, "
            f"median {statistics.median(ratios):.3f}; "
            f"within {DEFAULT_TOLERANCE:.0%} of 1: {within[DEFAULT_TOLERANCE]}, "
            f"within 5%: {within[0.05]}.",
        ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="generalise results JSON files")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    found = [row for path in sorted(args.results) for row in rows(path)]
    print(markdown(found))
    if args.json:
        args.json.write_text(json.dumps(found, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
