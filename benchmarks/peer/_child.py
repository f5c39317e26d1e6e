"""``python -m benchmarks.peer._child CONFIG ANSWER``: loadtune's ``tune`` on one benchmark
config, with loadtune's own defaults, its answer written to ``ANSWER`` as JSON.

A process of its own, as a user runs a tuner: loadtune trials every config in its own
process (``torch.set_num_threads`` included, never set back), so run in the benchmark's
process it would leave its last trial's threads to every later measurement. The config
becomes a ``loadtune.Workload`` whose training step is the checker's: the config's
``step``, or its forward and loss (else the checker's default), then backward and the
optimizer's step.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from autotune.workload._workload import load_config
from benchmarks.common._checker import default_forward, default_loss, to_device


def _sgd(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.01, momentum=0.9)


def loadtune_workload(config: str, loadtune: ModuleType) -> Any:
    """The benchmark ``config`` as a ``loadtune.Workload``: its dataset, model, batch size
    and collate function, the checker's training step and optimizer (SGD with momentum
    where the config names none)."""
    workload = load_config(config).workload
    make_optimizer = workload.optimizer or _sgd

    def train_step(model: Any, optimizer: Any, batch: Any, device: Any) -> Any:
        batch = to_device(batch, device, non_blocking=False)  # loadtune patches .to itself
        loss: Any
        if workload.step is not None:
            loss = workload.step(model, batch)
        else:
            loss = (workload.loss or default_loss)(default_forward(model, batch), batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss

    return loadtune.Workload(
        name=workload.name,
        make_dataset=workload.make_dataset,
        make_model=workload.make_model,
        train_step=train_step,
        make_optimizer=lambda model: make_optimizer(model.parameters()),
        default_batch_size=workload.batch_size,
        collate_fn=workload.collate_fn,
    )


def _trial(trial: Any) -> dict[str, Any]:
    result = trial.result or {}
    return {
        "knobs": trial.knobs.to_dict(),
        "reason": trial.reason,
        "throughput": trial.throughput,
        "error": result.get("error"),
    }


def _baseline(profile: Any) -> dict[str, Any]:
    return {
        "knobs": dict(profile.knobs),
        "throughput": profile.throughput,
        "data_wait_frac": profile.data_wait_frac,
        "cpu_util_mean": profile.cpu_util_mean,
        "device": profile.device,
        "error": profile.error,
    }


def tune_answer(
    config: str, loadtune: ModuleType, clock: Callable[[], float] = time.perf_counter
) -> dict[str, Any]:
    """Run ``loadtune.tune`` on ``config`` with its defaults; returns its answer (JSON
    types): its baseline, trials, best trial, claimed speedup and diagnosis, the
    seconds the call took (``wall_s``), and ``error`` where it failed or raised."""
    answer: dict[str, Any] = {"version": getattr(loadtune, "__version__", None)}
    began = clock()
    try:
        result = loadtune.tune(loadtune_workload(config, loadtune))
    except Exception as error:  # loadtune's failure is a finding, not the benchmark's
        answer["wall_s"] = clock() - began
        answer["error"] = f"{type(error).__name__}: {error}"
        answer["traceback"] = traceback.format_exc(limit=5)
        return answer
    answer["wall_s"] = clock() - began
    best = result.best
    answer.update(
        baseline=_baseline(result.baseline),
        trials=[_trial(t) for t in result.trials],
        best=None
        if best is None
        else {"knobs": best.knobs.to_dict(), "throughput": best.throughput},
        speedup=result.speedup,
        diagnosis=result.diagnosis,
    )
    if result.baseline.error:
        answer["error"] = f"its baseline failed: {result.baseline.error}"
    return answer


def main(argv: list[str]) -> int:
    """Run loadtune on ``argv[0]`` and write its answer to ``argv[1]``."""
    import loadtune

    answer: Mapping[str, Any] = tune_answer(argv[0], loadtune)
    Path(argv[1]).write_text(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
