"""The report as one self-contained HTML file: styles inline, plots as base64 PNG."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from html import escape

from autotune._format import format_rate, sentence
from autotune.decide import Diagnosis
from autotune.output._report._data import TRIAL_COLUMNS, ReportData, trial_row
from autotune.output._report._plots import Plot

_STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222;
       max-width: 1060px; margin: 24px auto; padding: 0 16px; }
h1 { font-size: 24px; margin-bottom: 4px; } h2 { font-size: 19px; margin-top: 32px;
     border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.sub { color: #666; margin-top: 0; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 2px 14px; }
dl.facts dt { color: #666; } dl.facts dd { margin: 0; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(440px, 1fr));
         gap: 14px; }
.card { border: 1px solid #ddd; border-radius: 8px; padding: 12px 16px; }
.card h3 { margin: 0 0 6px; font-size: 17px; }
.verdict { display: inline-block; padding: 1px 9px; border-radius: 10px; color: white;
           font-size: 13px; font-weight: 600; vertical-align: 2px; margin-left: 6px; }
.data-bound { background: #D1762F; } .compute-bound { background: #3F64A0; }
.config { font-family: ui-monospace, monospace; font-size: 13px; color: #444; }
table.figures td { padding: 1px 10px 1px 0; } table.figures td.n { text-align: right;
     font-variant-numeric: tabular-nums; font-weight: 600; }
.advice li { margin: 4px 0; }
figure { margin: 18px 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 13px; }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 14px; }
pre { background: #f6f8fa; padding: 10px; border-radius: 6px; overflow-x: auto; }
table.trials { border-collapse: collapse; font-size: 12px; width: 100%; }
table.trials th, table.trials td { border-bottom: 1px solid #eee; padding: 2px 6px;
     text-align: right; white-space: nowrap; }
table.trials th:last-child, table.trials td.note { text-align: left; white-space: normal; }
table.trials td.note { color: #777; } tr.fail td.note { color: #a33; }
tr.pruned { color: #888; } tr.fail { background: #fff3f3; } tr.baseline { background: #fff8ef; }
tr.chosen { background: #f2fbf2; font-weight: 600; }
footer { margin-top: 36px; color: #777; font-size: 13px; }
"""


def render_html(data: ReportData, plots: Sequence[Plot]) -> str:
    """The whole report as HTML text."""
    title = f"autotune report: {data.study_name}"
    body = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="sub">{escape(data.path or "")} &middot; {escape(data.counts())}</p>',
        _facts(data),
        _diagnoses(data, plots),
        _chosen(data),
        _plots(plots),
        _trials(data),
        _footer(data),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>\n"
        + "\n".join(part for part in body if part)
        + "\n</body></html>\n"
    )


def _img(plot: Plot) -> str:
    encoded = base64.b64encode(plot.png).decode("ascii")
    return (
        f'<figure id="plot-{plot.key}"><img alt="{escape(plot.title)}" '
        f'src="data:image/png;base64,{encoded}">'
        f"<figcaption><b>{escape(plot.title)}.</b> {escape(plot.caption)}</figcaption></figure>"
    )


def _facts(data: ReportData) -> str:
    rows = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in data.facts())
    return f'<dl class="facts">{rows}</dl>' if rows else ""


def _diagnoses(data: ReportData, plots: Sequence[Plot]) -> str:
    parts = ['<h2 id="diagnosis">Diagnosis: where the time goes</h2>']
    if not data.diagnoses:
        parts.append(f"<p>No settings chosen yet: {escape(data.no_result or '')}</p>")
        return "\n".join(parts)
    parts.append('<div class="cards">')
    parts.extend(_card(d) for d in data.diagnoses)
    parts.append("</div>")
    parts.extend(_img(p) for p in plots if p.key == "ceilings")
    return "\n".join(parts)


def _card(diagnosis: Diagnosis) -> str:
    settings = diagnosis.measurement.settings
    rows: list[tuple[str, str]] = [
        ("trains", f"{format_rate(diagnosis.samples_per_s)} samples/s"),
        ("waiting for data", f"{diagnosis.wait_share:.0%} of each step"),
    ]
    if diagnosis.device_busy_share is not None:
        rows.append(("device busy", f"{diagnosis.device_busy_share:.0%} of each step"))
    rows += [
        ("compute ceiling", _rate(diagnosis.compute_ceiling)),
        ("data ceiling", _rate(diagnosis.data_ceiling)),
    ]
    if diagnosis.loader_limit and diagnosis.limit_workers:
        rows.append(
            (f"loader alone, {diagnosis.limit_workers} workers", _rate(diagnosis.loader_limit))
        )
    if diagnosis.of_ceiling is not None:
        rows.append(("of min(ceilings)", f"{diagnosis.of_ceiling:.0%}"))
    table = "".join(f'<tr><td>{escape(k)}</td><td class="n">{escape(v)}</td></tr>' for k, v in rows)
    advice = "".join(f"<li>{escape(a)}</li>" for a in diagnosis.advice)
    return (
        f'<div class="card"><h3>{escape(diagnosis.subject.capitalize())}'
        f'<span class="verdict {diagnosis.verdict}">{escape(diagnosis.verdict)}</span></h3>'
        f'<div class="config">{escape(settings.describe())}</div>'
        f'<table class="figures">{table}</table>'
        + (f'<ul class="advice">{advice}</ul>' if advice else "")
        + "</div>"
    )


def _rate(value: float | None) -> str:
    return f"{format_rate(value)} samples/s" if value else "not measured"


def _chosen(data: ReportData) -> str:
    result = data.result
    if result is None:
        return ""
    parts = ['<h2 id="chosen">The chosen settings</h2>', "<p>"]
    parts.append(
        f"<b>{escape(result.settings.describe())}</b> on {escape(result.device)}: "
        f"{escape(result.rate_text())}"
    )
    speedup = result.speedup_text()
    if result.baseline is not None and speedup is not None:
        parts.append(
            f", {escape(speedup)} the default DataLoader "
            f"({format_rate(result.baseline.samples_per_s)} samples/s)"
        )
    parts.append(".")
    if result.is_default:
        parts.append(f" {escape(sentence(result.default_text()))}")
    if result.caveat is not None:
        parts.append(f" <b>{escape(sentence(result.caveat))}</b>")
    parts.append("</p>")
    parts.append(f"<pre>{escape(result.to_code())}</pre>")
    return "".join(parts)


def _plots(plots: Sequence[Plot]) -> str:
    by_key = {p.key: p for p in plots}
    if not set(by_key) - {"ceilings"}:
        return ""
    parts = ['<h2 id="plots">The search</h2>']
    if "timeline" in by_key:
        parts.append(_img(by_key["timeline"]))
    pair = [by_key[k] for k in ("by_num_workers", "by_batch_size") if k in by_key]
    if pair:
        parts.append('<div class="pair">' + "".join(_img(p) for p in pair) + "</div>")
    if "wait_share" in by_key:
        parts.append(_img(by_key["wait_share"]))
    return "\n".join(parts)


def _trials(data: ReportData) -> str:
    winner = data.result.settings if data.result else None
    head = "".join(f"<th>{escape(c)}</th>" for c in TRIAL_COLUMNS)
    rows = []
    for point in data.trials:
        record = point.record
        classes = [record.state.lower()]
        if record.role == "baseline":
            classes.append("baseline")
        elif record.settings == winner and record.role == "confirm":
            classes.append("chosen")
        cells = trial_row(record)
        tds = "".join(f"<td>{escape(c)}</td>" for c in cells[:-1])
        tds += f'<td class="note">{escape(cells[-1])}</td>'
        rows.append(f'<tr class="{" ".join(classes)}">{tds}</tr>')
    return (
        '<h2 id="trials">Every trial</h2>'
        f'<table class="trials"><thead><tr>{head}</tr></thead><tbody>'
        + "".join(rows)
        + "</tbody></table>"
    )


def _footer(data: ReportData) -> str:
    path = data.path or "STUDY.db"
    return (
        "<footer>Made by <code>autotune report</code>. The study is an Optuna storage: "
        f"browse it with <code>optuna-dashboard sqlite:///{escape(path)}</code>.</footer>"
    )
