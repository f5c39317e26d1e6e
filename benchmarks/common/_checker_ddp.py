"""The plain-loop checker for a config that trains on several DDP ranks.

A config whose ``search`` names ``ranks`` > 1 trains, as its user launches it with
``torchrun --nproc-per-node=RANKS``, as that many processes on this machine: each with
its own process group rank (gloo), ``DistributedSampler``, loader with the settings
under test, model wrapped in ``DistributedDataParallel`` and, on the simulated
accelerator, its own device. Their loaders share the machine's CPUs, pinned to none.

Ranks of DDP must take the same number of steps, so the span is counted in steps that
the ranks agree on: each warms up until every rank has trained ``plan.warmup`` seconds
and past the batches its workers queued, the step count of the timed part is aimed at
``plan.seconds`` from the slowest rank's warm-up pace, and the timed part runs from a
barrier to a barrier, each after the device's synchronize. The figure is every rank's
samples over that span; the device's utilisation is the ranks' mean.

Like the checker, this imports nothing of the probe, the search or the decision.
"""

from __future__ import annotations

import gc
import json
import math
import multiprocessing
import queue
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

from autotune.settings._settings import Settings
from autotune.workload._workload import load_config
from benchmarks.common._checker import (
    Plan,
    _epochs,
    batch_samples,
    config_ranks,
    make_train_step,
    synchronize,
    to_device,
)
from benchmarks.simdevice import BusyWatch

RANK_LIMIT_S = 600.0
"""How long the launcher waits for a rank's answer before it gives up."""
ERROR_GRACE_S = 3.0
"""How long after a rank's error the launcher waits for the other ranks' errors."""


def run_ranks(plan: Plan, ranks: int) -> dict[str, Any]:
    """Train ``plan`` on ``ranks`` forked processes; returns the checker's answer
    (``samples_per_s`` of every rank together, and ``device``: the ranks' mean reading
    on a simulated accelerator, else None).

    Raises:
        RuntimeError: a rank failed, died or sent no answer.
    """
    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    with tempfile.TemporaryDirectory(prefix="autotune-checker-ddp-") as folder:
        store = str(Path(folder) / "store")
        processes = [
            context.Process(target=_rank_main, args=(plan, rank, ranks, store, answers))
            for rank in range(ranks)
        ]
        for process in processes:
            process.start()
        found = _collect(answers, processes)
        for process in processes:
            process.join(timeout=30)
    seconds = max(a["seconds"] for a in found)
    readings = [a["device"] for a in found if a["device"]]
    device = None
    if readings:
        device = {
            key: sum(r[key] for r in readings) / len(readings)
            for key in ("busy_s", "wall_s", "utilisation")
        }
        device["ceiling"] = sum(r["ceiling"] for r in readings)  # every rank's device
    return {"samples_per_s": sum(a["samples"] for a in found) / seconds, "device": device}


def _collect(answers: Any, processes: list[Any]) -> list[dict[str, Any]]:
    """Every rank's answer; raises RuntimeError at the first rank that failed or died
    without one (its peers would wait for it in a collective), or when none came in
    :data:`RANK_LIMIT_S`."""
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + RANK_LIMIT_S
    while len(found) < len(processes):
        try:
            answer = answers.get(timeout=1.0)
        except queue.Empty:
            answer = None
        if answer is not None:
            if "error" in answer:  # its peers wait for it, or fail after it
                raise RuntimeError(f"a rank failed: {_errors(answer, answers)}")
            found.append(answer)
            continue
        dead = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
        if dead or time.monotonic() > deadline:
            why = f"exited with {dead[0]}" if dead else f"sent nothing in {RANK_LIMIT_S:g} s"
            raise RuntimeError(f"a rank {why} before it answered")
    return found


def _errors(first: dict[str, Any], answers: Any) -> str:
    """The first rank's error and those of the ranks that answer within
    :data:`ERROR_GRACE_S` after it (a rank that fails first may fail because its peer
    did: both are said)."""
    errors = [first["error"]]
    deadline = time.monotonic() + ERROR_GRACE_S
    while (left := deadline - time.monotonic()) > 0:
        try:
            answer = answers.get(timeout=left)
        except queue.Empty:
            break
        if "error" in answer:
            errors.append(answer["error"])
    return "; ".join(sorted(errors))


def _rank_main(plan: Plan, rank: int, ranks: int, store: str, answers: Any) -> None:
    answers.put(_answer(plan, rank, ranks, store))
    # The process group is destroyed last, once nothing else holds it: a DDP model freed
    # after it would destroy it from the model's reducer, holding the GIL while it joins
    # gloo's threads, which may be waiting for the GIL (a deadlock).
    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()


def _answer(plan: Plan, rank: int, ranks: int, store_path: str) -> dict[str, Any]:
    """This rank's answer, or its error; everything it trained with is freed on return."""
    try:
        store = dist.FileStore(store_path, ranks)  # type: ignore[attr-defined]
        dist.init_process_group("gloo", store=store, rank=rank, world_size=ranks)
        return _train_rank(plan, rank, ranks)
    except Exception as error:
        return {"error": f"rank {rank}: {type(error).__name__}: {error}"}


def _agree(value: float, op: Any) -> float:
    tensor = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(tensor, op=op)
    return float(tensor.item())


def _train_rank(plan: Plan, rank: int, ranks: int) -> dict[str, Any]:
    workload = load_config(plan.config).workload
    settings = Settings.from_dict(plan.settings)
    torch.manual_seed(plan.seed)
    if settings.threads is not None:
        torch.set_num_threads(settings.threads)
    device = torch.device("cpu")
    model = DistributedDataParallel(workload.make_model())
    train = make_train_step(workload, model, device, settings.amp)
    dataset = workload.make_dataset()
    sampler: DistributedSampler[Any] = DistributedSampler(
        dataset, num_replicas=ranks, rank=rank, seed=plan.seed
    )
    overrides: dict[str, Any] = {"sampler": sampler}
    if workload.collate_fn:
        overrides["collate_fn"] = workload.collate_fn
    batches = _epochs(settings.loader(dataset, **overrides))
    queued = settings.batches_ahead * settings.echo

    def step() -> int:
        batch = next(batches)
        train(to_device(batch, device, False))
        return batch_samples(batch) or settings.batch_size

    step()  # start-up: not warm-up
    began, steps, rounds = time.perf_counter(), 0, 1
    while True:  # rounds that double, the same on every rank
        for _ in range(rounds):
            step()
        steps += rounds
        warmed = time.perf_counter() - began >= plan.warmup and steps > queued
        if _agree(1.0 if warmed else 0.0, dist.ReduceOp.MIN) > 0:
            break
        rounds *= 2
    pace = steps / max(time.perf_counter() - began, 1e-9)
    count = plan.steps or max(1, math.ceil(plan.seconds * _agree(pace, dist.ReduceOp.MIN)))
    watch = BusyWatch()
    synchronize(device)
    dist.barrier()
    watch.start()
    start = time.perf_counter()
    samples = sum(step() for _ in range(count))
    synchronize(device)
    dist.barrier()
    seconds = time.perf_counter() - start
    reading = watch.stop(settings.batch_size, settings.amp != "off")
    batches.close()
    return {
        "samples": samples,
        "seconds": seconds,
        "device": reading.to_dict() if reading else None,
    }


def _child_main(argv: list[str]) -> int:
    """``python -m benchmarks.common._checker_ddp PLAN_JSON ANSWER_PATH``: one measurement on
    the ranks its config's ``search`` names."""
    plan = Plan(**json.loads(argv[0]))
    Path(argv[1]).write_text(json.dumps(run_ranks(plan, config_ranks(plan.config))))
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
