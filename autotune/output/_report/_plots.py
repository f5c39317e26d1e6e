"""The report's plots, drawn with matplotlib (the ``report`` extra) and returned as PNG.

Figures are made with matplotlib's object API on the Agg canvas, never through
pyplot, so drawing a report changes no global matplotlib state of the caller.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from autotune._errors import MissingExtraError
from autotune._format import format_rate
from autotune.output._report._data import ReportData, TrialPoint
from autotune.settings import Settings
from autotune.study import TrialRecord

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ROLE_COLORS = {"explore": "#4C72B0", "confirm": "#55A868", "baseline": "#DD8452"}
FAILED = "#C44E52"
WAIT = "#DD8452"
COMPUTE = "#4C72B0"
MAX_BARS = 16
DPI = 100


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plot:
    """One plot of the report."""

    key: str
    title: str
    caption: str
    png: bytes


def require_matplotlib() -> None:
    """Raise :class:`MissingExtraError` when matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingExtraError(
            "the HTML report draws its plots with matplotlib, which is not installed: "
            "pip install 'autotune[report]' (or use --format md, which needs nothing more)."
        ) from None


def _figure(width: float, height: float) -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    axes = figure.subplots()
    axes.grid(True, alpha=0.3)
    axes.spines[["top", "right"]].set_visible(False)
    return figure, axes


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def _measured(data: ReportData) -> list[TrialRecord]:
    """Trials with settings and a throughput, each config's repeats left out."""
    return [
        r
        for r in data.records
        if r.state in ("COMPLETE", "PRUNED")
        and r.settings is not None
        and r.value is not None
        and r.duplicate_of is None
    ]


def _legend_markers(axes: Axes, entries: Sequence[tuple[str, dict[str, Any]]]) -> None:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], linestyle="none", label=label, **style) for label, style in entries]
    axes.legend(handles=handles, loc="best", fontsize=8, framealpha=0.85)


# --------------------------------------------------------------------- timeline
TIMELINE_LEGEND: tuple[tuple[str, dict[str, Any]], ...] = (
    ("explore", {"marker": "o", "color": ROLE_COLORS["explore"]}),
    ("confirm", {"marker": "o", "color": ROLE_COLORS["confirm"]}),
    ("default loader", {"marker": "o", "color": ROLE_COLORS["baseline"]}),
    (
        "pruned (hollow)",
        {"marker": "o", "markerfacecolor": "white", "color": ROLE_COLORS["explore"]},
    ),
    ("failed", {"marker": "x", "color": FAILED}),
    ("best so far", {"marker": "_", "color": "black", "markersize": 14}),
)


def timeline(data: ReportData) -> Plot | None:
    """Throughput by trial over time: each trial's windows, its final figure, the best so far."""
    points = [p for p in data.trials if p.end_s is not None]
    if not points:
        return None
    span = max(p.end_s or 0.0 for p in points)
    unit, scale = ("min", 60.0) if span > 180 else ("s", 1.0)
    figure, axes = _figure(10, 4.2)
    best = [_timeline_point(axes, point, scale) for point in points]
    _best_so_far(axes, [b for b in best if b is not None])
    axes.set_xlabel(f"time since the first trial ({unit})")
    axes.set_ylabel("samples/s")
    axes.set_ylim(bottom=0)
    _legend_markers(axes, list(TIMELINE_LEGEND))
    return Plot(
        key="timeline",
        title="Throughput by trial over time",
        caption=(
            "Each dot is a trial's figure when it ended (hollow: pruned by ASHA; a cross: "
            "failed); the thin steps are its measuring windows, so a pruned trial's short run "
            "shows. The black line is the best complete trial so far."
        ),
        png=_png(figure),
    )


def _timeline_point(axes: Axes, point: TrialPoint, scale: float) -> tuple[float, float] | None:
    """Draw one trial's windows and end; its (end, figure) when it counts for the best so far."""
    record = point.record
    end = (point.end_s or 0.0) / scale
    color = ROLE_COLORS.get(record.role, "#777777")
    _window_steps(axes, point, scale, color)
    if record.state == "FAIL":
        axes.scatter([end], [0], marker="x", color=FAILED, s=36, zorder=4)
    elif record.value is not None:
        hollow = record.state == "PRUNED"
        axes.scatter(
            [end],
            [record.value],
            s=30,
            zorder=4,
            facecolors="white" if hollow else color,
            edgecolors=color,
            linewidths=1.3,
        )
        if record.role != "baseline" and record.state == "COMPLETE":
            return (end, record.value)
    return None


def _best_so_far(axes: Axes, best: list[tuple[float, float]]) -> None:
    """The best complete trial so far, as black steps over time."""
    if not best:
        return
    best.sort()
    xs, ys, top = [], [], 0.0
    for x, y in best:
        top = max(top, y)
        xs.append(x)
        ys.append(top)
    axes.step(xs, ys, where="post", color="black", linewidth=1.2, zorder=3)


def _window_steps(axes: Axes, point: TrialPoint, scale: float, color: str) -> None:
    """A trial's windows as steps ending at the trial's end (they are its last seconds)."""
    record = point.record
    figures = record.figures
    if figures is None or not figures.windows or record.duplicate_of is not None:
        return
    t = point.end_s or 0.0
    xs: list[float] = []
    ys: list[float] = []
    for window in reversed(figures.windows):
        xs += [t / scale, (t - window.seconds) / scale]
        ys += [window.samples_per_s, window.samples_per_s]
        t -= window.seconds
    axes.plot(xs[::-1], ys[::-1], color=color, linewidth=0.8, alpha=0.55, zorder=2)


# --------------------------------------------------------------------- by knob
KNOB_LABELS = {"num_workers": "num_workers", "batch_size": "batch size"}
KNOB_LEGEND: tuple[tuple[str, dict[str, Any]], ...] = (
    ("pruned (hollow)", {"marker": "o", "markerfacecolor": "white", "color": "#555555"}),
    (
        "default loader",
        {"marker": "D", "markerfacecolor": "none", "color": ROLE_COLORS["baseline"]},
    ),
    (
        "chosen",
        {"marker": "*", "color": "#F2C14E", "markeredgecolor": "black", "markersize": 12},
    ),
)


def by_knob(data: ReportData, knob: str, hue: str) -> Plot | None:
    """Throughput against one knob, coloured by another."""
    records = _measured(data)
    if not records:
        return None
    from matplotlib import colormaps
    from matplotlib.colors import Normalize

    hues = sorted({_knob_value(r, hue) for r in records})
    cmap = colormaps["viridis"]
    norm = Normalize(min(hues), max(hues) if max(hues) > min(hues) else min(hues) + 1)
    figure, axes = _figure(6.2, 4.0)
    best_at = _knob_points(axes, records, knob, lambda r: cmap(norm(_knob_value(r, hue))))
    _mark_chosen(axes, data, knob)
    xs = sorted(best_at)
    axes.plot(xs, [best_at[x] for x in xs], color="#555555", linestyle="--", linewidth=1, zorder=2)
    if knob == "batch_size":
        axes.set_xscale("log", base=2)
        axes.set_xticks(xs, [str(int(x)) for x in xs])
    else:
        axes.set_xticks(xs, [str(int(x)) for x in xs])
    axes.set_xlabel(KNOB_LABELS.get(knob, knob))
    axes.set_ylabel("samples/s")
    axes.set_ylim(bottom=0)
    entries: list[tuple[str, dict[str, Any]]] = []
    if len(hues) <= 6:
        entries += [
            (f"{KNOB_LABELS.get(hue, hue)} {int(h)}", {"marker": "o", "color": cmap(norm(h))})
            for h in hues
        ]
    else:
        from matplotlib.cm import ScalarMappable

        figure.colorbar(
            ScalarMappable(norm=norm, cmap=cmap), ax=axes, label=KNOB_LABELS.get(hue, hue)
        )
    entries += KNOB_LEGEND
    _legend_markers(axes, entries)
    name = KNOB_LABELS.get(knob, knob)
    return Plot(
        key=f"by_{knob}",
        title=f"Throughput vs {name}",
        caption=(
            f"Every measured trial by its {name}, coloured by {KNOB_LABELS.get(hue, hue)}; the "
            f"dashed line joins the best at each {name}."
        ),
        png=_png(figure),
    )


def _knob_value(record: TrialRecord, name: str) -> float:
    settings = record.settings
    assert settings is not None
    return float(getattr(settings, name))


def _knob_points(
    axes: Axes, records: list[TrialRecord], knob: str, color_of: Callable[[TrialRecord], Any]
) -> dict[float, float]:
    """Draw each trial at its knob (repeats spread apart); the best figure at each value."""
    placed: dict[float, int] = {}
    best_at: dict[float, float] = {}
    for record in records:
        rate = record.value or 0.0
        x = _knob_value(record, knob)
        placed[x] = placed.get(x, 0) + 1
        spread = 0.06 * ((placed[x] % 5) - 2)
        px = x * 2**spread if knob == "batch_size" else x + spread
        color = color_of(record)
        hollow = record.state == "PRUNED"
        axes.scatter(
            [px],
            [rate],
            s=34,
            facecolors="white" if hollow else color,
            edgecolors=color,
            linewidths=1.3,
            zorder=3,
        )
        best_at[x] = max(best_at.get(x, 0.0), rate)
        if record.role == "baseline":
            axes.scatter(
                [px],
                [rate],
                marker="D",
                s=70,
                facecolors="none",
                edgecolors=ROLE_COLORS["baseline"],
                linewidths=1.6,
                zorder=4,
            )
    return best_at


def _mark_chosen(axes: Axes, data: ReportData, knob: str) -> None:
    """A star at the chosen config, when the study chose one."""
    winner = data.result.settings if data.result else None
    if winner is not None and data.result is not None:
        axes.scatter(
            [float(getattr(winner, knob))],
            [data.result.samples_per_s],
            marker="*",
            s=220,
            color="#F2C14E",
            edgecolors="black",
            linewidths=0.8,
            zorder=5,
        )


# --------------------------------------------------------------------- wait share
def _per_config(data: ReportData) -> list[TrialRecord]:
    """Each config once: its fullest measurement (most windows, latest on a tie)."""

    def windows(record: TrialRecord) -> int:
        return len(record.figures.windows) if record.figures else 0

    chosen: dict[str, TrialRecord] = {}
    for record in _measured(data):
        if not windows(record) or record.settings is None:
            continue
        # The default loader keeps its own bar even when a trial explored the same config.
        key = ("baseline:" if record.role == "baseline" else "") + record.settings.key()
        known = chosen.get(key)
        if known is None or windows(record) >= windows(known):
            chosen[key] = record
    return sorted(chosen.values(), key=lambda r: r.value or 0.0, reverse=True)


def wait_share(data: ReportData) -> Plot | None:
    """For each config, the share of each step spent waiting for data vs computing."""
    configs = _per_config(data)
    if not configs:
        return None
    winner = data.result.settings if data.result else None
    shown = configs[:MAX_BARS]
    for record in configs[MAX_BARS:]:
        if record.role == "baseline" or record.settings == winner:
            shown.append(record)
    shown.reverse()  # fastest at the top
    figure, axes = _figure(10, 0.9 + 0.32 * len(shown))
    labels, waits = [], []
    for record in shown:
        assert record.settings is not None and record.figures is not None
        mark = " (default)" if record.role == "baseline" else ""
        mark = " (chosen)" if record.settings == winner and not mark else mark
        labels.append(f"#{record.number} {_short(record.settings)}{mark}")
        waits.append(record.figures.wait_fraction * 100)
    rows = range(len(shown))
    axes.barh(rows, waits, color=WAIT, label="waiting for data")
    axes.barh(rows, [100 - w for w in waits], left=waits, color=COMPUTE, label="training")
    for row, record in zip(rows, shown, strict=True):
        axes.text(101, row, f"{format_rate(record.value)}/s", va="center", fontsize=8)
    axes.set_yticks(list(rows), labels, fontsize=8)
    axes.set_xlim(0, 112)
    axes.set_xticks([0, 25, 50, 75, 100], ["0%", "25%", "50%", "75%", "100%"])
    axes.set_xlabel("share of each step's time")
    axes.grid(False)
    axes.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, fontsize=8, frameon=False)
    more = len(configs) - len(shown)
    return Plot(
        key="wait_share",
        title="Waiting for data, per config",
        caption=(
            "For each config measured (fastest at the top, its samples/s at the right), the "
            "share of each training step spent waiting for the loader (orange) and training "
            "(blue)." + (f" {more} slower configs are left out." if more > 0 else "")
        ),
        png=_png(figure),
    )


def _short(settings: Settings) -> str:
    text = settings.describe()
    return text.replace("persistent=", "pers=").replace("prefetch=", "pf=")


# --------------------------------------------------------------------- ceilings
def ceilings(data: ReportData) -> Plot | None:
    """Each diagnosed config beside its ceilings."""
    if not data.diagnoses or not any(d.ceiling for d in data.diagnoses):
        return None
    rows: list[tuple[str, float, str]] = []
    for diagnosis in data.diagnoses:
        name = diagnosis.subject
        rows.append((f"{name}: trains", diagnosis.samples_per_s, "#333333"))
        if diagnosis.compute_ceiling:
            rows.append((f"{name}: compute ceiling", diagnosis.compute_ceiling, COMPUTE))
        if diagnosis.data_ceiling:
            rows.append((f"{name}: data ceiling", diagnosis.data_ceiling, WAIT))
    first = data.diagnoses[0]
    if first.loader_limit and first.limit_workers:
        rows.append((f"loader alone, {first.limit_workers} workers", first.loader_limit, "#E8B38A"))
    rows.reverse()
    figure, axes = _figure(10, 0.8 + 0.38 * len(rows))
    positions = range(len(rows))
    axes.barh(positions, [r[1] for r in rows], color=[r[2] for r in rows])
    top = max(r[1] for r in rows)
    for position, (_, rate, _) in zip(positions, rows, strict=True):
        axes.text(rate + top * 0.01, position, f"{format_rate(rate)}", va="center", fontsize=8)
    axes.set_yticks(list(positions), [r[0] for r in rows], fontsize=9)
    axes.set_xlim(0, top * 1.12)
    axes.set_xlabel("samples/s")
    return Plot(
        key="ceilings",
        title="Throughput beside the ceilings",
        caption=(
            "What each config trains (dark) beside the most the model trains on batches "
            "already in memory (compute ceiling) and the most its loader delivers with no model "
            "(data ceiling). The lower ceiling bounds what any loader setting can reach."
        ),
        png=_png(figure),
    )


PLOTS: tuple[Callable[[ReportData], Plot | None], ...] = (
    ceilings,
    timeline,
    lambda data: by_knob(data, "num_workers", "batch_size"),
    lambda data: by_knob(data, "batch_size", "num_workers"),
    wait_share,
)


def draw(data: ReportData) -> list[Plot]:
    """Every plot the study has data for."""
    require_matplotlib()
    plots = []
    for make in PLOTS:
        plot = make(data)
        if plot is not None:
            plots.append(plot)
    return plots
