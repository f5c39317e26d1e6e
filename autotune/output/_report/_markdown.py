"""The report as Markdown: for a terminal or a pull request (no plots)."""

from __future__ import annotations

from autotune._format import format_rate, sentence
from autotune.decide import Diagnosis
from autotune.output._report._data import TRIAL_COLUMNS, ReportData, trial_row
from autotune.result import SearchResult


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(data: ReportData) -> str:
    """The whole report as Markdown text."""
    lines = [f"# autotune report: {data.study_name}", ""]
    lines.append(f"{data.path or ''} · {data.counts()}".lstrip(" ·"))
    lines.append("")
    lines.extend(f"- **{label}**: {value}" for label, value in data.facts())
    lines += ["", "## Diagnosis: where the time goes", ""]
    if not data.diagnoses:
        lines.append(f"No settings chosen yet: {data.no_result}")
    for diagnosis in data.diagnoses:
        lines += _diagnosis_section(diagnosis)
    if data.result is not None:
        lines += _chosen_section(data.result)
    lines += ["## Every trial", ""]
    lines.append("| " + " | ".join(TRIAL_COLUMNS) + " |")
    lines.append("|" + "|".join(" ---: " for _ in TRIAL_COLUMNS[:-1]) + "| --- |")
    for point in data.trials:
        lines.append("| " + " | ".join(_cell(c) for c in trial_row(point.record)) + " |")
    lines += [
        "",
        f"Plots: `autotune report {data.path or 'STUDY'} -o report.html`. "
        f"Browse the study: `optuna-dashboard sqlite:///{data.path or 'STUDY.db'}`.",
        "",
    ]
    return "\n".join(lines)


def _diagnosis_section(diagnosis: Diagnosis) -> list[str]:
    lines = [f"### {diagnosis.subject.capitalize()}: {diagnosis.verdict}", ""]
    lines.append(f"`{diagnosis.measurement.settings.describe()}`")
    lines.append("")
    lines.append("| figure | value |")
    lines.append("| --- | ---: |")
    lines.append(f"| trains | {format_rate(diagnosis.samples_per_s)} samples/s |")
    lines.append(f"| waiting for data | {diagnosis.wait_share:.0%} of each step |")
    if diagnosis.device_busy_share is not None:
        lines.append(f"| device busy | {diagnosis.device_busy_share:.0%} of each step |")
    for label, value in (
        ("compute ceiling", diagnosis.compute_ceiling),
        ("data ceiling", diagnosis.data_ceiling),
    ):
        text = f"{format_rate(value)} samples/s" if value else "not measured"
        lines.append(f"| {label} | {text} |")
    if diagnosis.loader_limit and diagnosis.limit_workers:
        lines.append(
            f"| loader alone, {diagnosis.limit_workers} workers | "
            f"{format_rate(diagnosis.loader_limit)} samples/s |"
        )
    if diagnosis.of_ceiling is not None:
        lines.append(f"| of min(ceilings) | {diagnosis.of_ceiling:.0%} |")
    lines.append("")
    lines.extend(f"- {advice}" for advice in diagnosis.advice)
    if diagnosis.advice:
        lines.append("")
    return lines


def _chosen_section(result: SearchResult) -> list[str]:
    lines = ["## The chosen settings", ""]
    summary = f"**{result.settings.describe()}** on {result.device}: "
    summary += result.rate_text()
    speedup = result.speedup_text()
    if result.baseline is not None and speedup is not None:
        summary += (
            f", {speedup} the default DataLoader "
            f"({format_rate(result.baseline.samples_per_s)} samples/s)"
        )
    lines += [summary + "."]
    if result.is_default:
        lines.append(f"\n{sentence(result.default_text())}")
    if result.caveat is not None:
        lines.append(f"\n**{sentence(result.caveat)}**")
    lines += ["", "```python", result.to_code().rstrip("\n"), "```", ""]
    return lines
