"""Turning what went wrong in a probe into a short, actionable reason."""

from __future__ import annotations

import contextlib
import signal
import traceback
from pathlib import Path

from autotune.probe._protocol import Failure, FailureKind

SHM_FIX = (
    "give the container more (docker run --shm-size=8g), or use fewer workers or a smaller "
    "prefetch_factor"
)
SHM_HINT = f"shared memory (/dev/shm) is too small for the batches in flight; {SHM_FIX}"
_VMSTAT = Path("/proc/vmstat")
_OUT_OF_MEMORY = (
    "out of memory",
    "can't allocate memory",
    "cublas_status_alloc_failed",
    "cudnn_status_alloc_failed",
    "failed to cuda calloc",
    "failed to cuda malloc",
    "cudaerrormemoryallocation",
)
"""Lower-case text of the errors that mean memory ran out, raised as a RuntimeError: by
CUDA itself, cuBLAS and cuDNN (their handles and workspaces), and NCCL (its buffers)."""
_SIGNAL_HINTS: dict[int, str] = {
    signal.SIGSEGV.value: "a segmentation fault in native code (the dataset, the model, or a "
    "library they call)",
    signal.SIGABRT.value: "an abort in native code (the dataset, the model, or a library "
    "they call)",
    signal.SIGILL.value: "an illegal instruction (a library built for another CPU?)",
    signal.SIGFPE.value: "an arithmetic fault in native code",
}


class ReportedFailure(Exception):
    """Raised in a probe to report a failure already classified (by a DDP rank)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def classify(error: BaseException, piece: str | None) -> Failure:
    """A Failure for an exception raised in the probe, by type first and text second."""
    message = describe(error)
    kind = _kind(error, message)
    if kind == "shm":
        message = f"{message} ({SHM_HINT})"
    if kind in ("worker", "shm"):
        # torch raises a worker's death wherever the training loop happens to be.
        piece = None
    return Failure(
        kind=kind,
        message=message,
        piece=piece,
        traceback="".join(traceback.format_exception(error)),
    )


def classify_raised(error: BaseException) -> Failure:
    """The Failure of an exception a probe's own code raised: a ``PieceError`` is its
    user's error, blamed on the piece it came from; any other is blamed on none."""
    from autotune.probe._train import PieceError

    if isinstance(error, PieceError):
        return classify(error.error, error.piece)
    return classify(error, None)


def _kind(error: BaseException, message: str) -> FailureKind:
    import torch

    if isinstance(error, torch.OutOfMemoryError | MemoryError):
        return "oom"
    lowered = message.lower()
    if "bus error" in lowered or "shared memory" in lowered or "no space left on device" in lowered:
        return "shm"
    if "dataloader worker" in lowered and (
        "exited unexpectedly" in lowered or "killed by signal" in lowered
    ):
        return "worker"
    # Allocators and device libraries that raise a RuntimeError (NCCL's DistBackendError is
    # one) rather than torch.OutOfMemoryError; NCCL names the cause lines below the first.
    whole = str(error).lower()
    if isinstance(error, RuntimeError) and any(text in whole for text in _OUT_OF_MEMORY):
        return "oom"
    return "error"


def describe(error: BaseException) -> str:
    """``Type: message`` on one line; for an error raised in a DataLoader worker, the
    original error with the worker named (not torch's wrapping text)."""
    from autotune.probe._train import ContractError

    text = str(error).strip()
    if isinstance(error, ContractError):
        return text
    if text.startswith("Caught ") and "Original Traceback" in text:
        first, _, rest = text.partition("\n")
        lines = [line for line in rest.splitlines() if line.strip()]
        original = lines[-1].strip() if lines else first
        where = first.removeprefix("Caught ").split(" in ", 1)[-1].rstrip(".")
        return f"{original} (in {where})"
    first_line = text.splitlines()[0] if text else ""
    name = type(error).__name__
    return f"{name}: {first_line}" if first_line else name


def oom_kills() -> int | None:
    """How many processes the kernel's out-of-memory killer has killed since boot."""
    with contextlib.suppress(OSError, ValueError):
        for line in _VMSTAT.read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    return None


def describe_exit(
    exitcode: int | None, *, oom_killed: bool | None = None
) -> tuple[FailureKind, str]:
    """Why a probe process ended without saying so, from its exit code.

    Args:
        exitcode: the process's exit code (negative: the signal that ended it).
        oom_killed: whether the kernel's out-of-memory killer killed a process while
            the probe ran; None when the kernel does not say.
    """
    if exitcode is None:
        return "crash", "the probe process ended without a result"
    if exitcode < 0:
        number = -exitcode
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        if number == signal.SIGKILL:
            if oom_killed is False:
                return "crash", (
                    f"the probe process was killed by {name} from outside (not by the "
                    "kernel's out-of-memory killer)"
                )
            likely = "" if oom_killed else "most likely "
            return "oom", (
                f"the probe process was killed by {name}, {likely}by the kernel's "
                "out-of-memory killer"
            )
        if number == signal.SIGBUS:
            return "shm", f"the probe process crashed with {name} ({SHM_HINT})"
        hint = _SIGNAL_HINTS.get(number)
        return "crash", f"the probe process crashed with {name}" + (f": {hint}" if hint else "")
    return "crash", (
        f"the probe process exited with code {exitcode} before it reported; its own error, "
        "if any, is printed above"
    )


def shm_shortfall(
    *, num_workers: int, prefetch_factor: int | None, batch_bytes: float, free_bytes: int
) -> Failure | None:
    """A Failure when the batches a loader keeps in flight cannot fit in /dev/shm.

    Each worker hands its batches over in shared memory; the loader keeps up to
    ``num_workers * prefetch_factor`` of them waiting, plus the one being trained on.
    """
    if num_workers == 0 or batch_bytes <= 0:
        return None
    prefetch = prefetch_factor or 2  # the DataLoader's default
    in_flight = num_workers * prefetch + 1
    needed = in_flight * batch_bytes
    if needed <= free_bytes:
        return None
    workers = f"{num_workers} worker{'s' if num_workers > 1 else ''}"
    return Failure(
        kind="shm",
        message=(
            f"not run: {in_flight} batches in flight ({workers} x prefetch {prefetch}, + 1) "
            f"of {_mib(batch_bytes)} need {_mib(needed)} of shared memory (/dev/shm), and "
            f"{_mib(free_bytes)} is free; {SHM_FIX}"
        ),
    )


def _mib(value: float) -> str:
    return f"{value / 2**20:,.1f} MiB"
