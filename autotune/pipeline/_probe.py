"""The probe every trial of a search starts from, and the preflight that runs it once
before any trial, so that a broken workload fails in one clear line."""

from __future__ import annotations

import dataclasses
import pickle
import time
from typing import Any

import psutil

from autotune._errors import WorkloadError
from autotune.probe import (
    Failure,
    ProbeRequest,
    WorkloadSource,
    run_probe,
    start_probe_server,
)
from autotune.settings import Settings
from autotune.workload import MEMORY_SHARE, SearchOptions, Workload


def template(workload: Workload, options: SearchOptions, device: str, ranks: int) -> ProbeRequest:
    """The probe every trial starts from: the default loader, measured as ``options`` say."""
    return ProbeRequest(
        source=_source(workload),
        settings=Settings(batch_size=workload.batch_size),
        device=device,
        window_seconds=options.window_seconds,
        max_windows=options.max_windows,
        warmup_seconds=options.warmup_seconds,
        stall_timeout=options.trial_timeout,
        # Trials run side by side, one per rank's slot: each gets its share of the RAM.
        memory_limit=options.memory_limit or _default_memory_limit() // ranks,
        seed=options.seed or 0,
    )


def preflight(request: ProbeRequest, workload: Workload) -> tuple[dict[str, Any], float]:
    """Build the dataset and model and run one step, so a broken workload fails in
    one clear line before any trial; returns what was learned of the workload, and the
    probe's wall seconds: about what any probe costs before its first window, since the
    fork server probes start from is started first, its one-off import not in them."""
    start_probe_server()
    started = time.monotonic()
    result = run_probe(dataclasses.replace(request, mode="check"))
    if result.failure is not None:
        raise WorkloadError(workload_message(workload, result.failure, every_config=False))
    return result.info, time.monotonic() - started


def workload_message(workload: Workload, failure: Failure, *, every_config: bool) -> str:
    """The one line that says how the user's workload failed in a probe, and what to do
    where the failure says."""
    where = workload.origin()
    piece = ""
    if failure.piece and not failure.message.startswith(failure.piece):
        piece = f"{failure.piece}: "
    hint = ""
    if failure.piece == "model(batch)" and workload.step is None:
        hint = " (if the model takes several inputs, define step(model, batch) in the config)"
    lead = "every config failed the same way: " if every_config else ""
    return f"{where}: {lead}{piece}{failure.message}{hint}"


def _source(workload: Workload) -> WorkloadSource:
    if workload.config_path is not None:
        return WorkloadSource(config_path=workload.config_path)
    return WorkloadSource(pickled=pickle.dumps(workload))


def _default_memory_limit() -> int:
    return int(psutil.virtual_memory().available * MEMORY_SHARE)
