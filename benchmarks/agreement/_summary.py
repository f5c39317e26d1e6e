"""The agreement check in one table: a row per workload, for the results page."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _ratio(row: Mapping[str, Any]) -> str:
    ratio = row["ratio"]
    why = row["why"].removeprefix("agrees: ")
    return f"{'-' if ratio is None else f'{ratio:.3f}'} ({why})"


def summary(sections: Sequence[Mapping[str, Any]]) -> list[str]:
    """A row per workload (the default loader's probe/plain ratio, autotune's choice and
    its ratio), then a line per row that does not agree; a choice that is the default's
    own settings points at the default's row instead of repeating it."""
    lines = [
        "| workload | default loader: probe / plain | autotune's choice | choice: probe / plain |",
        "| --- | --- | --- | --- |",
    ]
    apart: list[str] = []
    distinct: list[Mapping[str, Any]] = []
    for section in sections:
        if "error" in section:
            lines.append(f"| {section['name']} | FAILED | - | - |")
            continue
        rows = {row["config"]: row for row in section["rows"]}
        default, choice = rows["default"], rows["autotune"]
        same = choice["settings"] == default["settings"]
        settings = "the default" if same else choice["describe"]
        ratio = "(the default's row)" if same else _ratio(choice)
        lines.append(f"| {section['name']} | {_ratio(default)} | {settings} | {ratio} |")
        own = [row for row in section["rows"] if not (same and row is choice)]
        distinct += own
        apart += [
            f"- {section['name']}, {row['config']}: {row['why']}"
            for row in own
            if not row["agrees"]
        ]
    agreed = sum(row["agrees"] for row in distinct)
    lines += [
        "",
        f"{agreed} of {len(distinct)} distinct rows agree.",
        *(["", *apart] if apart else []),
    ]
    return lines
