"""What a probe's processes left in /dev/shm: removed once they have ended, and the
files left half-made read as the reason the probe failed.

torch names the files after the process that made them (``torch_<pid>_...``) and
unlinks them at once, except when making one fails half-way (shared memory full): then
the file stays, its size set but its memory never allocated (fewer blocks than its
size), or holding on to the very memory that ran out.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

from autotune.probe._failure import SHM_HINT
from autotune.probe._protocol import Failure

_SHM_DIR = Path("/dev/shm")
SHM_MAY_EXPLAIN = ("timeout", "worker", "crash")
"""Failures that shared memory running out in a worker can cause without saying so."""


def remove_shared_memory(pids: list[int]) -> list[str]:
    """Remove the shared-memory files these (ended) processes left behind; returns the
    names of those left half-made (see the module's docstring)."""
    half_made: list[str] = []
    for pid in pids:
        for path in _SHM_DIR.glob(f"torch_{pid}_*"):
            with contextlib.suppress(OSError):
                stat = path.stat()
                if stat.st_blocks * 512 < stat.st_size:
                    half_made.append(path.name)
                path.unlink()
    return half_made


def out_of_shared_memory(failure: Failure, half_made: list[str]) -> Failure:
    """``failure``, explained by the batch files a worker could not allocate in /dev/shm."""
    files = f"{len(half_made)} batch file{'s' if len(half_made) > 1 else ''}"
    return dataclasses.replace(
        failure,
        kind="shm",
        message=(
            f"{failure.message}; a DataLoader worker could not hand its batches over: it left "
            f"{files} half-made in /dev/shm ({SHM_HINT})"
        ),
    )
