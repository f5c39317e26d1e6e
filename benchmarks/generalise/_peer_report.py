"""The peer (loadtune) in the generalisation benchmark's files: its row in a workload's
table, the lines under it, and the table of autotune and the peer side by side that the
markdown and ``RESULTS.md`` print. A section without a peer (every run before it, or one
without ``--peer``) prints nothing here, so their pages stay as they were."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.agreement._check import rate_text
from benchmarks.common._stage_times import TOTAL, mean_times
from benchmarks.generalise._targets import vs_grid_text

NAME = "peer (loadtune)"


def _has_peer(section: Mapping[str, Any]) -> bool:
    return "error" not in section and "peer" in section and "peer" in section["figures"]


def _seconds(value: float) -> str:
    return f"{value:.1f}" if value < 9.95 else f"{value:.0f}"


def _choice_text(peer: Mapping[str, Any], describe: str) -> str:
    if peer.get("error"):
        return f"{describe} (failed; the default kept)"
    return describe if peer["changed"] else f"{describe} (no change)"


def _claimed(peer: Mapping[str, Any]) -> str:
    """What loadtune printed for its choice: its speedup over its own baseline."""
    speedup = (peer.get("answer") or {}).get("speedup")
    if peer.get("error") or not peer["changed"] or not speedup:
        return "no change"
    return f"{speedup:.2f}x its baseline"


def peer_row(section: Mapping[str, Any]) -> list[str] | None:
    """The peer's row in the workload's table (the columns of the searches' rows); None
    without a peer."""
    if not _has_peer(section):
        return None
    peer, figures = section["peer"], section["figures"]["peer"]
    measured: Mapping[str, Any] = next((m for m in section["measurements"] if m.get("peer")), {})
    final = section["figures"].get("judged_on") == "final rounds"
    spread = measured.get("final_spread" if final else "spread")
    spread_text = "-" if spread is None else f"±{100 * spread:.0f}%"
    return [
        NAME,
        _choice_text(peer, figures["describe"]),
        f"{rate_text(figures['samples_per_s'])} ({spread_text})",
        vs_grid_text(figures),
        f"{figures['first_vs_grid']:.3f}",
        "-",
        f"{figures['vs_default']:.2f}",
        _claimed(peer),
        "-",
        _seconds(peer["wall_s"]),
        "-",
    ]


def budgeted_row(section: Mapping[str, Any]) -> list[str] | None:
    """The row of the search given the peer's wall time as its budget, in the workload's
    table (the columns of the searches' rows); None where it did not run."""
    figures = section["figures"].get("budgeted") if "figures" in section else None
    search = section.get("budgeted")
    if figures is None or search is None:
        return None
    measured: Mapping[str, Any] = next(
        (m for m in section["measurements"] if m.get("budgeted")), {}
    )
    final = section["figures"].get("judged_on") == "final rounds"
    spread = measured.get("final_spread" if final else "spread")
    spread_text = "-" if spread is None else f"±{100 * spread:.0f}%"
    seconds = _search_seconds(search)
    return [
        f"at the peer's {_seconds(search['budget_s'])} s",
        figures["describe"],
        f"{rate_text(figures['samples_per_s'])} ({spread_text})",
        vs_grid_text(figures),
        f"{figures['first_vs_grid']:.3f}",
        "-",
        f"{figures['vs_default']:.2f}",
        search["printed"] + ("" if search["confirmed"] else ", not confirmed"),
        "-",
        _seconds(seconds),
        "-",
    ]


def peer_lines(section: Mapping[str, Any]) -> list[str]:
    """What the peer did on the workload, under its table: its run and what the measured
    settings leave out of its recommendation; none without a peer."""
    if not _has_peer(section):
        return []
    peer = section["peer"]
    version = peer.get("version") or "?"
    line = (
        f"The peer: loadtune {version} with its own defaults (a baseline and up to 6 trials "
        f"of 100 steps), run once: {peer['wall_s']:.1f} s for its `tune` call "
        f"({peer['process_s']:.1f} s with its process starting)."
    )
    if peer.get("error"):
        line += f" It failed: {peer['error']}."
    notes = "; ".join(peer["notes"])
    return [line + (f" Notes: {notes}." if notes else ""), ""]


def _autotune_cells(section: Mapping[str, Any]) -> list[str]:
    """autotune's median choice over the grid best, its median over the default, and its
    mean search time (by the search's own clock where it kept one)."""
    choices = section["figures"]["choices"]
    vs_default = statistics.median(c["vs_default"] for c in choices) if choices else 0.0
    times = [s["search_time"] for s in section["searches"] if s.get("search_time")]
    if times:
        seconds = mean_times(times)[TOTAL]
    else:
        walls = [s["wall_s"] for s in section["searches"] if s.get("wall_s") is not None]
        seconds = statistics.mean(walls) if walls else 0.0
    return [f"{section['verdicts'][0]['figure']:.3f}", f"{vs_default:.2f}", _seconds(seconds)]


def side_by_side(sections: Sequence[Mapping[str, Any]]) -> list[str]:
    """autotune and the peer on every workload that measured the peer: a row each, the
    choice over the grid best, over the default, and the wall time; none where no
    workload did."""
    rows = []
    shown = [s for s in sections if _has_peer(s)]
    budgeted = any("budgeted" in s["figures"] for s in shown)
    for section in shown:
        peer, figures = section["peer"], section["figures"]["peer"]
        cells = [
            section["name"],
            *_autotune_cells(section),
            _choice_text(peer, figures["describe"]),
            vs_grid_text(figures),
            f"{figures['vs_default']:.2f}",
            _seconds(peer["wall_s"]),
        ]
        if budgeted:
            cells += _budgeted_cells(section)
        rows.append("| " + " | ".join(cells) + " |")
    if not rows:
        return []
    header = (
        "| workload | autotune: median choice × grid best | autotune: × default "
        "| autotune: search s | peer: choice | peer: × grid best | peer: × default "
        "| peer: wall s |"
    )
    intro = (
        "autotune and the peer, loadtune with its own defaults run once per workload, read "
        "by the checker in the same rounds: autotune's median choice and mean search (by its "
        "own clock), the peer's choice and its `tune` call's seconds."
    )
    columns = 8
    if budgeted:
        header += " at the peer's time: choice × grid best | × the peer's | search s |"
        intro += (
            " At the peer's time: one more search (seed 1) given the peer's wall time as its "
            "`budget`, its choice over the grid best and over the peer's, round by round, and "
            "how long it took (the least search runs whole, past a budget too short for it)."
        )
        columns += 3
    return ["", intro, "", header, "|" + " --- |" * columns, *rows]


def _budgeted_cells(section: Mapping[str, Any]) -> list[str]:
    """The search at the peer's time: its choice over the grid best and over the peer's,
    and its seconds; dashes where it did not run."""
    figures = section["figures"].get("budgeted")
    search = section.get("budgeted")
    if figures is None or search is None:
        return ["-", "-", "-"]
    seconds = _search_seconds(search)
    return [vs_grid_text(figures), f"{figures['vs_peer']:.2f}", _seconds(seconds)]


def _search_seconds(search: Mapping[str, Any]) -> float:
    """The search's time by its own clock where it kept one, else its wall time."""
    kept = search.get("search_time")
    return float(kept["total_s"]) if kept else float(search["wall_s"])
