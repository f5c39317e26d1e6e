"""What rules a config out before it runs, so that no probe is spent on it:

- a batch size that ran out of the device's memory marks every larger batch size
  with the same AMP infeasible, whatever the loader; one that ran out of the host's,
  every larger one with the same other settings;
- batches in flight that cannot fit in /dev/shm would kill the loader's workers;
- a config whose compute ceiling cannot reach the best so far cannot win.

The first two are failures (the config cannot run); the last is not (it could
run, but not fast enough to matter), so the trial is pruned instead.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Iterable, Mapping
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.explore._bounds import Bounds
from autotune.explore._trials import best_record
from autotune.probe import Failure, shm_shortfall
from autotune.settings import Settings
from autotune.study import TrialRecord

SHM_DIR = "/dev/shm"
"""Where DataLoader workers hand batches over (POSIX shared memory on Linux)."""


class OutOfMemoryRule:
    """Remembers which batch sizes ran out of memory with which other settings.

    The device running out rules a batch size out with the same AMP whatever the
    loader (what a batch takes on the device does not depend on what loads it); the
    host running out, only with the same other settings (workers hold host memory of
    their own, so fewer of them may fit).
    """

    def __init__(self) -> None:
        self._smallest: dict[str, tuple[int, int]] = {}

    @classmethod
    def from_trials(cls, trials: Iterable[FrozenTrial]) -> OutOfMemoryRule:
        """The rule as the out-of-memory failures among ``trials`` (a resumed study's)
        left it."""
        rule = cls()
        for trial in trials:
            record = TrialRecord.from_trial(trial)
            if record.failure and record.failure.kind == "oom" and record.settings:
                rule.add(record.settings, record.number, failure=record.failure)
        return rule

    @staticmethod
    def _key(settings: Settings, *, device: bool) -> str:
        if device:
            return json.dumps({"device": True, "amp": settings.amp})
        return dataclasses.replace(settings, batch_size=1).key()

    def add(self, settings: Settings, number: int, *, failure: Failure) -> None:
        """Remember that trial ``number`` ran out of memory (``failure``) with ``settings``."""
        key = self._key(settings, device=failure.on_device())
        known = self._smallest.get(key)
        if known is None or settings.batch_size < known[0]:
            self._smallest[key] = (settings.batch_size, number)

    def blocks(self, settings: Settings) -> Failure | None:
        """Why ``settings`` cannot run (an equal or smaller batch ran out of the device's
        memory with the same AMP, or of the host's with the same other settings); None if
        it may."""
        for device, where, same in ((True, "device memory", "AMP"), (False, "memory", "settings")):
            known = self._smallest.get(self._key(settings, device=device))
            if known is None or settings.batch_size < known[0]:
                continue
            batch, number = known
            which = (
                f"batch {batch}"
                if settings.batch_size == batch
                else f"batch {settings.batch_size} > batch {batch}, which"
            )
            return Failure(
                kind="infeasible",
                message=(
                    f"not run: {which} ran out of {where} with the same {same} in trial #{number}"
                ),
            )
        return None


def bytes_per_sample(meta: Mapping[str, Any] | None) -> float:
    """Bytes of one sample of the workload's batches, from the study's ``autotune``
    attribute; 0.0 when the preflight did not measure them."""
    workload = (meta or {}).get("workload") or {}
    samples = workload.get("batch_samples")
    return float(workload.get("batch_bytes") or 0) / samples if samples else 0.0


def free_shm_bytes() -> int | None:
    """Bytes free in /dev/shm now; None where there is none to read."""
    try:
        return shutil.disk_usage(SHM_DIR).free
    except OSError:
        return None


def shm_blocks(settings: Settings, per_sample: float, free_bytes: int | None) -> Failure | None:
    """Why ``settings``'s batches in flight cannot fit in ``free_bytes`` of /dev/shm (its
    workers would die of a bus error, or fail to allocate, at some later batch); None
    if they fit, or nothing is known to check them against."""
    if free_bytes is None:
        return None
    return shm_shortfall(
        num_workers=settings.num_workers,
        prefetch_factor=settings.prefetch_factor,
        batch_bytes=per_sample * settings.batch_size,
        free_bytes=free_bytes,
    )


def out_of_reach(
    study: optuna.Study, settings: Settings, bounds: Bounds | None, tolerance: float
) -> str | None:
    """Why ``settings``'s compute ceiling cannot come within ``tolerance`` of the best
    explored config of ``study``; None if it might, or no bounds were measured."""
    if bounds is None:
        return None
    best = best_record(study, role="explore")
    return bounds.rules_out(settings, best.value if best else None, tolerance)
