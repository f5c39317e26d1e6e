"""Out of memory as the search reads it: what the device's libraries raise when it is full
is out of memory, a batch too large for the device is too large whatever loads it, and
running out of memory is a config's failure, not the user's code failing. The device is
faked only where it raises: these are the errors CUDA, cuBLAS, cuDNN and NCCL raise."""

from __future__ import annotations

import pytest
import torch

from autotune.explore._fatal import FATAL_REPEATS, FailureWatch, counts_against_the_code
from autotune.explore._ruled_out import OutOfMemoryRule
from autotune.probe import Failure
from autotune.probe._failure import classify
from autotune.settings._settings import Settings
from autotune.study import TrialRecord

DEVICE_FULL = [
    torch.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "139.72 GiB of which 1.06 GiB is free."
    ),
    RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
    RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
    RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported"),
    torch.distributed.DistBackendError(
        "NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with "
        "NCCL_DEBUG=INFO for details), NCCL version 2.21.5\nncclUnhandledCudaError: Call to "
        "CUDA function failed.\nLast error:\nFailed to CUDA calloc 6291456 bytes"
    ),
    torch.distributed.DistBackendError(
        "NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error, NCCL version 2.21.5\n"
        "Last error:\nCuda failure 2 'out of memory'"
    ),
]
NOT_MEMORY = [
    RuntimeError("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm`"),
    RuntimeError("cuDNN error: CUDNN_STATUS_BAD_PARAM"),
    torch.distributed.DistBackendError("NCCL error: remote process exited or there was a network"),
]


@pytest.mark.parametrize("error", DEVICE_FULL, ids=lambda e: str(e)[:40])
def test_what_a_full_device_raises_is_out_of_memory_on_the_device(error) -> None:
    failure = classify(error, "model(batch)")
    assert failure.kind == "oom", failure
    assert failure.on_device()


@pytest.mark.parametrize("error", NOT_MEMORY, ids=lambda e: str(e)[:40])
def test_other_device_library_errors_are_not_out_of_memory(error) -> None:
    assert classify(error, "model(batch)").kind == "error"


@pytest.mark.parametrize(
    "failure",
    [
        classify(MemoryError(), "dataset"),
        classify(RuntimeError("DefaultCPUAllocator: can't allocate memory"), "model(batch)"),
        Failure(kind="oom", message="the probe's processes used 0.70 GiB, over the memory limit"),
        Failure(
            kind="oom",
            message="the probe process was killed by SIGKILL, most likely by "
            "the kernel's out-of-memory killer",
        ),
        Failure(kind="error", message="RuntimeError: CUDA error: device-side assert triggered"),
    ],
)
def test_the_host_running_out_is_not_the_device_running_out(failure) -> None:
    assert not failure.on_device()


DEVICE_OOM = classify(DEVICE_FULL[0], "model(batch)")
HOST_OOM = Failure(kind="oom", message="the probe's processes used 0.70 GiB, over the limit")


def test_a_batch_too_large_for_the_device_is_too_large_whatever_loads_it() -> None:
    rule = OutOfMemoryRule()
    rule.add(Settings(batch_size=32), number=3, failure=DEVICE_OOM)
    loaders = [
        Settings(batch_size=32, num_workers=4, prefetch_factor=8, pin_memory=True),
        Settings(batch_size=64, num_workers=2, persistent_workers=True, worker_threads=2),
        Settings(batch_size=128, threads=3, echo=2),
    ]
    for settings in loaders:
        blocked = rule.blocks(settings)
        assert blocked is not None and blocked.kind == "infeasible", settings
        assert "ran out of device memory with the same AMP in trial #3" in blocked.message
    assert rule.blocks(Settings(batch_size=16, num_workers=4)) is None
    # AMP changes what a batch takes on the device: it is its own question.
    assert rule.blocks(Settings(batch_size=64, amp="bf16")) is None


def test_the_host_running_out_rules_out_only_the_same_loader() -> None:
    # Workers hold host memory of their own: fewer of them may fit.
    rule = OutOfMemoryRule()
    rule.add(Settings(batch_size=32, num_workers=8), number=1, failure=HOST_OOM)
    assert rule.blocks(Settings(batch_size=64, num_workers=8)) is not None
    assert rule.blocks(Settings(batch_size=64, num_workers=2)) is None


def test_out_of_memory_does_not_count_as_the_user_s_code_failing() -> None:
    def record(number: int) -> TrialRecord:
        return TrialRecord(
            number=number,
            state="FAIL",
            role="explore",
            settings=Settings(batch_size=2**number),
            value=None,
            figures=None,
            failure=DEVICE_OOM,
            duration_s=None,
        )

    watch = FailureWatch()
    ooms = [record(n) for n in range(FATAL_REPEATS + 2)]
    assert not counts_against_the_code(ooms[0])
    assert all(watch.observe(r) is None for r in ooms)  # the search goes on
