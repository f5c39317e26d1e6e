"""The physical limit of a config on a simulated accelerator: the slower of the device
and the data.

The device's ceiling is the batch over its time per step
(:meth:`benchmarks.simdevice.DeviceSpec.ceiling`); the data's is what every CPU of the
machine could load if it did nothing else: the CPUs over the CPU seconds one sample
costs to load and collate, measured here in the main process of a child, one thread,
no workers, on the process's CPU clock (a wait for storage costs no CPU, so it lowers
no ceiling). No loader setting beats the lower of the two, so a config's distance to
it says what tuning has left, and the device can be busy at most
``min(1, data ceiling / device ceiling)`` of the time.

Like the checker, this imports nothing of the probe, the search or the decision.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from autotune.settings._settings import Settings
from autotune.workload._workload import load_config
from benchmarks.common._checker import STARTUP_ALLOWANCE_S, _epochs, batch_samples, run_measurement

BUSY_SHARE = 0.95
"""The share of its possible busy time the choice must keep the device busy."""
LOAD_SECONDS = 2.0
"""CPU-clock seconds of loading, or wall seconds where loading waits, that one data
ceiling measures."""
MIN_BATCHES = 5


def data_ceiling(config: str | Path, batch_size: int, *, seconds: float = LOAD_SECONDS) -> float:
    """Samples/s every CPU of this machine could load for ``config`` at ``batch_size``,
    measured in a new process (see the module docstring); ``inf`` where loading costs
    no measurable CPU.

    Raises:
        CheckerError: the measurement failed.
    """
    plan = {"config": str(Path(config).resolve()), "batch_size": batch_size, "seconds": seconds}
    answer = run_measurement(
        "benchmarks.common._device_limits",
        plan,
        limit=STARTUP_ALLOWANCE_S + 10 * seconds,
        what=f"{Path(config).name} data ceiling at batch {batch_size}",
    )
    cpu_per_sample = answer["cpu_s"] / answer["samples"]
    return answer["cpus"] / cpu_per_sample if cpu_per_sample > 0 else float("inf")


def physical_limit(device_ceiling: float, data_ceiling: float) -> float:
    """The most samples/s any loader reaches: the lower of the two ceilings."""
    return min(device_ceiling, data_ceiling)


def busy_bound(device_ceiling: float, data_ceiling: float) -> float:
    """The share of the time the device can be busy, ``min(1, data / device)``."""
    return min(1.0, data_ceiling / device_ceiling) if device_ceiling > 0 else 0.0


def load(plan: dict[str, Any]) -> dict[str, Any]:
    """In the child: load batches of the config's dataset in this process, one thread,
    for ``plan["seconds"]``; returns the samples, their CPU seconds and the CPUs."""
    torch.set_num_threads(1)
    workload = load_config(plan["config"]).workload
    overrides = {"collate_fn": workload.collate_fn} if workload.collate_fn else {}
    loader = Settings(batch_size=plan["batch_size"]).loader(workload.make_dataset(), **overrides)
    samples = 0
    began_cpu, began_wall = time.process_time(), time.perf_counter()
    for batches, batch in enumerate(_epochs(loader), start=1):
        samples += batch_samples(batch) or plan["batch_size"]
        cpu, wall = time.process_time() - began_cpu, time.perf_counter() - began_wall
        if batches >= MIN_BATCHES and (cpu >= plan["seconds"] or wall >= 5 * plan["seconds"]):
            break
    return {
        "samples": samples,
        "cpu_s": time.process_time() - began_cpu,
        "cpus": len(os.sched_getaffinity(0)),
    }


def _child_main(argv: Sequence[str]) -> int:
    """``python -m benchmarks.common._device_limits PLAN_JSON ANSWER_PATH``: one data ceiling."""
    Path(argv[1]).write_text(json.dumps(load(json.loads(argv[0]))))
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
