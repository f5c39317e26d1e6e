"""Turning what went wrong in a probe into a short, actionable reason."""

from __future__ import annotations

import signal
import traceback

from autotune._probe._protocol import Failure, FailureKind

_SHM_HINT = (
    "shared memory (/dev/shm) is too small for the batches in flight; give the container more "
    "(docker run --shm-size=8g), or use fewer workers or a smaller prefetch_factor"
)


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
        message = f"{message} ({_SHM_HINT})"
    return Failure(
        kind=kind,
        message=message,
        piece=piece,
        traceback="".join(traceback.format_exception(error)),
    )


def _kind(error: BaseException, message: str) -> FailureKind:
    import torch

    if isinstance(error, torch.OutOfMemoryError | MemoryError):
        return "oom"
    lowered = message.lower()
    if "bus error" in lowered or "shared memory" in lowered or "no space left on device" in lowered:
        return "shm"
    if "dataloader worker" in lowered and "exited unexpectedly" in lowered:
        return "worker"
    # A RuntimeError from an allocator that predates torch.OutOfMemoryError.
    if isinstance(error, RuntimeError) and "out of memory" in lowered:
        return "oom"
    return "error"


def describe(error: BaseException) -> str:
    """``Type: message`` on one line; for an error raised in a DataLoader worker, the
    original error with the worker named (not torch's wrapping text)."""
    from autotune._probe._train import ContractError

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


def describe_exit(exitcode: int | None) -> tuple[FailureKind, str]:
    """Why a probe process ended without saying so, from its exit code."""
    if exitcode is None:
        return "crash", "the probe process ended without a result"
    if exitcode < 0:
        number = -exitcode
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        if number == signal.SIGKILL:
            return "oom", (
                f"the probe process was killed by {name}, most likely by the kernel's "
                "out-of-memory killer"
            )
        if number == signal.SIGBUS:
            return "shm", f"the probe process crashed with {name} ({_SHM_HINT})"
        return "crash", f"the probe process crashed with {name}"
    return "crash", f"the probe process exited with code {exitcode} without a result"
