"""The probe process: one short real training run of one config.

It runs in a fresh process (its own session, so Ctrl-C reaches only the
search, and the search can kill the probe with all its DataLoader workers),
builds the workload, and streams figures back per window:

    ("ready", {"startup_s": ...})      the first batch arrived
    ("window", Window)                 one window of steps measured
    ("info", {...})                    what a check probe learned
    ("done", None)                     finished normally
    ("error", Failure)                 failed, with the reason

A watchdog thread listens to the search: "stop" ends the run at the next
window edge; the search's end of the pipe closing means the search died, and
the probe kills its whole process group rather than run on as an orphan.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import pickle
import random
import resource
import signal
import threading
import time
import warnings
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import torch
from torch import nn

from autotune._loader import build_loader, is_iterable_dataset
from autotune._probe._failure import ReportedFailure, classify
from autotune._probe._protocol import ProbeRequest, Window, WorkloadSource
from autotune._probe._train import (
    ContractError,
    PieceError,
    Trainer,
    batch_bytes,
    batch_length,
    blame,
    describe_batch,
    synchronize,
    to_device,
)
from autotune._settings import Settings
from autotune._workload import Workload, load_config

Send = Callable[[tuple[str, Any]], None]
_HELD_BATCHES = (2, 8)
"""Batches a compute probe holds in memory and trains on in turn: at least, at most."""
_HOLDING_SECONDS = 0.5
"""Past this much loading, a compute probe holds what it has (at least the minimum):
a slow dataset would otherwise cost more to sample than the model costs to measure."""


def child_main(request: ProbeRequest, events: Connection, control: Connection) -> None:
    """Entry point of the probe process."""
    os.setsid()
    # A probe or worker that crashes must not leave a core file (maybe gigabytes) behind.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for key, value in request.env:
        os.environ[key] = value
    if request.cpus:
        os.sched_setaffinity(0, request.cpus)
    if request.worker_start_method is not None:
        multiprocessing.set_start_method(request.worker_start_method, force=True)
    stop = threading.Event()
    threading.Thread(target=_watchdog, args=(control, stop), daemon=True).start()
    # The search chose these worker counts by measuring them.
    warnings.filterwarnings("ignore", message=".*worker processes in total.*")
    try:
        _run(request, events.send, stop)
        events.send(("done", None))
    except ReportedFailure as error:
        events.send(("error", error.failure))
    except PieceError as error:
        events.send(("error", classify(error.error, error.piece)))
    except BaseException as error:  # report anything, then end: this process is disposable
        events.send(("error", classify(error, None)))
    finally:
        events.close()


def _watchdog(control: Connection, stop: threading.Event) -> None:
    try:
        while True:
            if control.recv() == "stop":
                stop.set()
    except (EOFError, OSError):
        if not stop.is_set():
            # The search is gone; nobody will read these figures.
            os.killpg(os.getpgrp(), signal.SIGKILL)


def materialize(source: WorkloadSource) -> Workload:
    """The workload, from its config file or its pickled form."""
    if source.config_path is not None:
        return load_config(source.config_path).workload
    assert source.pickled is not None
    workload: Workload = pickle.loads(source.pickled)
    return workload


class BatchStream:
    """Batches from a loader across epochs: a new epoch starts when one ends."""

    def __init__(self, loader: Any, piece: str) -> None:
        self.loader = loader
        self.piece = piece
        self.iterator: Any = None
        self.epochs = 0

    def next(self) -> Any:
        with blame(self.piece):
            if self.iterator is None:
                self.iterator = iter(self.loader)
            try:
                return next(self.iterator)
            except StopIteration:
                self.epochs += 1
                self.iterator = iter(self.loader)
                try:
                    return next(self.iterator)
                except StopIteration:
                    raise ContractError("the dataset yielded no batches") from None

    def close(self) -> None:
        """End the epoch under way: a non-persistent loader's workers exit now."""
        self.iterator = None


def _seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _run(request: ProbeRequest, send: Send, stop: threading.Event) -> None:
    if request.mode == "ddp":
        from autotune._probe._ddp import run_ranks

        run_ranks(request, send, stop)
        return
    settings = request.settings
    _seed(request.seed)
    apply_threads(settings.threads, request.cpus)
    send(("info", placement()))
    workload = materialize(request.source)
    device = torch.device(request.device)
    dataset = _make_dataset(workload)
    data_piece = (
        "loading a batch (dataset or collate_fn)"
        if workload.collate_fn
        else ("loading a batch (dataset)")
    )
    overrides: dict[str, Any] = {}
    if workload.collate_fn is not None:
        overrides["collate_fn"] = workload.collate_fn
    # Echo is applied by the measuring loop, so that it can count fresh samples.
    loading = _without_echo(settings)
    if request.mode == "compute":
        # The loader only fills the batches held in memory; its workers must be gone
        # (not prefetching) before the model is measured.
        loading = dataclasses.replace(loading, persistent_workers=False)
    loader = build_loader(dataset, loading, seed=request.seed, **overrides)
    stream = BatchStream(loader, data_piece)
    non_blocking = settings.pin_memory and device.type == "cuda"

    if request.mode == "data":
        _measure(
            request,
            send,
            stop,
            fetch=lambda: to_device(stream.next(), device, non_blocking),
            work=lambda batch: None,
            echo=1,
        )
        return

    trainer = Trainer(workload, _make_model(workload, device), device, settings.amp)
    if request.mode == "check":
        _check(workload, dataset, trainer, stream, device, send)
        return
    if request.mode == "compute":
        held = hold_batches(lambda: to_device(stream.next(), device, False))
        stream.close()
        cycle = iter(_forever(held))
        _measure(request, send, stop, fetch=lambda: next(cycle), work=trainer.step, echo=1)
        return
    _measure(
        request,
        send,
        stop,
        fetch=lambda: to_device(stream.next(), device, non_blocking),
        work=trainer.step,
        echo=settings.echo,
    )


def hold_batches(
    fetch: Callable[[], Any], clock: Callable[[], float] = time.perf_counter
) -> list[Any]:
    """Batches for a compute probe, as many as :data:`_HELD_BATCHES` and
    :data:`_HOLDING_SECONDS` allow."""
    fewest, most = _HELD_BATCHES
    began = clock()
    held = [fetch()]
    while len(held) < most and (len(held) < fewest or clock() - began < _HOLDING_SECONDS):
        held.append(fetch())
    return held


def _forever(items: list[Any]) -> Any:
    while True:
        yield from items


def _without_echo(settings: Settings) -> Settings:
    return dataclasses.replace(settings, echo=1)


def _make_dataset(workload: Workload) -> Any:
    with blame("dataset()"):
        dataset = workload.make_dataset()
    from torch.utils.data import Dataset, IterableDataset

    map_style = hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")
    if not isinstance(dataset, Dataset | IterableDataset) and not map_style:
        raise PieceError(
            "dataset()",
            ContractError(
                f"dataset() returned {type(dataset).__name__}; expected a "
                "torch.utils.data.Dataset (or an object with __getitem__ and __len__)"
            ),
        )
    return dataset


def _make_model(workload: Workload, device: torch.device) -> nn.Module:
    with blame("model()"):
        model = workload.make_model()
        if not isinstance(model, nn.Module):
            raise ContractError(
                f"model() returned {type(model).__name__}; expected a torch.nn.Module"
            )
        model = model.to(device)
        model.train()
    return model


def _check(
    workload: Workload,
    dataset: Any,
    trainer: Trainer,
    stream: BatchStream,
    device: torch.device,
    send: Send,
) -> None:
    start = time.perf_counter()
    batch = stream.next()
    loaded = time.perf_counter()
    trainer.step(to_device(batch, device, False))
    synchronize(device)
    stepped = time.perf_counter()
    length: int | None = None
    if not is_iterable_dataset(dataset):
        try:
            length = len(dataset)
        except TypeError:
            length = None
    send(
        (
            "info",
            {
                "dataset_type": type(dataset).__name__,
                "dataset_length": length,
                "iterable": is_iterable_dataset(dataset),
                "model_type": type(trainer.model).__name__,
                "parameters": sum(p.numel() for p in trainer.model.parameters()),
                "batch": describe_batch(batch),
                "batch_bytes": batch_bytes(batch),
                "batch_samples": batch_length(batch),
                "first_batch_s": loaded - start,
                "first_step_s": stepped - loaded,
                "buffers": sum(b.numel() for b in trainer.model.buffers()),
                "gradient_bytes": sum(
                    p.numel() * p.element_size()
                    for p in trainer.model.parameters()
                    if p.requires_grad
                ),
                **placement(),
            },
        )
    )


def apply_threads(threads: int | None, cpus: tuple[int, ...] | None) -> None:
    """torch's intra-op threads: the config's, else one per CPU of the process's share
    (what a fresh process pinned to those CPUs, or started by torchrun with
    OMP_NUM_THREADS set to its share, would use)."""
    if threads is not None:
        torch.set_num_threads(threads)
    elif cpus:
        torch.set_num_threads(len(cpus))


def placement() -> dict[str, Any]:
    """Where this process runs: its CPU affinity, torch's threads, its visible GPUs."""
    return {
        "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch_threads": torch.get_num_threads(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def _measure(
    request: ProbeRequest,
    send: Send,
    stop: threading.Event,
    *,
    fetch: Callable[[], Any],
    work: Callable[[Any], None],
    echo: int,
) -> None:
    """Start-up, warm-up, then windows of steps, each sent as soon as it ends.

    A stop (the pruner's verdict on the last window) is obeyed at the next step:
    the window under way is abandoned rather than measured for nothing.
    """
    device = torch.device(request.device)
    default_n = request.settings.batch_size
    clock = time.perf_counter
    start = clock()
    batch = fetch()
    send(("ready", {"startup_s": clock() - start}))

    warm_until = clock() + request.warmup_seconds
    while True:
        for _ in range(echo):
            work(batch)
        if clock() >= warm_until or stop.is_set():
            break
        batch = fetch()
    synchronize(device)

    for index in range(request.max_windows):
        if stop.is_set():
            return
        began = clock()
        wait = 0.0
        samples = fresh = steps = 0
        while True:
            fetched = clock()
            batch = fetch()
            wait += clock() - fetched
            n = batch_length(batch) or default_n
            for _ in range(echo):
                work(batch)
                samples += n
                steps += 1
            fresh += n
            if stop.is_set():
                return
            if clock() - began >= request.window_seconds:
                break
        synchronize(device)
        seconds = clock() - began
        send(
            (
                "window",
                Window(
                    index=index,
                    seconds=seconds,
                    samples=samples,
                    fresh=fresh,
                    steps=steps,
                    wait_seconds=wait,
                ),
            )
        )
