"""Text views of a result and of a study's trials, for the terminal."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from autotune._format import format_rate
from autotune.decide import Diagnosis
from autotune.probe import Figures
from autotune.result import SearchResult
from autotune.study import TrialRecord


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f}"


def _busy(figures: Figures) -> str:
    """ ", device busy 85%" where the device's busy share was measured (a GPU); "" else."""
    busy = figures.device_busy_fraction
    return "" if busy is None else f", device busy {busy:.0%}"


def result_lines(result: SearchResult) -> list[str]:
    """The chosen settings, the figures behind them, and the time the search took."""
    figures = result.figures
    kept = "the default DataLoader, " if result.is_default else ""
    lines = [f"best: {kept}{result.settings.describe()}  (device {result.device})"]
    detail = f"  {result.rate_text()}"
    if result.settings.echo > 1:
        detail += f" ({format_rate(figures.fresh_per_s)} fresh samples/s)"
    detail += f", waiting for data {figures.wait_fraction:.0%} of the time{_busy(figures)}"
    if figures.startup_s is not None:
        detail += f", start-up {figures.startup_s:.2f} s"
    if figures.peak_memory_bytes:
        detail += f", peak memory {_mib(figures.peak_memory_bytes)} MiB"
    lines.append(detail)
    if result.caveat is not None:
        lines.append(f"  ({result.caveat})")
    if result.baseline is not None and not result.is_default:
        # Kept, the default is the config above: its figures are those already printed.
        base = result.baseline
        lines.append(
            f"default DataLoader (num_workers=0, batch_size={base.settings.batch_size}): "
            f"{format_rate(base.samples_per_s)} samples/s, waiting for data "
            f"{base.figures.wait_fraction:.0%} of the time{_busy(base.figures)}"
        )
        speedup = result.speedup_text()
        if speedup is not None:
            lines.append(f"speedup over the default: {speedup}")
    if result.is_default:
        lines.append(result.default_text())
    if result.ddp is not None:
        lines += result.ddp.describe()
    else:
        lines += result.batch_notes()
    return lines + _time_lines(result)


def _time_lines(result: SearchResult) -> list[str]:
    """How long the search took, by stage, and the budget it was planned in."""
    lines = []
    if result.search_time is not None:
        lines.append(f"search time: {result.search_time.describe()}")
    if result.budget is not None:
        lines.append(result.budget.describe())
    return lines


def diagnosis_lines(diagnoses: Sequence[Diagnosis]) -> list[str]:
    """Why each config waits (or does not), with the figures behind it."""
    lines = []
    for diagnosis in diagnoses:
        lines.append(f"diagnosis of the {diagnosis.headline()}")
        lines.extend(f"  {line}" for line in diagnosis.evidence)
        lines.extend(f"  -> {line}" for line in diagnosis.advice)
    return lines


def code_lines(result: SearchResult) -> list[str]:
    """The tuned loader as code."""
    return result.to_code().rstrip("\n").splitlines()


def trials_table(records: Sequence[TrialRecord]) -> list[str]:
    """One row per trial: its config, state and figures."""
    header = (
        f"{'#':>4} {'state':<8} {'role':<8} {'wrk':>3} {'pf':>2} {'pers':>4} {'pin':>3} "
        f"{'batch':>5} {'amp':>4} {'echo':>4} {'thr':>3} {'samples/s':>10} {'wait':>5} "
        f"{'start s':>7} {'MiB':>6} {'win':>3}  note"
    )
    rows = [header]
    for r in records:
        s = r.settings
        f = r.figures
        note = r.note
        if s is None:
            cells = f"{'-':>3} {'-':>2} {'-':>4} {'-':>3} {'-':>5} {'-':>4} {'-':>4} {'-':>3}"
        else:
            cells = (
                f"{s.num_workers:>3} {s.prefetch_factor or '-':>2} "
                f"{'yes' if s.persistent_workers else 'no':>4} "
                f"{'yes' if s.pin_memory else 'no':>3} {s.batch_size:>5} {s.amp:>4} "
                f"{s.echo:>4} {s.threads if s.threads is not None else '-':>3}"
            )
        wait = f"{f.wait_fraction:.0%}" if f and f.windows else "-"
        start = f"{f.startup_s:.2f}" if f and f.startup_s is not None else "-"
        rows.append(
            f"{r.number:>4} {r.state:<8} {r.role:<8} {cells} {format_rate(r.value):>10} "
            f"{wait:>5} {start:>7} {_mib(f.peak_memory_bytes if f else None):>6} "
            f"{len(f.windows) if f else 0:>3}  {note}"
        )
    return rows


def start_lines(starts: Sequence[Mapping[str, Any]]) -> list[str]:
    """Where the study's searches started, one line each, oldest first: those that started
    from an earlier answer or another study's finalists (the study's ``STARTS``)."""
    return [f"started {s.get('at', '?')}: {s.get('note', '')}" for s in starts]


def counts_line(records: Sequence[TrialRecord]) -> str:
    """How many trials ended how."""
    counts = Counter(r.state.lower() for r in records)
    parts = [f"{n} {state}" for state, n in sorted(counts.items())]
    return f"{len(records)} trials: " + ", ".join(parts)


def show_json(
    result: SearchResult | None, diagnoses: Sequence[Diagnosis], error: str | None
) -> dict[str, Any]:
    """What ``autotune show --json`` prints, for scripts: the chosen settings, the
    confirmed figures with their intervals, the default's figures, the search's time by
    stage, and the diagnosis."""
    if result is None:
        return {"result": None, "error": error}
    baseline = result.baseline
    interval = result.interval
    speedup_interval = result.speedup_interval
    return {
        "result": {
            "settings": result.settings.to_dict(),
            "dataloader": result.settings.dataloader_kwargs(),
            "device": result.device,
            "confirmed": result.confirmed,
            "caveat": result.caveat,
            "rounds": result.rounds,
            "noise": result.noise,
            "samples_per_s": result.samples_per_s,
            "interval": list(interval) if interval else None,
            "is_default": result.is_default,
            "at_ceiling": result.at_ceiling,
            "default": (
                {
                    "settings": baseline.settings.to_dict(),
                    "samples_per_s": baseline.samples_per_s,
                    "wait_fraction": baseline.figures.wait_fraction,
                    "device_busy_fraction": baseline.figures.device_busy_fraction,
                }
                if baseline is not None
                else None
            ),
            "speedup": result.speedup,
            "speedup_interval": list(speedup_interval) if speedup_interval else None,
            "gradient_accumulation_steps": result.gradient_accumulation_steps,
            "lr_note": result.lr_note(),
            "search_time": result.search_time.to_dict() if result.search_time else None,
            "budget": result.budget.to_dict() if result.budget is not None else None,
        },
        "diagnosis": [_diagnosis_json(d) for d in diagnoses],
        "error": None,
    }


def _diagnosis_json(diagnosis: Diagnosis) -> dict[str, Any]:
    return {
        "subject": diagnosis.subject,
        "verdict": diagnosis.verdict,
        "samples_per_s": diagnosis.samples_per_s,
        "wait_share": diagnosis.wait_share,
        "copy_share": diagnosis.copy_share,
        "device_busy_share": diagnosis.device_busy_share,
        "compute_ceiling": diagnosis.compute_ceiling,
        "data_ceiling": diagnosis.data_ceiling,
        "loader_limit": diagnosis.loader_limit,
        "limit_workers": diagnosis.limit_workers,
        "of_ceiling": diagnosis.of_ceiling,
        "evidence": list(diagnosis.evidence),
        "advice": list(diagnosis.advice),
    }
