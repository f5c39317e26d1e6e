"""One picture of every workload: the grid's points and the searches' choices on one
axis, samples/s over the grid's best (plain SVG, written here: no plotting library).

Each workload is a row: a grey dot per grid point, a hollow square for the default
loader, a triangle per search (coloured by seed), and lines at the targets (1, 0.97
and 0.93 of the grid's best). Each mark is a ratio within one set of rounds: the grid
points over the best of the first set, which measured them all; the default and the
choices over the grid best in the final rounds, which grade them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from benchmarks.generalise._targets import MEDIAN_VS_GRID, WORST_VS_GRID

WIDTH = 760
LEFT = 150
RIGHT = 24
TOP = 56
ROW = 30
BOTTOM = 40
SEED_COLOURS = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def _ratio(value: float, best: float) -> float:
    return value / best if best > 0 else 0.0


def _points(section: Mapping[str, Any]) -> tuple[list[float], float | None, list[Any]]:
    """A workload's grid points, default loader and choices over its grid's best, each
    against the best of the rounds that measured it: the grid points against the first
    set's best point (as the grid table reads them), the default and the choices paired
    with the grid best in the final rounds, where those ran."""
    figures = section["figures"]
    best = figures["grid_best"]["samples_per_s"]
    first_best = figures.get("first_grid_best", figures["grid_best"])["samples_per_s"]
    grid = [_ratio(m["median"], first_best) for m in section["measurements"] if m["grid"]]
    default = figures.get("default_vs_grid", _ratio(figures["default_samples_per_s"], best))
    return grid, default, figures["choices"]


def _axis_end(sections: Sequence[Mapping[str, Any]]) -> float:
    highest = 1.0
    for section in sections:
        grid, default, choices = _points(section)
        highest = max([highest, *grid, default or 0.0, *(c["vs_grid"] for c in choices)])
    return math.ceil(highest * 10 + 0.5) / 10  # room to the right of the highest mark


class _Canvas:
    def __init__(self, end: float) -> None:
        self.end = end
        self.parts: list[str] = []

    def x(self, ratio: float) -> float:
        return LEFT + min(ratio, self.end) / self.end * (WIDTH - LEFT - RIGHT)

    def add(self, text: str) -> None:
        self.parts.append(text)

    def text(self, x: float, y: float, words: str, **attributes: str) -> None:
        extra = "".join(f" {k.replace('_', '-')}={quoteattr(v)}" for k, v in attributes.items())
        self.add(f'<text x="{x:.1f}" y="{y:.1f}"{extra}>{escape(words)}</text>')


def _scale(canvas: _Canvas, height: float) -> None:
    """Ticks under the rows, and the lines of the targets across them."""
    bottom = height - BOTTOM
    step = 0.25 if canvas.end <= 2 else 0.5
    tick = 0.0
    while tick <= canvas.end + 1e-9:
        x = canvas.x(tick)
        canvas.add(
            f'<line x1="{x:.1f}" y1="{bottom:.1f}" x2="{x:.1f}" y2="{bottom + 4:.1f}" '
            'stroke="#444"/>'
        )
        canvas.text(x, bottom + 16, f"{tick:g}", text_anchor="middle")
        tick += step
    canvas.add(
        f'<line x1="{LEFT}" y1="{bottom:.1f}" x2="{WIDTH - RIGHT}" y2="{bottom:.1f}" '
        'stroke="#444"/>'
    )
    canvas.text(
        (LEFT + WIDTH - RIGHT) / 2,
        bottom + 32,
        "samples/s in the plain loop over the grid's best in the same rounds",
        text_anchor="middle",
    )
    for bound, dash in ((1.0, ""), (MEDIAN_VS_GRID, "4 3"), (WORST_VS_GRID, "2 3")):
        x = canvas.x(bound)
        dashes = f' stroke-dasharray="{dash}"' if dash else ""
        canvas.add(
            f'<line class="bound" x1="{x:.1f}" y1="{TOP - 6}" x2="{x:.1f}" '
            f'y2="{bottom:.1f}" stroke="#999"{dashes}/>'
        )


def _legend(canvas: _Canvas, seeds: Sequence[int]) -> None:
    y = 34
    canvas.add(f'<circle cx="{LEFT + 6}" cy="{y - 4}" r="3" fill="#888" fill-opacity="0.6"/>')
    canvas.text(LEFT + 14, y, "grid point")
    canvas.add(
        f'<rect x="{LEFT + 88}" y="{y - 8}" width="8" height="8" fill="none" stroke="#000"/>'
    )
    canvas.text(LEFT + 102, y, "default loader")
    x = LEFT + 200
    for index, seed in enumerate(seeds):
        colour = SEED_COLOURS[index % len(SEED_COLOURS)]
        canvas.add(f'<path d="{_triangle(x, y - 4)}" fill="{colour}"/>')
        canvas.text(x + 8, y, f"seed {seed}")
        x += 64
    canvas.text(x + 10, y, "lines: 1, 0.97, 0.93", fill="#666")


def _triangle(x: float, y: float) -> str:
    return f"M{x:.1f},{y - 5:.1f} L{x + 5:.1f},{y + 4:.1f} L{x - 5:.1f},{y + 4:.1f} Z"


def _row(canvas: _Canvas, section: Mapping[str, Any], y: float, seeds: Sequence[int]) -> None:
    grid, default, choices = _points(section)
    canvas.text(LEFT - 8, y + 4, section["name"], text_anchor="end")
    canvas.add(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#eee"/>')
    for ratio in grid:
        canvas.add(
            f'<circle class="grid" cx="{canvas.x(ratio):.1f}" cy="{y:.1f}" r="3" '
            'fill="#888" fill-opacity="0.6"/>'
        )
    if default is not None:
        canvas.add(
            f'<rect class="default" x="{canvas.x(default) - 4:.1f}" y="{y - 4:.1f}" '
            'width="8" height="8" fill="none" stroke="#000"/>'
        )
    for choice in choices:
        index = seeds.index(choice["seed"]) if choice["seed"] in seeds else 0
        colour = SEED_COLOURS[index % len(SEED_COLOURS)]
        offset = (index - (len(seeds) - 1) / 2) * 5  # choices at one figure stay apart
        title = f"seed {choice['seed']}: {choice['describe']}, {choice['vs_grid']:.3f} x grid best"
        canvas.add(
            f'<path class="choice" d="{_triangle(canvas.x(choice["vs_grid"]), y + offset)}"'
            f' fill="{colour}"><title>{escape(title)}</title></path>'
        )


def svg(sections: Sequence[Mapping[str, Any]]) -> str:
    """The figure for every workload that was measured (failed ones are left out)."""
    measured = [s for s in sections if "figures" in s]
    seeds = sorted({c["seed"] for s in measured for c in s["figures"]["choices"]})
    height = TOP + ROW * max(1, len(measured)) + BOTTOM
    canvas = _Canvas(_axis_end(measured))
    canvas.text(
        LEFT,
        16,
        "Each search's choice against the grid, measured by the plain loop",
        font_weight="bold",
    )
    _legend(canvas, seeds)
    for index, section in enumerate(measured):
        _row(canvas, section, TOP + ROW * index + ROW / 2, seeds)
    _scale(canvas, height)
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">'
    )
    background = f'<rect width="{WIDTH}" height="{height}" fill="#fff"/>'
    return "\n".join([head, background, *canvas.parts, "</svg>"]) + "\n"
