"""Text views of a result and of a study's trials, for the terminal."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from autotune._format import format_rate
from autotune.decide._diagnosis import Diagnosis
from autotune.result._result import SearchResult
from autotune.study._study import TrialRecord


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f}"


def result_lines(result: SearchResult) -> list[str]:
    """The chosen settings and the figures behind them."""
    figures = result.figures
    lines = [f"best: {result.settings.describe()}  (device {result.device})"]
    detail = f"  {format_rate(figures.samples_per_s)} samples/s"
    if result.settings.echo > 1:
        detail += f" ({format_rate(figures.fresh_per_s)} fresh samples/s)"
    detail += f", waiting for data {figures.wait_fraction:.0%} of the time"
    if figures.startup_s is not None:
        detail += f", start-up {figures.startup_s:.2f} s"
    if figures.peak_memory_bytes:
        detail += f", peak memory {_mib(figures.peak_memory_bytes)} MiB"
    lines.append(detail)
    if result.workload.get("online"):
        lines.append("  (chosen online, from windows of the training's own steps; not re-measured)")
    elif not result.confirmed:
        lines.append("  (not re-measured: the search did not reach its confirming round)")
    if result.baseline is not None:
        base = result.baseline
        lines.append(
            f"default DataLoader (num_workers=0, batch_size={base.settings.batch_size}): "
            f"{format_rate(base.samples_per_s)} samples/s, waiting for data "
            f"{base.figures.wait_fraction:.0%} of the time"
        )
        if result.speedup is not None:
            lines.append(f"speedup over the default: {result.speedup:.2f}x")
    if result.ddp is not None:
        lines += result.ddp.describe()
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


def counts_line(records: Sequence[TrialRecord]) -> str:
    """How many trials ended how."""
    counts = Counter(r.state.lower() for r in records)
    parts = [f"{n} {state}" for state, n in sorted(counts.items())]
    return f"{len(records)} trials: " + ", ".join(parts)
