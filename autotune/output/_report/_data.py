"""What a report shows, gathered from a study once: trials with their times, the
chosen result, the machine and workload, and the diagnoses."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import optuna

from autotune._errors import StudyError
from autotune._format import format_rate
from autotune.decide import Diagnosis, diagnose
from autotune.output._load import result_of
from autotune.result import SearchResult
from autotune.study import StudyLocation, TrialRecord, read_meta


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrialPoint:
    """A trial and when it ran, in seconds from the study's first trial."""

    record: TrialRecord
    start_s: float | None
    end_s: float | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReportData:
    """Everything a report renders."""

    study_name: str
    path: str | None
    meta: dict[str, Any]
    trials: tuple[TrialPoint, ...]
    result: SearchResult | None
    no_result: str | None
    """Why there is no result, when there is none."""
    diagnoses: tuple[Diagnosis, ...]

    @property
    def records(self) -> list[TrialRecord]:
        return [t.record for t in self.trials]

    def counts(self) -> str:
        """ "24 trials: 9 complete, 14 pruned, 1 fail"."""
        counts = Counter(t.record.state.lower() for t in self.trials)
        parts = [f"{n} {state}" for state, n in sorted(counts.items())]
        return f"{len(self.trials)} trials: " + ", ".join(parts)

    def facts(self) -> list[tuple[str, str]]:
        """The machine, the workload and the device, and how long the search took and
        in what budget, as label and value."""
        machine = self.meta.get("machine", {})
        workload = self.meta.get("workload", {})
        facts: list[tuple[str, str]] = []
        if machine:
            memory = machine.get("memory_bytes") or 0
            gpus = ", ".join(machine.get("gpus") or []) or "none"
            facts.append(
                (
                    "machine",
                    f"{machine.get('cpus')} CPUs ({machine.get('cpu_model') or '?'}), "
                    f"{memory / 2**30:.1f} GiB RAM, GPUs: {gpus}, "
                    f"torch {machine.get('torch_version') or '?'}",
                )
            )
        if self.meta.get("device"):
            facts.append(("device", str(self.meta["device"])))
        if workload:
            length = workload.get("dataset_length")
            facts.append(
                (
                    "workload",
                    f"{workload.get('dataset_type')} ({length if length is not None else '?'} "
                    f"items) into {workload.get('model_type')} "
                    f"({workload.get('parameters', 0):,} parameters)",
                )
            )
            if workload.get("batch"):
                facts.append(("a batch", str(workload["batch"])))
        if self.result is not None and self.result.search_time is not None:
            facts.append(("search time", self.result.search_time.describe()))
        if self.result is not None and self.result.budget is not None:
            facts.append(("time budget", self.result.budget.describe()))
        return facts


def gather(study: optuna.Study, where: StudyLocation | None = None) -> ReportData:
    """Read a study for a report."""
    meta = read_meta(study)
    frozen = study.get_trials(deepcopy=False)
    starts = [t.datetime_start for t in frozen if t.datetime_start is not None]
    origin = min(starts) if starts else None
    points = []
    for trial in frozen:
        start = end = None
        if origin is not None and trial.datetime_start is not None:
            start = (trial.datetime_start - origin).total_seconds()
        if origin is not None and trial.datetime_complete is not None:
            end = (trial.datetime_complete - origin).total_seconds()
        points.append(TrialPoint(record=TrialRecord.from_trial(trial), start_s=start, end_s=end))
    result: SearchResult | None = None
    no_result: str | None = None
    try:
        result = result_of(study, where=where)
    except StudyError as error:
        no_result = str(error)
    return ReportData(
        study_name=study.study_name,
        path=str(where) if where is not None else None,
        meta=meta,
        trials=tuple(points),
        result=result,
        no_result=no_result,
        diagnoses=tuple(diagnose(result)) if result is not None else (),
    )


TRIAL_COLUMNS = (
    "#",
    "state",
    "role",
    "workers",
    "prefetch",
    "persistent",
    "pin",
    "batch",
    "amp",
    "echo",
    "threads",
    "samples/s",
    "wait",
    "start-up s",
    "MiB",
    "windows",
    "note",
)


def trial_row(record: TrialRecord) -> list[str]:
    """One trial as table cells, in :data:`TRIAL_COLUMNS` order."""
    s = record.settings
    f = record.figures
    note = record.note
    if s is None:
        knobs = ["-"] * 8
    else:
        knobs = [
            str(s.num_workers),
            str(s.prefetch_factor or "-"),
            "yes" if s.persistent_workers else "no",
            "yes" if s.pin_memory else "no",
            str(s.batch_size),
            s.amp,
            str(s.echo),
            str(s.threads) if s.threads is not None else "-",
        ]
    return [
        str(record.number),
        record.state.lower(),
        record.role,
        *knobs,
        format_rate(record.value),
        f"{f.wait_fraction:.0%}" if f and f.windows else "-",
        f"{f.startup_s:.2f}" if f and f.startup_s is not None else "-",
        f"{f.peak_memory_bytes / 2**20:,.0f}" if f and f.peak_memory_bytes else "-",
        str(len(f.windows)) if f else "0",
        note,
    ]
