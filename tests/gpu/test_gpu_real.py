"""The real probe on a real CUDA GPU: the copy timed apart from the wait, AMP modes timed
alike, NVML's readings, a DDP probe over NCCL. Skipped without CUDA; run them on a GPU
machine with ``pytest -m gpu``."""

from __future__ import annotations

import math
import os
import pickle

import gpu_workloads
import pytest
import torch
import workloads

from autotune.machine._gpus import discover
from autotune.machine._machine import usable_cpus
from autotune.probe import Figures, ProbeRequest, ProbeResult, WorkloadSource, run_probe
from autotune.probe._placement import Placement
from autotune.settings._settings import Settings
from autotune.workload._workload import Workload

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def probe(dataset, model, settings: Settings, *, gpus: str = "0", ddp: bool = False) -> ProbeResult:
    """One probe of ``settings`` on the GPU(s) ``gpus``, placed as a search places it
    (CUDA_VISIBLE_DEVICES pinned, NVML watching), three windows of 0.5 s."""
    workload = Workload(dataset=dataset, model=model, batch_size=settings.batch_size)
    template = ProbeRequest(
        source=WorkloadSource(pickled=pickle.dumps(workload)),
        settings=settings,
        device="cuda",
        window_seconds=0.5,
        max_windows=3,
        warmup_seconds=0.5,
        stall_timeout=120.0,
    )
    placement = Placement.plan(
        device="cuda",
        gpus=gpus,
        ranks=None,
        discovery=discover(),
        cpus=sorted(os.sched_getaffinity(0)),
        usable=usable_cpus(),
    )
    if ddp:
        request = placement.ddp_request(template, {})
    else:
        (slot,) = placement.slots()
        request = slot.apply(template)
    result = run_probe(request)
    assert result.ok, result.failure
    return result


def assert_sound(figures: Figures) -> None:
    """Windows measured, every figure finite, the shares within a window's time."""
    assert len(figures.windows) == 3
    for window in figures.windows:
        assert window.seconds > 0 and window.samples > 0 and window.steps > 0
        for value in (window.wait_seconds, window.copy_seconds):
            assert math.isfinite(value) and 0 <= value <= window.seconds
    assert math.isfinite(figures.samples_per_s) and figures.samples_per_s > 0
    assert figures.wait_fraction + figures.copy_fraction <= 1.0


def test_a_pinned_copy_takes_a_smaller_share_than_a_pageable_one() -> None:
    # 128 images of 3x224x224 float32: 77 MB to copy each step, next to no compute.
    dataset = workloads.ImageLikeDataset()
    shares = {}
    for pinned in (False, True):
        settings = Settings(batch_size=128, pin_memory=pinned)
        figures = probe(dataset, workloads.image_linear_model, settings).figures
        assert_sound(figures)
        assert figures.copy_fraction > 0  # a real copy, timed by CUDA events
        shares[pinned] = figures.copy_fraction
    assert shares[True] < shares[False], shares


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_every_amp_mode_is_timed_between_synchronised_edges(amp) -> None:
    if amp == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")
    # Compute-bound on the largest GPUs (gpu_workloads.compute_bound_model): a probe whose
    # edges missed the queued kernels would read far more than the synchronised loop.
    settings = Settings(batch_size=512, pin_memory=True, amp=amp)
    dataset = gpu_workloads.Features()
    result = probe(dataset, gpu_workloads.compute_bound_model, settings)
    assert_sound(result.figures)
    plain = gpu_workloads.plain_rate(
        dataset, gpu_workloads.compute_bound_model(), batch_size=512, amp=amp
    )
    torch.cuda.empty_cache()
    assert 0.8 < result.figures.samples_per_s / plain < 1.25, (result.figures.samples_per_s, plain)


def test_bf16_and_fp16_are_timed_alike() -> None:
    if not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")
    rates = {}
    for amp in ("bf16", "fp16"):
        settings = Settings(batch_size=512, pin_memory=True, amp=amp)
        figures = probe(workloads.WideFeaturesDataset(), workloads.wide_model, settings).figures
        assert_sound(figures)
        rates[amp] = figures.samples_per_s
    # The same matmuls at the same width: fp16's GradScaler sync each step costs it
    # little; a loop that timed one mode's queued work and not the other's would not.
    assert 0.5 < rates["bf16"] / rates["fp16"] < 2.0, rates


def test_nvml_readings_come_with_the_figures() -> None:
    settings = Settings(batch_size=512, pin_memory=True)
    result = probe(workloads.WideFeaturesDataset(), workloads.wide_model, settings)
    monitor = result.figures.monitor
    assert monitor is not None and monitor.gpu_absent is None, monitor
    (gpu,) = monitor.gpus
    assert gpu.memory_used_bytes is not None and gpu.memory_used_bytes > 0, gpu
    for name, value in (("utilization", gpu.utilization_percent), ("power", gpu.power_w)):
        assert value is not None or name in gpu.missing, gpu  # absent only with a reason


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_a_two_rank_ddp_probe_over_nccl() -> None:
    settings = Settings(batch_size=256, pin_memory=True)
    result = probe(
        workloads.WideFeaturesDataset(), workloads.wide_model, settings, gpus="0,1", ddp=True
    )
    assert result.info["backend"] == "nccl"
    figures = result.figures
    assert_sound(figures)
    for window in figures.windows:  # both ranks trained every step of the window
        assert window.samples == 2 * window.steps * 256
    assert figures.monitor is not None and len(figures.monitor.gpus) == 2
