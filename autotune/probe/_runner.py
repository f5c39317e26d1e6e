"""The search's side of a probe: start it, read its windows, watch it, end it.

Probes start from the fork server (:mod:`autotune.probe._forkserver`); the memory of
each one's process tree is watched (:mod:`autotune.probe._memory_watch`), and what its
processes left in /dev/shm is removed when it ends (:mod:`autotune.probe._shm`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from autotune._errors import ConfigError
from autotune.machine import Monitor
from autotune.probe._child import child_main
from autotune.probe._failure import describe_exit, oom_kills
from autotune.probe._forkserver import probe_context
from autotune.probe._memory_watch import TreeWatch
from autotune.probe._protocol import Failure, Figures, ProbeRequest, ProbeResult, Window
from autotune.probe._shm import SHM_MAY_EXPLAIN, out_of_shared_memory, remove_shared_memory

OnWindow = Callable[[Window, Figures], bool]
"""Called with each window and the figures so far (every window, start-up, peak memory,
the devices); returning False stops the probe (pruned)."""

_GRACE_SECONDS = 5.0
_TURNS_OWN = ("timeout", "crash")
"""Failures of a probe measuring configs in turns that belong to the config whose turn
was under way: it hung or crashed the process in its own steps."""
_POLL_SECONDS = 0.1


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
    probe = _RunningProbe(request, on_window)
    try:
        probe.follow()
    finally:
        probe.end()
    return probe.result()


class _RunningProbe:
    """One probe process, seen from the search: what it has reported so far, and how it
    ended (finished, failed, or stopped early by ``on_window``)."""

    def __init__(self, request: ProbeRequest, on_window: OnWindow | None) -> None:
        """Start the probe's process, and watch its memory and the machine from now on."""
        self.request = request
        self.on_window = on_window
        context = probe_context()
        self.events, events_child = context.Pipe(duplex=False)
        control_child, self.control = context.Pipe(duplex=False)
        self.process: Any = context.Process(  # type: ignore[attr-defined]
            target=child_main,
            args=(request, events_child, control_child),
            name="autotune-probe",
        )
        self.began = time.perf_counter()
        self.kills_before = oom_kills()
        self.process.start()
        events_child.close()
        control_child.close()
        self.watch = TreeWatch(self.process.pid, limit=request.memory_limit)
        self.monitor = Monitor(gpus=request.monitor_gpus, cores=request.cpus)
        self.span: list[float] = []  # [when the first window began, when the last one ended]
        self.windows: list[Window] = []
        self.startup: float | None = None
        self.failure: Failure | None = None
        self.info: dict[str, Any] = {}
        self.stopped = False
        self.finished = False
        self.last_heard = time.monotonic()
        self.turn_windows: dict[int, list[Window]] = {}
        self.turn_startup: dict[int, float] = {}
        self.turn_failure: dict[int, Failure] = {}
        self.current_turn: int | None = None
        """The config whose turn began last, of a probe measuring configs in turns."""

    def follow(self) -> None:
        """Read the probe's events and watch it until it is done, has failed or is gone."""
        while True:
            # Checked on every pass, not only when the probe is quiet: a probe whose
            # windows come faster than the poll would otherwise never be stopped.
            if self.watch.exceeded_at is not None:
                self.failure = _over_limit(self.watch)
                return
            if self.events.poll(_POLL_SECONDS):
                if not self._read_event():
                    return
            elif not self._still_running():
                return

    def _read_event(self) -> bool:
        """Take the next event and act on it; False once the probe has ended."""
        try:
            kind, payload = self.events.recv()
        except (EOFError, OSError):
            self.process.join(timeout=_GRACE_SECONDS)
            self.failure = _exit_failure(self.process.exitcode, self.kills_before)
            return False
        self.last_heard = time.monotonic()
        handlers: dict[str, Callable[[Any], bool]] = {
            "ready": self._on_ready,
            "window": self._on_window,
            "info": self._on_info,
            "workers": self._on_workers,
            "alive": self._on_alive,
            "done": self._on_done,
            "error": self._on_error,
            "turn": self._on_turn,
            "turn_start": self._on_turn_start,
            "turn_ready": self._on_turn_ready,
            "turn_error": self._on_turn_error,
        }
        handler = handlers.get(kind)
        # An event of another kind is passed over: the probe is still running.
        return handler is None or handler(payload)

    def _on_ready(self, payload: dict[str, Any]) -> bool:
        """The first batch arrived: start-up is over."""
        self.startup = float(payload["startup_s"])
        # Every worker has started: read the peak now, in the warm-up that is not
        # measured, since a tree of many workers is read seldom while it is.
        self.watch.sample(force=True)
        return True

    def _on_window(self, window: Window) -> bool:
        """A measuring window ended: keep it, and ask ``on_window`` whether to go on."""
        # Sampled at every window as well as in the background: a probe that
        # holds too much while it measures is seen even if the sampler is late.
        self.watch.sample()
        self.windows.append(window)
        now = time.monotonic()
        self.span[:] = [self.span[0] if self.span else now - window.seconds, now]
        if self.stopped or self.on_window is None:
            return True
        if not self.on_window(window, self.figures()):
            self.stopped = True
            _send_stop(self.control)
        return True

    def _on_turn(self, payload: tuple[int, Window]) -> bool:
        """A window of one of the configs measured in turns."""
        index, window = payload
        self.watch.sample()
        self.turn_windows.setdefault(index, []).append(window)
        self.windows.append(window)
        now = time.monotonic()
        self.span[:] = [self.span[0] if self.span else now - window.seconds, now]
        return True

    def _on_turn_start(self, index: int) -> bool:
        """One of the configs measured in turns begins its turn."""
        self.current_turn = index
        return True

    def _on_turn_ready(self, payload: tuple[int, float]) -> bool:
        """One of the configs measured in turns has its first batch."""
        index, seconds = payload
        self.turn_startup[index] = float(seconds)
        if self.startup is None:
            self.startup = float(seconds)
        self.watch.sample(force=True)
        return True

    def _on_turn_error(self, payload: tuple[int, Failure]) -> bool:
        """One of the configs measured in turns failed; the others go on."""
        index, failure = payload
        self.turn_failure[index] = _worker_oom(failure, self.kills_before)
        return True

    def _on_info(self, payload: dict[str, Any]) -> bool:
        """What the probe learned (where it runs, what a check found), kept for the result."""
        self.info.update(payload)
        return True

    def _on_workers(self, pids: list[int]) -> bool:
        """The loader has started its workers: they belong to the probe's tree."""
        self.watch.adopt(pids)
        return True

    def _on_alive(self, payload: None) -> bool:
        """The probe is still stepping (heard: the stall clock starts again)."""
        return True

    def _on_done(self, payload: None) -> bool:
        """The probe finished; over the memory limit at the end, it still failed."""
        if self.watch.exceeded_at is not None:
            self.failure = _over_limit(self.watch)
        self.finished = True
        return False

    def _on_error(self, failure: Failure) -> bool:
        """The probe failed and said why."""
        self.failure = _worker_oom(failure, self.kills_before)
        return False

    def _still_running(self) -> bool:
        """After a poll that brought no event: False once the probe has hung or died."""
        silent = time.monotonic() - self.last_heard
        if silent > self.request.stall_timeout:
            self.failure = Failure(
                kind="timeout", message=_stall_message(self.startup, self.request)
            )
            return False
        # Only with the pipe empty: what the probe sent before it died is read first.
        if not self.process.is_alive() and not self.events.poll(0):
            self.failure = _exit_failure(self.process.exitcode, self.kills_before)
            return False
        return True

    def end(self) -> None:
        """Make sure the probe's processes are gone, and stop watching the machine.

        A probe that hung or lost a worker while its workers left batch files half-made
        in /dev/shm ran out of shared memory: a worker that cannot hand a batch over
        there may die, or drop the batch and leave the loader waiting for it for ever.
        """
        half_made = _end(self.process, self.control, self.watch, graceful=self.finished)
        self.monitor.stop()
        self.events.close()
        if half_made and self.failure is not None and self.failure.kind in SHM_MAY_EXPLAIN:
            self.failure = out_of_shared_memory(self.failure, half_made)

    def figures(self) -> Figures:
        """What the probe measured so far (all of it, once it has ended)."""
        return Figures(
            windows=tuple(self.windows),
            startup_s=self.startup,
            peak_memory_bytes=self.watch.peak or None,
            wall_s=time.perf_counter() - self.began,
            monitor=self.monitor.figures(*self.span) if self.span else self.monitor.figures(),
        )

    def result(self) -> ProbeResult:
        """The probe's result: its figures, its failure if any, whether it was stopped, and
        with configs measured in turns, each one's result."""
        figures = self.figures()
        return ProbeResult(
            figures=figures,
            failure=self.failure,
            stopped=self.stopped,
            info=self.info,
            turns=tuple(self._turn_result(i, figures) for i in range(len(self.request.turns))),
        )

    def _turn_result(self, index: int, whole: Figures) -> ProbeResult:
        """The result of the config at ``index`` of the turns: its own windows and start-up
        (its memory is not told apart from the others'), its own failure, or the
        process's where that ended it before all its windows. A hang or a crash in the
        middle of a config's turn is that config's own (a copy of the process's failure);
        one that ended the others' turns, or the memory of every loader together over the
        limit, is the process's, which they share."""
        windows = tuple(self.turn_windows.get(index, ()))
        failure = self.turn_failure.get(index)
        if failure is None and len(windows) < self.request.max_windows:
            failure = self.failure or Failure(
                kind="error", message="the probe ended before this config's windows"
            )
            if failure.kind in _TURNS_OWN and index == self.current_turn:
                failure = dataclasses.replace(failure)
        figures = Figures(
            windows=windows, startup_s=self.turn_startup.get(index), wall_s=whole.wall_s
        )
        return ProbeResult(figures=figures, failure=failure, stopped=self.stopped, info=self.info)


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


def _end(process: Any, control: Any, watch: TreeWatch, *, graceful: bool) -> list[str]:
    """Make sure the probe and every process it started are gone, and what they left in
    shared memory too; returns the names of the files left there half-made."""
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
    return remove_shared_memory(watch.pids)


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
