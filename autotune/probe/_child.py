"""The probe process: one short real training run of one config.

It runs in a new process (its own session, so Ctrl-C reaches only the
search, and the search can kill the probe with all its DataLoader workers),
builds the workload, and streams figures back per window:

    ("ready", {"startup_s": ...})      the first batch arrived
    ("window", Window)                 one window of steps measured
    ("info", {...})                    what a check probe learned
    ("workers", [pid, ...])            the probe's children not named before, once an
                                       epoch has started the loader's workers
    ("alive", None)                    still stepping (at most once a second, so that a
                                       long warm-up is not taken for a hang)
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
import resource
import signal
import threading
import time
import warnings
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch

from autotune.probe._build import (
    BatchStream,
    EpochLoader,
    apply_threads,
    loading_piece,
    make_dataset,
    make_model,
    materialize,
    placement,
    rank_sampler,
    sampler_counts,
    seed,
    workers_sender,
)
from autotune.probe._ddp import run_ranks
from autotune.probe._failure import ReportedFailure, classify_raised
from autotune.probe._measure import Heartbeat, Send, SoloPace, Steps, beat_seconds, measure
from autotune.probe._protocol import ProbeRequest
from autotune.probe._steady import steady_share
from autotune.probe._timing import copy_timer, synchronize
from autotune.probe._train import (
    Trainer,
    batch_bytes,
    describe_batch,
    to_device,
)
from autotune.probe._turns import Turn, TurnSetup, measure_turns
from autotune.settings import build_loader, fix_allocator, is_iterable_dataset
from autotune.workload import Workload

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
    except BaseException as error:  # report anything, then end: this process is disposable
        events.send(("error", classify_raised(error)))
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


def _run(request: ProbeRequest, send: Send, stop: threading.Event) -> None:
    """The request's run: DDP ranks, configs in turns, or one config alone."""
    # The whole probe, its ranks and workers, under the allocator rule of the tuned loader.
    fix_allocator()
    if request.mode == "ddp":
        run_ranks(request, send, stop)
    elif request.turns:
        _run_turns(request, send, stop)
    else:
        _run_alone(request, send, stop)


def _run_alone(request: ProbeRequest, send: Send, stop: threading.Event) -> None:
    """One config in the request's mode: its loader alone ("data"), the model on batches
    held in memory ("compute"), what a check learns ("check"), or training."""
    settings = request.settings
    seed(request.seed)
    apply_threads(settings.threads, request.cpus)
    send(("info", placement()))
    workload = materialize(request.source)
    device = torch.device(request.device)
    dataset = make_dataset(workload)
    stream = _stream(request, workload, dataset, send)
    pace = _solo_pace(request, send, stop)

    def run(
        next_batch: Callable[[], tuple[Any, int]],
        copy: Callable[[Any], Any],
        work: Callable[[Any], None],
        echo: int,
    ) -> None:
        steps = Steps(
            next_batch=next_batch,
            copy=copy,
            work=work,
            echo=echo,
            timer=copy_timer(device),
            beat=Heartbeat(send, beat_seconds(request.stall_timeout)),
        )
        measure(pace, steps, max_windows=request.max_windows, device=device)

    to_this_device = _copier(device, settings.pin_memory and device.type == "cuda")
    if request.mode == "data":
        run(stream.next, to_this_device, lambda batch: None, 1)
        return
    trainer = Trainer(workload, make_model(workload, device), device, settings.amp)
    if request.mode == "check":
        _check(workload, dataset, trainer, stream, device, send)
        return
    if request.mode == "compute":
        held = hold_batches(lambda: _moved(stream.next(), device))
        stream.close()
        cycle = iter(_forever(held))
        # The held batches are on the device already: nothing to copy.
        run(lambda: next(cycle), lambda batch: batch, trainer.step, 1)
        return
    run(stream.next, to_this_device, trainer.step, settings.echo)


def _solo_pace(request: ProbeRequest, send: Send, stop: threading.Event) -> SoloPace:
    """The pace of a probe alone: the request's warm-up and window lengths, its steady
    rule, and its loader's bursts (none in compute mode, which trains on held batches)."""
    settings = request.settings
    compute = request.mode == "compute"
    return SoloPace(
        warmup_seconds=request.warmup_seconds,
        window_seconds=request.window_seconds,
        send=send,
        stop=stop,
        queued=0 if compute else settings.batches_ahead,
        turn=1 if compute else max(settings.num_workers, 1),
        steady=steady_share(request),
    )


def _run_turns(request: ProbeRequest, send: Send, stop: threading.Event) -> None:
    """Measure the request's configs in turns (:mod:`autotune.probe._turns`): one model,
    optimizer and dataset for all, a loader each (for the compute mode, batches held in
    memory for each batch size)."""
    seed(request.seed)
    apply_threads(None, request.cpus)
    default_threads = torch.get_num_threads()
    send(("info", placement()))
    workload = materialize(request.source)
    device = torch.device(request.device)
    dataset = make_dataset(workload)
    trainer = (
        None
        if request.mode == "data"
        else Trainer(workload, make_model(workload, device), device, request.turns[0].amp)
    )
    beat = Heartbeat(send, beat_seconds(request.stall_timeout))
    held: dict[int, list[Any]] = {}
    turns = []
    for index, settings in enumerate(request.turns):
        one = dataclasses.replace(request, settings=settings, turns=())
        if request.mode == "compute":
            assert trainer is not None
            turns.append(_compute_turn(index, one, workload, dataset, trainer, held, beat))
            continue
        stream = _stream(one, workload, dataset, send)
        non_blocking = settings.pin_memory and device.type == "cuda"
        steps = Steps(
            next_batch=stream.next,
            copy=_copier(device, non_blocking),
            work=trainer.step if trainer is not None else lambda batch: None,
            echo=settings.echo if trainer is not None else 1,
            timer=copy_timer(device),
            beat=beat,
        )
        turns.append(
            Turn(
                index=index,
                settings=settings,
                steps=steps,
                queued=settings.batches_ahead,
                turn=max(settings.num_workers, 1),
                close=stream.close,
            )
        )
    setup = TurnSetup(
        window_seconds=request.window_seconds,
        warmup_seconds=request.warmup_seconds,
        trainer=trainer,
        default_threads=default_threads,
        device=device,
        send=send,
        stop=stop,
    )
    measure_turns(turns, setup, passes=request.max_windows)


def _copier(device: torch.device, non_blocking: bool) -> Callable[[Any], Any]:
    """A batch moved to ``device`` (without blocking, where it is pinned for CUDA)."""

    def copy(batch: Any) -> Any:
        return to_device(batch, device, non_blocking)

    return copy


def _compute_turn(
    index: int,
    request: ProbeRequest,
    workload: Workload,
    dataset: Any,
    trainer: Trainer,
    held: dict[int, list[Any]],
    beat: Heartbeat,
) -> Turn:
    """A compute ceiling's turn: the model on batches held in memory, those of its batch
    size shared with the other configs of that size (held once, in ``held``)."""
    device = torch.device(request.device)
    size = request.settings.batch_size
    if size not in held:
        stream = _stream(request, workload, dataset, lambda event: None)
        held[size] = hold_batches(lambda: _moved(stream.next(), device))
        stream.close()
    cycle = iter(_forever(held[size]))
    steps = Steps(
        next_batch=lambda: next(cycle),
        copy=lambda batch: batch,  # on the device already
        work=trainer.step,
        echo=1,
        timer=copy_timer(device),
        beat=beat,
    )
    return Turn(index=index, settings=request.settings, steps=steps, queued=0, turn=1)


def _stream(request: ProbeRequest, workload: Workload, dataset: Any, send: Send) -> BatchStream:
    """The config's batches, without echo: the measuring loop echoes, so that it can
    count fresh samples. Its workers' pids go to the search with ``send``."""
    overrides: dict[str, Any] = {}
    if workload.collate_fn is not None:
        overrides["collate_fn"] = workload.collate_fn
    loading = dataclasses.replace(request.settings, echo=1)
    if request.mode == "compute":
        # The loader only fills the batches held in memory; its workers must be gone
        # (not prefetching) before the model is measured.
        loading = dataclasses.replace(loading, persistent_workers=False)
    # One rank of several loads its part of each epoch, as under DDP: a worker start per
    # epoch then costs as much per sample as it will there.
    sampler = rank_sampler(dataset, request.shard, request.seed)
    if sampler is not None:
        overrides["sampler"] = sampler
    loader = build_loader(
        dataset,
        loading.dataloader_kwargs(),
        seed=request.seed,
        worker_threads=loading.worker_threads,
        **overrides,
    )
    return BatchStream(
        EpochLoader(loader, sampler),
        loading_piece(workload),
        counts=sampler_counts(loader),
        default_n=loading.batch_size,
        on_workers=workers_sender(send) if loading.num_workers else None,
    )


def _moved(counted: tuple[Any, int], device: torch.device) -> tuple[Any, int]:
    """A batch and its samples, the batch moved to ``device``."""
    batch, samples = counted
    return to_device(batch, device, False), samples


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


_STEP_SECONDS = 0.2
"""How long the check times steps after the first, to read the step's CPU share."""


def _step_cpu(trainer: Trainer, batch: Any, device: torch.device) -> tuple[float, float]:
    """Seconds per step after the first, and the training thread's CPU time over that
    wall time (1.0: one core busy throughout), on one batch over again, on one thread.

    A step whose compute runs on an accelerator keeps the host's cores mostly idle; one
    on the CPU keeps at least one busy. Steps are timed for ``_STEP_SECONDS`` (long
    enough that a preemption does not decide it), at least one, so a slow model pays one
    step more.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # idle threads of a pool spin: they would read as compute
    try:
        steps = 0
        wall_start, (cpu_start, queued_start) = time.perf_counter(), _thread_times()
        while steps == 0 or time.perf_counter() - wall_start < _STEP_SECONDS:
            trainer.step(batch)
            steps += 1
        synchronize(device)
        wall = time.perf_counter() - wall_start
        cpu_end, queued_end = _thread_times()
    finally:
        torch.set_num_threads(threads)
    # Time spent ready but waiting for a core (a loaded machine) is neither compute nor
    # waiting for a device: left out, so the share reads alike beside other processes.
    offered = wall - (queued_end - queued_start)
    return wall / steps, (cpu_end - cpu_start) / offered if offered > 0 else 1.0


_SCHEDSTAT = Path("/proc/thread-self/schedstat")


def _thread_times() -> tuple[float, float]:
    """This thread's CPU seconds, and its seconds ready to run but waiting for a core
    (Linux's schedstat; elsewhere, the process's CPU time and no wait)."""
    try:
        cpu_ns, queued_ns, _ = _SCHEDSTAT.read_text().split()
        return int(cpu_ns) / 1e9, int(queued_ns) / 1e9
    except (OSError, ValueError):
        return time.process_time(), 0.0


def _check(
    workload: Workload,
    dataset: Any,
    trainer: Trainer,
    stream: BatchStream,
    device: torch.device,
    send: Send,
) -> None:
    start = time.perf_counter()
    batch, samples = stream.next()
    loaded = time.perf_counter()
    on_device = to_device(batch, device, False)
    trainer.step(on_device)
    synchronize(device)
    stepped = time.perf_counter()
    step_s, step_cpu = _step_cpu(trainer, on_device, device)
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
                "batch_samples": samples,
                "first_batch_s": loaded - start,
                "first_step_s": stepped - loaded,
                "step_s": step_s,
                "step_cpu_share": step_cpu,
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
