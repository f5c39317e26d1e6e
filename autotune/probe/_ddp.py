"""The DDP probe: one config trained as DistributedDataParallel by every rank of a node.

The probe process becomes a launcher, as torchrun would be: it holds the
rendezvous store (a TCPStore on a free loopback port), forks one process per
rank and relays rank 0's figures to the search. Each rank pins itself to its
CPU share, joins the process group (NCCL on GPUs, gloo on CPU), builds its own
dataset, a ``DistributedSampler`` and the config's DataLoader, wraps the model
in ``DistributedDataParallel`` with the DDP keywords under test, and trains.

Ranks of a DDP run must take the same number of steps, or one waits forever in
an all-reduce for a peer that stopped. So windows are counted in steps, agreed
by all ranks: the warm-up runs in doubling rounds until every rank has warmed
for ``warmup_seconds``, and each window's length in steps is aimed at
``window_seconds`` from the figures all ranks shared at the last window edge.
The only collectives added to training are one small all-gather per window
edge, on a gloo group (so NCCL runs need no device sync for them).

A window's figures: samples of all ranks summed, the slowest rank's seconds,
the ranks' mean time waiting for data and copying it to the device.
"""

from __future__ import annotations

import datetime
import math
import multiprocessing
import os
import threading
import time
from multiprocessing.connection import Connection, wait
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

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
from autotune.probe._failure import ReportedFailure, classify_raised, describe_exit
from autotune.probe._measure import (
    Heartbeat,
    Send,
    Steps,
    Tally,
    Warmth,
    beat_seconds,
    measure,
)
from autotune.probe._protocol import DdpSpec, Failure, ProbeRequest, Window
from autotune.probe._timing import copy_timer, synchronize
from autotune.probe._train import Trainer, to_device
from autotune.settings import build_loader

_LOOPBACK = "127.0.0.1"
_POLL_SECONDS = 0.1
_GRACE_SECONDS = 5.0


def run_ranks(request: ProbeRequest, send: Send, stop: threading.Event) -> None:
    """Launch the ranks of ``request.ddp`` and relay rank 0's figures through ``send``.

    Raises:
        ReportedFailure: a rank failed (the first failure, naming the rank) or died.
    """
    spec = _spec(request)
    timeout = datetime.timedelta(seconds=request.stall_timeout)
    store = dist.TCPStore(  # type: ignore[attr-defined]
        _LOOPBACK, 0, is_master=True, wait_for_workers=False, timeout=timeout
    )
    # Fork: the ranks share this process group, so stopping the probe stops them all.
    context = multiprocessing.get_context("fork")
    halt = context.Event()
    links: dict[Connection, int] = {}
    processes: list[Any] = []
    finished = False
    try:
        for rank in range(spec.world_size):
            reader, writer = context.Pipe(duplex=False)
            process = context.Process(
                target=_rank_main,
                args=(request, rank, store.port, writer, halt),
                name=f"autotune-rank-{rank}",
            )
            process.start()
            writer.close()
            links[reader] = rank
            processes.append(process)
        _relay(links, processes, send, stop, halt)
        finished = True
    finally:
        halt.set()
        # After a failure the other ranks wait in a collective that will never end.
        deadline = time.monotonic() + (_GRACE_SECONDS if finished else 0.0)
        for process in processes:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()


def _spec(request: ProbeRequest) -> DdpSpec:
    if request.ddp is None:
        raise ValueError("a ddp probe needs ProbeRequest.ddp")
    return request.ddp


def _relay(
    links: dict[Connection, int],
    processes: list[Any],
    send: Send,
    stop: threading.Event,
    halt: Any,
) -> None:
    """Forward rank 0's events, and every rank's workers; stop at the first failure of
    any rank."""
    open_links = dict(links)
    while open_links:
        if stop.is_set():
            halt.set()
        for link in wait(list(open_links), timeout=_POLL_SECONDS):
            assert isinstance(link, Connection)
            rank = open_links[link]
            try:
                kind, payload = link.recv()
            except (EOFError, OSError):
                processes[rank].join(timeout=_GRACE_SECONDS)
                exit_kind, message = describe_exit(processes[rank].exitcode)
                raise ReportedFailure(
                    Failure(kind=exit_kind, message=f"rank {rank}: {message}")
                ) from None
            if kind == "error":
                raise ReportedFailure(_on_rank(payload, rank))
            if kind == "done":
                del open_links[link]
            elif rank == 0 or kind == "workers":
                # Every rank's workers are the search's to clean up after.
                send((kind, payload))


def _on_rank(failure: Failure, rank: int) -> Failure:
    return Failure(
        kind=failure.kind,
        message=f"rank {rank}: {failure.message}",
        piece=failure.piece,
        traceback=failure.traceback,
    )


# --------------------------------------------------------------------- one rank
def _rank_main(request: ProbeRequest, rank: int, port: int, link: Connection, halt: Any) -> None:
    spec = _spec(request)
    place = spec.ranks[rank]
    world = spec.world_size
    os.environ.update(
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world),
            "MASTER_ADDR": _LOOPBACK,
            "MASTER_PORT": str(port),
        }
    )
    if place.cpus:
        os.sched_setaffinity(0, place.cpus)
    try:
        timeout = datetime.timedelta(seconds=request.stall_timeout)
        store = dist.TCPStore(  # type: ignore[attr-defined]
            _LOOPBACK, port, world, is_master=False, timeout=timeout
        )
        dist.init_process_group(
            spec.backend, store=store, rank=rank, world_size=world, timeout=timeout
        )
        _train(request, rank, link, halt)  # frees the DDP model: nothing outlives the group
        link.send(("done", None))
        dist.destroy_process_group()
    except BaseException as error:  # report anything; the launcher ends the other ranks
        link.send(("error", classify_raised(error)))
    finally:
        link.close()


def _train(request: ProbeRequest, rank: int, link: Connection, halt: Any) -> None:
    spec = _spec(request)
    settings = request.settings
    world = spec.world_size
    seed(request.seed)  # the same initial model on every rank, as DDP expects
    apply_threads(settings.threads, spec.ranks[rank].cpus)
    device = torch.device(spec.ranks[rank].device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    # Control messages go over gloo: no device sync for them on NCCL runs.
    control = dist.new_group(backend="gloo") if spec.backend != "gloo" else None
    placements: list[Any] = [None] * world
    dist.all_gather_object(placements, {"rank": rank, **placement()}, group=control)
    if rank == 0:
        link.send(("info", {"ranks": placements, "backend": spec.backend}))

    workload = materialize(request.source)
    dataset = make_dataset(workload)
    sampler = rank_sampler(dataset, (world, rank), request.seed)
    overrides: dict[str, Any] = {"sampler": sampler} if sampler is not None else {}
    if workload.collate_fn is not None:
        overrides["collate_fn"] = workload.collate_fn
    loader = build_loader(
        dataset, settings.dataloader_kwargs(), worker_threads=settings.worker_threads, **overrides
    )
    stream = BatchStream(
        EpochLoader(loader, sampler),
        loading_piece(workload),
        counts=sampler_counts(loader),
        default_n=settings.batch_size,
        on_workers=workers_sender(link.send) if settings.num_workers else None,
    )
    model = make_model(workload, device)
    ddp_model = DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        **dict(spec.kwargs),
    )
    trainer = Trainer(workload, ddp_model, device, settings.amp)
    non_blocking = settings.pin_memory and device.type == "cuda"
    pace = AgreedPace(request, rank, link, halt, control, device)
    steps = Steps(
        next_batch=stream.next,
        copy=lambda batch: to_device(batch, device, non_blocking),
        work=trainer.step,
        echo=settings.echo,
        timer=copy_timer(device),
        # Rank 0's events reach the search; the ranks step together.
        beat=(
            Heartbeat(link.send, beat_seconds(request.stall_timeout)) if rank == 0 else lambda: None
        ),
    )
    measure(pace, steps, max_windows=request.max_windows, device=device)


def _gather(values: list[float], group: Any) -> list[list[float]]:
    """Every rank's ``values``, in rank order."""
    mine = torch.tensor(values, dtype=torch.float64)
    rows = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(rows, mine, group=group)
    return [row.tolist() for row in rows]


class AgreedPace:
    """The pace of one DDP rank: every rank takes the same steps. The warm-up runs in
    doubling rounds until every rank has warmed for ``warmup_seconds`` and trained
    through the batches its workers queued while starting; each window's steps are
    aimed at ``window_seconds`` from the figures all ranks shared at the last window
    edge, in whole turns of a rank's workers (see :class:`SoloPace`), where the ranks add
    up their figures (rank 0 reports them) and agree to stop."""

    def __init__(
        self,
        request: ProbeRequest,
        rank: int,
        link: Connection,
        halt: Any,
        group: Any,
        device: torch.device,
    ) -> None:
        self.request = request
        self.rank = rank
        self.link = link
        self.halt = halt
        self.group = group
        self.device = device
        self.rounds = 1
        self.per_window = 1
        self.queued = request.settings.batches_ahead
        self.turn = max(request.settings.num_workers, 1)

    def ready(self, startup_s: float) -> None:
        startup = max(row[0] for row in _gather([startup_s], self.group))
        if self.rank == 0:
            self.link.send(("ready", {"startup_s": startup}))

    def warm_round(self) -> int:
        return self.rounds

    def warmed(self, steps: int, began: float) -> Warmth:
        synchronize(self.device)
        rows = _gather([time.perf_counter() - began, float(self.halt.is_set())], self.group)
        elapsed = max(row[0] for row in rows)
        if any(row[1] for row in rows):
            return Warmth.STOPPED
        if elapsed < self.request.warmup_seconds or steps <= self.queued:
            self.rounds *= 2
            return Warmth.COLD
        self.per_window = _aim(self.request.window_seconds, steps, elapsed, self.turn)
        return Warmth.WARM

    def stopped(self) -> bool:
        # A rank stops only where all agree, at a window edge (see close).
        return False

    def window_full(self, tally: Tally, elapsed: float) -> bool:
        return tally.batches >= self.per_window

    def close(self, index: int, tally: Tally, seconds: float) -> bool:
        halted = float(self.halt.is_set())
        values = [seconds, tally.samples, tally.fresh, tally.wait_seconds, tally.copy_seconds]
        rows = _gather([*values, halted], self.group)
        window = Window(
            index=index,
            seconds=max(row[0] for row in rows),
            samples=int(sum(row[1] for row in rows)),
            fresh=int(sum(row[2] for row in rows)),
            steps=tally.steps,
            wait_seconds=sum(row[3] for row in rows) / len(rows),
            copy_seconds=sum(row[4] for row in rows) / len(rows),
        )
        if self.rank == 0:
            self.link.send(("window", window))
        self.per_window = _aim(
            self.request.window_seconds, self.per_window, window.seconds, self.turn
        )
        return not any(row[5] for row in rows)


def _aim(window_seconds: float, steps: int, seconds: float, turn: int = 1) -> int:
    """Steps that should take ``window_seconds``, at the rate of ``steps`` in ``seconds``,
    rounded up to whole turns of ``turn`` steps."""
    aimed = max(1, steps) if seconds <= 0 else math.ceil(window_seconds * steps / seconds)
    return max(1, math.ceil(aimed / turn)) * turn
