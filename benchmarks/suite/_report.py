"""Tables and files: one table per workload on stdout, results JSON and markdown on disk."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.suite._compare import spread

COLUMNS = (
    ("strategy", "strategy"),
    ("choice", "choice"),
    ("samples/s", "samples/s"),
    ("x oracle", "× oracle"),
    ("x defaults", "× defaults"),
    ("% ceiling", "% of ceiling"),
    ("search s", "search s"),
    ("x oracle search", "search × oracle's"),
    ("spread", "round spread"),
)
QUICK_NOTE = (
    "Quick mode: a small grid and half-length windows, to finish in about 15 minutes. "
    "The grid is too small for the search-time target to mean anything (autotune's "
    "default 24 trials cover most of it); judge the targets on a full run."
)


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _cells(row: Mapping[str, Any]) -> list[str]:
    return [
        row["strategy"],
        row["describe"],
        _rate(row["samples_per_s"]),
        f"{row['vs_oracle']:.3f}",
        f"{row['vs_defaults']:.2f}",
        f"{100 * row['of_ceiling']:.0f}%",
        f"{row['search_s']:.0f}",
        f"{row['search_vs_oracle']:.3f}",
        f"{100 * row['round_spread']:.0f}%",
    ]


def _extra_rows(section: Mapping[str, Any]) -> list[list[str]]:
    ceilings = section["ceilings"]
    ceiling = ceilings["min"]
    rows = []
    for kind in ("compute", "data"):
        data = ceilings[kind]
        share = data["samples_per_s"] / ceiling if ceiling else 0.0
        rows.append(
            [
                f"{kind} ceiling",
                data["describe"],
                _rate(data["samples_per_s"]),
                "",
                "",
                f"{100 * share:.0f}%",
                "",
                "",
                f"{100 * spread(data['rounds']):.0f}%",
            ]
        )
    for reference in section["references"]:
        rows.append(
            [
                f"({reference['label']})",
                "oracle's settings",
                _rate(reference["samples_per_s"]),
                f"{reference['vs_oracle']:.3f}",
                "",
                f"{100 * reference['of_ceiling']:.0f}%",
                "",
                "",
                f"{100 * spread(reference['rounds']):.0f}%",
            ]
        )
    return rows


def _title(section: Mapping[str, Any]) -> str:
    grid = section["grid"]
    return (
        f"{section['name']}: {section['summary']} (batch {section['batch_size']}, "
        f"{section['device']}; grid of {grid['size']} configs)"
    )


def text_table(section: Mapping[str, Any]) -> str:
    """One workload as a fixed-width table with its verdicts, for the terminal."""
    if "error" in section:
        return f"{section['name']}: FAILED: {section['error']}\n"
    header = [name for name, _ in COLUMNS]
    body = [_cells(row) for row in section["strategies"]] + _extra_rows(section)
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    numeric = set(range(2, len(header)))

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in numeric else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    lines = [_title(section), line(header), line(["-" * w for w in widths])]
    lines += [line(cells) for cells in body]
    lines.append(f"ceiling = min(compute, data) = {_rate(section['ceilings']['min'])} samples/s")
    lines += _shared_cpu_lines(section)
    lines += ["  " + _verdict_line(v) for v in section["verdicts"]]
    return "\n".join(lines) + "\n"


def _shared_cpu_lines(section: Mapping[str, Any]) -> list[str]:
    """What loader and model can train together on shared CPUs, where that is below the
    ceiling (see benchmarks.common._verdicts.shared_cpu_limit): one line, or none."""
    ceilings = section["ceilings"]
    shared = ceilings.get("shared_cpu")
    if not shared or shared["samples_per_s"] >= ceilings["min"]:
        return []
    return [
        f"Sharing the CPUs: the cheapest loading measured kept all the CPUs busy "
        f"{shared['load_cost'] * 1e3:.2f} ms per sample ({shared['load_config']}), the "
        f"cheapest training {shared['train_cost'] * 1e3:.2f} ms ({shared['train_config']}); "
        f"side by side on the same CPUs, about {_rate(shared['samples_per_s'])} samples/s."
    ]


def _verdict_line(verdict: Mapping[str, Any]) -> str:
    mark = "PASS" if verdict["passed"] else "FAIL"
    text = f"{mark}  {verdict['target']}: {verdict['figure']:.3f} (bound {verdict['bound']:g})"
    return f"{text}; {verdict['detail']}" if verdict["detail"] else text


def _markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines


def markdown(results: Mapping[str, Any], json_name: str) -> str:
    """The whole run as markdown: what ran where, one table per workload, the verdicts."""
    machine = results["machine"]
    lines = [
        f"# Benchmark results: {results['date']}, {results['host']} ({results['mode']} mode)",
        "",
        f"{machine['cpus']} CPUs ({machine['cpu_model']}), "
        f"{machine['memory_bytes'] / 2**30:.0f} GiB, "
        f"{', '.join(machine['gpus']) or 'no GPU'}; torch {results['versions']['torch']}, "
        f"autotune {results['versions']['autotune']} at {results['commit'] or 'an unknown commit'}"
        f"{' (with local changes)' if results['dirty'] else ''}; seed {results['seed']}; "
        f"{results['profile']['rounds']} interleaved rounds of windows of "
        f"{results['profile']['window_seconds']:g} s; {results['wall_s'] / 60:.0f} min in all.",
        f"Every figure is in [{json_name}]({json_name}).",
        "",
    ]
    if results["mode"] == "quick":
        lines += [f"> {QUICK_NOTE}", ""]
    # What a person running the suite wrote about the run (how it was made, what disturbed it).
    for note in results.get("notes", []):
        lines += [f"> {note}", ""]
    lines += ["## Targets", ""]
    lines += verdict_summary(results["workloads"])
    for section in results["workloads"]:
        lines += ["", f"## {section['name']}", ""]
        if "error" in section:
            lines.append(f"FAILED: {section['error']}")
            continue
        lines += [_title(section) + ".", ""]
        if section.get("note"):
            lines += [f"> {section['note']}", ""]
        body = [_cells(row) for row in section["strategies"]] + _extra_rows(section)
        lines += _markdown_table([label for _, label in COLUMNS], body)
        lines.append("")
        lines.append(
            f"Ceiling = min(compute, data) = {_rate(section['ceilings']['min'])} samples/s."
        )
        lines += _shared_cpu_lines(section)
        for reference in section["references"]:
            lines.append(f"({reference['label']}): {reference['note']}.")
        lines.append("")
        lines += [f"- {_verdict_line(v)}" for v in section["verdicts"]]
    return "\n".join(lines) + "\n"


def verdict_summary(sections: Sequence[Mapping[str, Any]]) -> list[str]:
    """The targets over every workload, in markdown: a row each, PASS or FAIL with the
    figure, n/a where a target does not apply to the workload."""
    targets: list[str] = []
    for section in sections:
        for verdict in section.get("verdicts", []):
            if verdict["target"] not in targets:
                targets.append(verdict["target"])
    rows = []
    for section in sections:
        found = {v["target"]: v for v in section.get("verdicts", [])}
        cells = [section["name"]]
        for target in targets:
            verdict = found.get(target)
            if verdict is None:
                cells.append("n/a" if "error" not in section else "error")
            else:
                cells.append(f"{'PASS' if verdict['passed'] else 'FAIL'} {verdict['figure']:.3f}")
        rows.append(cells)
    return _markdown_table(["workload", *targets], rows)


def write(results: Mapping[str, Any], out: Path) -> tuple[Path, Path]:
    """Write ``<date>-<host>.json`` and ``.md`` into ``out``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{results['date']}-{results['host']}"
    json_path = out / f"{stem}.json"
    md_path = out / f"{stem}.md"
    json_path.write_text(json.dumps(results, indent=1, sort_keys=False) + "\n")
    md_path.write_text(markdown(results, json_path.name))
    return json_path, md_path
