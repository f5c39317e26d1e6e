"""The probe's GPU defects, checked on a real CUDA GPU: the copy and the wait share a
window without adding up past it, the device's busy share tells a busy GPU from an idle
one, a model built on CUDA reaches a probe on the CPU and its device once, and a slow
warm-up is not killed as a hang. Skipped without CUDA; run them with ``pytest -m gpu``."""

from __future__ import annotations

import copy
import functools
import os
import pickle
import time

import probe_pieces
import pytest
import torch
import workloads

from autotune.machine._gpus import discover
from autotune.machine._machine import usable_cpus
from autotune.probe import Figures, ProbeRequest, ProbeResult, WorkloadSource, run_probe
from autotune.probe._build import make_model, materialize
from autotune.probe._placement import Placement
from autotune.settings._settings import Settings
from autotune.workload._workload import Workload

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def probe(workload: Workload, settings: Settings, *, stall_timeout: float = 120.0) -> ProbeResult:
    """One probe of ``settings`` on GPU 0, placed as a search places it
    (CUDA_VISIBLE_DEVICES pinned, NVML watching), three windows of 0.5 s."""
    template = ProbeRequest(
        source=WorkloadSource(pickled=pickle.dumps(workload)),
        settings=settings,
        device="cuda",
        window_seconds=0.5,
        max_windows=3,
        warmup_seconds=0.5,
        stall_timeout=stall_timeout,
    )
    placement = Placement.plan(
        device="cuda",
        gpus="0",
        ranks=None,
        discovery=discover(),
        cpus=sorted(os.sched_getaffinity(0)),
        usable=usable_cpus(),
    )
    (slot,) = placement.slots()
    result = run_probe(slot.apply(template))
    assert result.ok, result.failure
    return result


def assert_partitioned(figures: Figures) -> None:
    """Every window's wait and copy within its time, and the busy span timed."""
    assert figures.windows
    for w in figures.windows:
        assert w.copy_seconds >= 0 and w.wait_seconds >= 0
        assert w.wait_seconds + w.copy_seconds <= w.seconds * (1 + 1e-6), w
        assert w.device_seconds is not None and 0 < w.device_seconds <= w.seconds * 1.01, w
    assert figures.wait_fraction + figures.copy_fraction <= 1.0 + 1e-6


@pytest.mark.parametrize("workers", [0, 4])
def test_pinned_copies_behind_a_slow_loader_keep_the_shares_within_the_window(workers) -> None:
    # 128 images of 3x224x224 float32 (77 MB) a batch, 50 ms of collating each: the
    # pinned copy runs on the device while the host waits for the next batch.
    workload = Workload(
        dataset=workloads.ImageLikeDataset(),
        model=workloads.image_linear_model,
        collate_fn=probe_pieces.slow_collate,
        batch_size=128,
    )
    for pinned in (True, False):
        settings = Settings(
            batch_size=128,
            num_workers=workers,
            prefetch_factor=2 if workers else None,
            pin_memory=pinned,
        )
        assert_partitioned(probe(workload, settings).figures)


def test_the_busy_share_tells_a_busy_gpu_from_one_waiting_for_data() -> None:
    busy = {}
    for name, collate_fn, workers in (("busy", None, 4), ("waiting", probe_pieces.slow_collate, 0)):
        workload = Workload(
            dataset=probe_pieces.WideDataset(),
            model=probe_pieces.big_wide_model,
            collate_fn=collate_fn,
            batch_size=512,
        )
        settings = Settings(
            batch_size=512,
            num_workers=workers,
            prefetch_factor=4 if workers else None,
            pin_memory=True,
        )
        figures = probe(workload, settings).figures
        assert_partitioned(figures)
        busy[name] = figures.device_busy_fraction
    assert busy["busy"] is not None and busy["waiting"] is not None
    assert busy["busy"] > 0.6 and busy["waiting"] < 0.4, busy


def test_a_pinned_copy_frees_the_host_but_queues_behind_the_compute() -> None:
    # What the pin advice says: the host goes on at once, the device's compute does not.
    device = torch.device("cuda")
    pinned = torch.empty(64 * 2**20, dtype=torch.float32, pin_memory=True)
    matrix = torch.randn(8192, 8192, device=device)
    # Its destination allocated beforehand: a cudaMalloc may wait for the device.
    moved = torch.empty(pinned.shape, dtype=pinned.dtype, device=device)
    began, computed, copying, copied = (torch.cuda.Event(enable_timing=True) for _ in range(4))
    # The copy alone, on an idle device.
    torch.cuda.synchronize(device)
    copying.record()
    moved.copy_(pinned, non_blocking=True)
    copied.record()
    torch.cuda.synchronize(device)
    alone_ms = copying.elapsed_time(copied)
    began.record()
    for _ in range(4):
        matrix = matrix @ matrix / 90.5  # keeps the entries near 1
    computed.record()
    copying.record()
    launched = time.perf_counter()
    moved.copy_(pinned, non_blocking=True)  # what to(device, non_blocking=True) does
    host_ms = (time.perf_counter() - launched) * 1000.0
    copied.record()
    torch.cuda.synchronize(device)
    compute_ms, copy_ms = began.elapsed_time(computed), copying.elapsed_time(copied)
    assert host_ms < (compute_ms + copy_ms) / 4  # the host did not wait for either
    # On the compute stream the copy does not run beside the matmuls: the whole takes
    # their time and the copy's, not the longer of the two.
    assert began.elapsed_time(copied) >= compute_ms + 0.8 * alone_ms


def test_a_model_built_on_cuda_reaches_the_probe_on_the_cpu_and_its_device_once() -> None:
    device = torch.device("cuda")
    built = workloads.wide_model().to(device)
    workload = Workload(
        dataset=workloads.WideFeaturesDataset(length=512),
        model=functools.partial(copy.deepcopy, built),
        batch_size=64,
    )
    data = pickle.dumps(workload)  # real CUDA storages
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    restored = materialize(WorkloadSource(pickled=data))
    assert torch.cuda.memory_allocated(device) == before  # nothing restored on a GPU
    assert {p.device.type for p in restored.model.args[0].parameters()} == {"cpu"}
    model = make_model(restored, device)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    assert torch.cuda.memory_allocated(device) - before == pytest.approx(weights, rel=0.01)
    result = probe(workload, Settings(batch_size=64, pin_memory=True))
    assert result.figures.samples_per_s > 0


def test_a_warm_up_longer_than_the_stall_timeout_on_cuda_is_not_a_hang() -> None:
    # 8 queued batches at 1.5 s a step: 13.5 s of warm-up against a 10 s stall timeout.
    workload = Workload(
        dataset=workloads.SleepyDataset(length=64),
        model=probe_pieces.slow_cuda_step_model,
        batch_size=4,
    )
    settings = Settings(batch_size=4, num_workers=2, prefetch_factor=4)
    result = probe(workload, settings, stall_timeout=10.0)
    assert len(result.figures.windows) == 3
