"""The search's side of a probe: start it, read its windows, watch it, end it.

Probes start from a fork server that has torch imported already, so each one
is a new, clean process (no CUDA state, no threads, no leaked workers from
an earlier trial) that starts in milliseconds rather than seconds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

import psutil

from autotune._errors import ConfigError
from autotune.machine._monitor import Monitor
from autotune.probe._child import child_main
from autotune.probe._failure import describe_exit, oom_kills
from autotune.probe._protocol import Failure, Figures, ProbeRequest, ProbeResult, Window

OnWindow = Callable[[Window, Figures], bool]
"""Called with each window and the figures so far (every window, start-up, peak memory,
the devices); returning False stops the probe (pruned)."""

_GRACE_SECONDS = 5.0
_SHM_DIR = Path("/dev/shm")
_POLL_SECONDS = 0.1
_context: BaseContext | None = None


def probe_context() -> BaseContext:
    """The multiprocessing context probes start from (a fork server with torch loaded)."""
    global _context
    if _context is None:
        context: BaseContext
        if "forkserver" in multiprocessing.get_all_start_methods():
            context = multiprocessing.get_context("forkserver")
            # torch._dynamo is imported by the first optimizer a probe builds: 2-3 s a
            # probe unless the fork server has it already.
            context.set_forkserver_preload(
                ["torch", "torch._dynamo", "autotune.probe._server", "autotune.probe._child"]
            )
        else:
            context = multiprocessing.get_context("spawn")
        _context = context
    return _context


class TreeWatch:
    """Samples the memory of a process and all its descendants in the background.

    Memory is the proportional set size (shared pages split among sharers), so
    forked workers that share their parent's pages are not counted twice.
    """

    def __init__(self, pid: int, *, limit: int | None, interval: float = 0.2) -> None:
        self.limit = limit
        self.peak = 0
        self.exceeded_at: int | None = None
        self._root = psutil.Process(pid)
        self._seen: dict[int, psutil.Process] = {pid: self._root}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._interval = interval
        self._thread = threading.Thread(target=self._loop, name="autotune-treewatch", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def sample(self) -> int:
        """Read the tree's memory now; returns it in bytes."""
        try:
            processes = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            return 0
        total = 0
        for process in processes:
            with self._lock:
                self._seen.setdefault(process.pid, process)
            total += _memory_of(process)
        self.peak = max(self.peak, total)
        if self.limit is not None and total > self.limit and self.exceeded_at is None:
            self.exceeded_at = total
        return total

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def collect(self) -> None:
        """Remember every process of the tree now (before it is ended)."""
        try:
            current = self._root.children(recursive=True)
        except psutil.Error:
            current = []
        with self._lock:
            for process in current:
                self._seen.setdefault(process.pid, process)

    @property
    def pids(self) -> list[int]:
        """Every process of the tree ever seen."""
        with self._lock:
            return list(self._seen)

    def kill_all(self) -> None:
        """SIGKILL every process of the tree ever seen that is still alive."""
        self.collect()
        with self._lock:
            processes = list(self._seen.values())
        for process in processes:
            with contextlib.suppress(psutil.Error):
                process.kill()  # psutil checks the pid was not reused


def _memory_of(process: psutil.Process) -> int:
    try:
        info = process.memory_full_info()
        return int(getattr(info, "pss", info.rss))
    except psutil.AccessDenied:
        try:
            return int(process.memory_info().rss)
        except psutil.Error:
            return 0
    except psutil.Error:
        return 0


def refuse_while_bootstrapping() -> None:
    """Refuse to search from a probe process that is importing the user's main script
    (to find the functions defined in it): the script calls the search unguarded.

    Raises:
        ConfigError: saying to guard the call with ``if __name__ == "__main__":``.
    """
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise ConfigError(
            "autotune.search() was called while a probe process imported your script; call "
            'it under `if __name__ == "__main__":` (probes import the main script to find '
            "the functions defined in it)."
        )


def run_probe(request: ProbeRequest, *, on_window: OnWindow | None = None) -> ProbeResult:
    """Run one probe in a new process and return what it measured.

    A probe that raises, hangs (silent for ``request.stall_timeout``), goes over
    ``request.memory_limit`` or dies returns a result with its failure; it does
    not raise. KeyboardInterrupt propagates after the probe's processes are gone.
    """
    refuse_while_bootstrapping()
    if request.worker_start_method is None:
        request = dataclasses.replace(
            request, worker_start_method=multiprocessing.get_start_method()
        )
    context = probe_context()
    events, events_child = context.Pipe(duplex=False)
    control_child, control = context.Pipe(duplex=False)
    process = context.Process(  # type: ignore[attr-defined]
        target=child_main,
        args=(request, events_child, control_child),
        name="autotune-probe",
    )
    began = time.perf_counter()
    kills_before = oom_kills()
    process.start()
    events_child.close()
    control_child.close()
    watch = TreeWatch(process.pid, limit=request.memory_limit)
    monitor = Monitor(gpus=request.monitor_gpus, cores=request.cpus)
    span: list[float] = []  # [when the first window began, when the last one ended]

    windows: list[Window] = []
    startup: float | None = None
    failure: Failure | None = None
    info: dict[str, Any] = {}
    stopped = finished = False
    last_heard = time.monotonic()
    try:
        while True:
            # Checked on every pass, not only when the probe is quiet: a probe whose
            # windows come faster than the poll would otherwise never be stopped.
            if watch.exceeded_at is not None:
                failure = _over_limit(watch)
                break
            if events.poll(_POLL_SECONDS):
                try:
                    kind, payload = events.recv()
                except (EOFError, OSError):
                    process.join(timeout=_GRACE_SECONDS)
                    failure = _exit_failure(process.exitcode, kills_before)
                    break
                last_heard = time.monotonic()
                if kind == "ready":
                    startup = float(payload["startup_s"])
                elif kind == "window":
                    # Sampled at every window as well as in the background: a probe that
                    # holds too much while it measures is seen even if the sampler is late.
                    watch.sample()
                    windows.append(payload)
                    now = time.monotonic()
                    span[:] = [span[0] if span else now - payload.seconds, now]
                    if stopped or on_window is None:
                        continue
                    so_far = Figures(
                        windows=tuple(windows),
                        startup_s=startup,
                        peak_memory_bytes=watch.peak or None,
                        wall_s=time.perf_counter() - began,
                        monitor=monitor.figures(*span),
                    )
                    if not on_window(payload, so_far):
                        stopped = True
                        _send_stop(control)
                elif kind == "info":
                    info.update(payload)
                elif kind == "done":
                    if watch.exceeded_at is not None:
                        failure = _over_limit(watch)
                    finished = True
                    break
                elif kind == "error":
                    failure = _worker_oom(payload, kills_before)
                    break
                continue
            silent = time.monotonic() - last_heard
            if silent > request.stall_timeout:
                failure = Failure(kind="timeout", message=_stall_message(startup, request))
                break
            if not process.is_alive() and not events.poll(0):
                failure = _exit_failure(process.exitcode, kills_before)
                break
    finally:
        _end(process, control, watch, graceful=finished)
        monitor.stop()
        events.close()

    figures = Figures(
        windows=tuple(windows),
        startup_s=startup,
        peak_memory_bytes=watch.peak or None,
        wall_s=time.perf_counter() - began,
        monitor=monitor.figures(*span) if span else monitor.figures(),
    )
    return ProbeResult(figures=figures, failure=failure, stopped=stopped, info=info)


def _oom_killed_since(before: int | None) -> bool | None:
    after = oom_kills()
    if before is None or after is None:
        return None
    return after > before


def _exit_failure(exitcode: int | None, kills_before: int | None) -> Failure:
    kind, message = describe_exit(exitcode, oom_killed=_oom_killed_since(kills_before))
    return Failure(kind=kind, message=message)


def _worker_oom(failure: Failure, kills_before: int | None) -> Failure:
    """A worker killed by SIGKILL while the kernel's out-of-memory killer struck ran out
    of memory; torch only says that it was killed."""
    if (
        failure.kind == "worker"
        and "signal: Killed" in failure.message
        and (_oom_killed_since(kills_before))
    ):
        message = f"{failure.message} (by the kernel's out-of-memory killer)"
        return dataclasses.replace(failure, kind="oom", message=message)
    return failure


def _stall_message(startup: float | None, request: ProbeRequest) -> str:
    limit = f"{request.stall_timeout:g} s"
    if startup is None:
        return (
            f"no first batch within {limit}: the dataset, collate_fn or a worker hangs "
            "(or start-up is slower than the trial timeout)"
        )
    return f"no progress for {limit} after start-up: a batch or a training step hangs"


def _send_stop(control: Any) -> None:
    with contextlib.suppress(BrokenPipeError, OSError):
        control.send("stop")


def _end(process: Any, control: Any, watch: TreeWatch, *, graceful: bool) -> None:
    """Make sure the probe and every process it started are gone, and what they left in
    shared memory too."""
    if graceful:
        process.join(timeout=_GRACE_SECONDS)
    watch.stop()
    watch.collect()
    if process.is_alive():
        _send_stop(control)
        process.kill()
    # The probe leads its own process group: this takes its workers too, also when the
    # probe itself has died (a crash) and left them behind.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    watch.kill_all()
    process.join(timeout=_GRACE_SECONDS)
    control.close()
    _remove_shared_memory(watch.pids)


def _remove_shared_memory(pids: list[int]) -> None:
    """Remove the shared-memory files these (ended) processes left behind.

    torch names them after the process that made them (``torch_<pid>_...``) and
    unlinks them at once, except when making one fails half-way (shared memory
    full): then the file stays, holding on to the very memory that ran out.
    """
    for pid in pids:
        for path in _SHM_DIR.glob(f"torch_{pid}_*"):
            with contextlib.suppress(OSError):
                path.unlink()


def _over_limit(watch: TreeWatch) -> Failure:
    return Failure(
        kind="oom",
        message=(
            f"the probe's processes used {_gib(watch.exceeded_at or 0)}, over the "
            f"memory limit of {_gib(watch.limit or 0)} (search option memory_limit)"
        ),
    )


def _gib(value: int) -> str:
    return f"{value / 2**30:.2f} GiB"
