"""The C allocator's thresholds, fixed in every process that trains or loads.

glibc's ``malloc`` gives the freed top of its heap back to the system once it passes a
trim threshold, and it moves that threshold (with the mmap threshold) as the process
runs. A training loop that frees a batch's tensors and allocates the next batch's can
fall into taking its memory back from the system every step, zeroed page by page, and
whether a process falls into it depends on what it allocated and freed before. So a
measurement under glibc's rule says as much about the process as about the config (the
runs: ``docs/decisions.md``).

:func:`fix_allocator` sets both thresholds to what glibc itself reaches at most (mmap
32 MiB, trim twice that): the heap keeps freed memory, and the thresholds no longer
move. Every loader autotune builds (the probes', the tuned loader, the integrations')
calls it, so what is measured and what the user runs share one allocator rule; the
environment variables it sets carry the rule to worker processes started by ``spawn``
or ``forkserver`` (forked ones inherit it).

The user's own choice wins: nothing is changed when ``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_`` or a malloc tunable in ``GLIBC_TUNABLES`` is set, or when
``AUTOTUNE_FIX_ALLOCATOR=0``. Elsewhere than glibc (musl, macOS) nothing is done.
"""

from __future__ import annotations

import ctypes
import os
from typing import Literal

MMAP_THRESHOLD = 32 * 2**20
"""Bytes: allocations above it get their own mapping; glibc's largest dynamic value."""
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD
"""Bytes of free heap top kept before trimming: what glibc sets when it raises the mmap
threshold to :data:`MMAP_THRESHOLD` itself."""
ENVIRONMENT = {
    "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD),
    "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD),
}
"""The same rule for a process glibc starts: for a launch line, and for children."""
SWITCH = "AUTOTUNE_FIX_ALLOCATOR"
"""Set to 0 to leave the allocator as glibc runs it."""

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameters (``malloc.h``)."""

AllocatorState = Literal["fixed", "user's", "off", "not glibc"]
"""What :func:`fix_allocator` found or did: it fixed the thresholds (now or before in
this process); the user set them; ``AUTOTUNE_FIX_ALLOCATOR=0``; not glibc."""

_fixed = False
"""Whether this process fixed them (a forked child inherits them, and this)."""


def user_set() -> bool:
    """Whether the environment sets the thresholds otherwise than :data:`ENVIRONMENT`
    (the user's choice)."""
    if all(os.environ.get(name) == value for name, value in ENVIRONMENT.items()):
        return False  # autotune's own rule, as a process started with it inherits
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    return any(name in os.environ for name in ENVIRONMENT) or any(
        f"glibc.malloc.{name}" in tunables for name in ("mmap_threshold", "trim_threshold")
    )


def _glibc() -> ctypes.CDLL | None:
    if os.name != "posix":
        return None
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    return libc


def fix_allocator() -> AllocatorState:
    """Fix glibc ``malloc``'s mmap and trim thresholds in this process and its children.

    Call it before training (autotune's loaders do); once per process is enough, and
    again does nothing. It changes no allocation already made.

    Returns:
        What was done: ``"fixed"``; ``"user's"`` when the environment sets them already;
        ``"off"`` when ``AUTOTUNE_FIX_ALLOCATOR=0``; ``"not glibc"`` elsewhere.
    """
    global _fixed
    if os.environ.get(SWITCH, "1").strip() == "0":
        return "off"
    if _fixed:
        return "fixed"
    if user_set():
        return "user's"
    libc = _glibc()
    if libc is None:
        return "not glibc"
    if not (
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    ):
        return "not glibc"  # a mallopt that refuses them is not the one described here
    os.environ.update(ENVIRONMENT)
    _fixed = True
    return "fixed"


CALL = "autotune.fix_allocator()  # glibc malloc's thresholds fixed, as measured"
"""The line of emitted code that applies the rule the figures were measured under."""
_MEASURED_UNDER: dict[AllocatorState | None, str] = {
    "user's": "# measured under your own malloc thresholds (MALLOC_*_THRESHOLD_ or "
    "GLIBC_TUNABLES): train with them set",
    "off": "# measured under glibc's own malloc thresholds (AUTOTUNE_FIX_ALLOCATOR=0): "
    "train with it set",
    None: "# measured under glibc's own malloc thresholds (by an autotune from before it "
    "fixed them)",
}
"""What emitted code says instead of :data:`CALL` for figures measured under another rule
(None: a result that recorded none, from before the rule)."""


def allocator_lines(measured_under: AllocatorState | None) -> list[str]:
    """The lines emitted code carries for the allocator rule its figures were measured
    under (:func:`fix_allocator`'s answer in the probes, None where the result recorded
    none): the call for "fixed", a comment naming the rule otherwise, nothing off glibc.
    Code that calls it needs ``import autotune`` (:func:`calls_autotune`)."""
    if measured_under == "fixed":
        return [CALL]
    comment = _MEASURED_UNDER.get(measured_under)
    return [comment] if comment else []


def calls_autotune(measured_under: AllocatorState | None) -> bool:
    """Whether :func:`allocator_lines` calls autotune (the code then imports it)."""
    return measured_under == "fixed"


def launch_words(measured_under: AllocatorState | None) -> list[str]:
    """The environment assignments a launch line carries for the rule the figures were
    measured under: autotune's fixed thresholds; none for any other rule (the user's
    own variables, or glibc's, are the environment the line runs in already)."""
    if measured_under != "fixed":
        return []
    return [f"{name}={value}" for name, value in ENVIRONMENT.items()]
