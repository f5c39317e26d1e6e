"""The fork server probes start from: a process with torch imported already, so each
probe is a new, clean process (no CUDA state, no threads, no leaked workers from an
earlier trial) that starts in milliseconds rather than seconds. Where the system has no
fork server, probes spawn.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterable
from multiprocessing.context import BaseContext

from autotune.probe._preload import cuda_safe

_context: BaseContext | None = None
_preload = ["torch", "autotune.probe._server", "autotune.probe._child"]
# torch._dynamo is imported by the first optimizer a probe builds: 2-3 s a probe unless
# the fork server has it already (and it leaves CUDA alone, see _preload.cuda_safe).
_PRELOAD_IF_SAFE = ("torch._dynamo",)


def probe_context() -> BaseContext:
    """The multiprocessing context probes start from (a fork server with torch loaded)."""
    global _context
    if _context is None:
        context: BaseContext
        if "forkserver" in multiprocessing.get_all_start_methods():
            context = multiprocessing.get_context("forkserver")
            _preload.extend(cuda_safe(_PRELOAD_IF_SAFE))
            context.set_forkserver_preload(list(_preload))
        else:
            context = multiprocessing.get_context("spawn")
        _context = context
    return _context


def start_probe_server() -> None:
    """Start the fork server probes start from now, rather than at the first probe: it
    imports torch once a search (seconds), which a search's estimate of what one probe
    costs must not read as a probe's. Nothing to start where probes spawn."""
    context = probe_context()
    if context.get_start_method() == "forkserver":
        # The server forks a process only once it has imported its preloads: one that
        # does nothing (a builtin, so it unpickles without an import) waits for them.
        process = context.Process(target=int, daemon=True)  # type: ignore[attr-defined]
        process.start()
        process.join()


def preload_in_probes(modules: Iterable[str]) -> None:
    """Import ``modules`` once, in the fork server probes start from, rather than in each
    probe: for workloads whose pieces unpickle into a framework that takes seconds to
    import (transformers). Effective until the fork server starts, at this process's
    first probe; after that it changes nothing (the probes import what they need).
    A module that fails to import there is skipped, and so is one whose import touches
    CUDA (every probe forked after it would fail to use it)."""
    context = probe_context()
    _preload.extend(cuda_safe(tuple(m for m in dict.fromkeys(modules) if m not in _preload)))
    if context.get_start_method() == "forkserver":
        context.set_forkserver_preload(list(_preload))
