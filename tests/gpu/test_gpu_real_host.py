"""The host side of the real GPU paths: NVML's CPU affinity and the topology that each
rank's CPUs come from, the launch line that pins them, torch's CUDA build and pinned
memory, the online loader's meetings over NCCL, and accelerate's non-blocking copies of
pinned batches. Skipped without CUDA; run them on a GPU machine with ``pytest -m gpu``."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from ranks import start_and_join
from torch.utils.data import TensorDataset

from autotune.machine._gpus import discover
from autotune.machine._machine import detect_machine, usable_cpus
from autotune.machine._topology import read_topology
from autotune.probe._placement import Placement, split_cpus
from autotune.result._launch import torchrun_line
from autotune.settings._loader import build_loader
from autotune.settings._settings import Settings
from autotune.space._space import build_space

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

TRAIN = """import os, pathlib
rank = os.environ["LOCAL_RANK"]
pathlib.Path(f"rank{rank}.txt").write_text(str(sorted(os.sched_getaffinity(0))))
"""


def near_first_gpu() -> list[int]:
    """The CPUs this process may use that NVML names near GPU 0 (all of them if none)."""
    gpu = discover().gpus[0]
    allowed = os.sched_getaffinity(0)
    return sorted(allowed & set(gpu.cpu_affinity or allowed)) or sorted(allowed)


def test_nvml_names_the_cpus_near_each_gpu_and_torch_can_use_the_gpus() -> None:
    found = discover()
    assert found.gpus and found.torch_cuda and found.torch_problem() is None
    every = set(range(os.cpu_count() or 1))
    for gpu in found.gpus:
        if gpu.uuid is None:  # a MIG instance: NVML is not asked for it
            continue
        assert gpu.cpu_affinity, f"NVML gave no CPU affinity for {gpu.name}"
        assert set(gpu.cpu_affinity) <= every
    placement = Placement.plan(
        device="cuda",
        gpus=None,
        ranks=None,
        discovery=found,
        cpus=sorted(os.sched_getaffinity(0)),
        usable=usable_cpus(),
        topology=read_topology(),
    )
    assert placement.ranks == len(found.gpus)
    flat = [cpu for cpus in placement.cpu_sets for cpu in cpus]
    assert len(flat) == len(set(flat)) == placement.ranks * placement.rank_cpus


def test_two_ranks_near_one_gpu_get_whole_cores_of_its_cpus() -> None:
    close = near_first_gpu()
    topology = read_topology()
    cores = topology.group(close)
    threads = max(len(core) for core in cores)
    if len(cores) < 2 or any(len(core) != threads for core in cores):
        pytest.skip(f"the cores near GPU 0 are {cores}: not two or more alike")
    half = len(cores) // 2 * threads
    allowed = sorted(os.sched_getaffinity(0))
    sets = split_cpus(allowed, usable=2 * half, near=[close, close], topology=topology)
    assert [len(cpus) for cpus in sets] == [half, half]
    assert not set(sets[0]) & set(sets[1])
    for cpus in sets:
        assert set(cpus) <= set(close)
        for core in topology.group(allowed):
            assert set(core) <= set(cpus) or not set(core) & set(cpus), (core, cpus)


@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not on PATH")
def test_torchrun_starts_each_rank_on_the_cpus_near_its_gpu(tmp_path: Path) -> None:
    close = near_first_gpu()
    if len(close) < 2:
        pytest.skip("fewer than two CPUs near GPU 0")
    sets = split_cpus(close, usable=len(close), near=[close, close], topology=read_topology())
    (tmp_path / "train.py").write_text(TRAIN)
    line = torchrun_line(
        world_size=2, device_type="cuda", visible=None, threads=1, cpu_sets=sets, allocator=None
    )
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    python = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{python}:{os.environ['PATH']}", "TMPDIR": str(scratch)}
    subprocess.run(line, shell=True, cwd=tmp_path, env=env, timeout=180, check=True)
    for rank, cpus in enumerate(sets):
        assert (tmp_path / f"rank{rank}.txt").read_text() == str(list(cpus))


def test_the_space_offers_pinning_that_the_loader_keeps() -> None:
    space = build_space({}, detect_machine("cuda"), 32)
    assert True in space.domain("pin_memory").values()
    dataset = TensorDataset(torch.arange(64.0).reshape(32, 2))
    settings = Settings(batch_size=8, num_workers=1, prefetch_factor=2, pin_memory=True)
    loader = build_loader(dataset, settings.dataloader_kwargs())
    assert getattr(loader, "pin_memory", None) is True
    (batch,) = next(iter(loader))
    assert batch.is_pinned()


def _nccl_rank(rank: int, world: int, directory: str, length: int) -> None:
    """One rank of an NCCL group that never calls set_device, its own batch count."""
    import torch.distributed as dist
    from test_online import Indices

    import autotune
    from autotune.inloop._ddp import collective_device

    # Workers forked, as in a process torchrun starts (a spawned child inherits spawn).
    multiprocessing.set_start_method("fork", force=True)
    os.environ["LOCAL_RANK"] = str(rank)
    store = dist.FileStore(f"{directory}/store", world)
    dist.init_process_group("nccl", store=store, rank=rank, world_size=world)
    try:
        device = collective_device(os.environ)
        options = {"budget_fraction": None, "window_seconds": 0.0, "windows": 50}
        loader = autotune.online(
            Indices(length=length, delay=0.0005),
            batch_size=4,
            shuffle=False,
            retune=False,
            device="cuda",
            **options,
        )
        with loader:
            epochs = [[i for batch in loader for i in batch.tolist()] for _ in range(2)]
        Path(directory, f"rank{rank}.json").write_text(
            json.dumps({"device": str(device), "epochs": epochs})
        )
    finally:
        dist.destroy_process_group()


def run_nccl_ranks(tmp_path: Path, lengths: tuple[int, ...]) -> list[dict[str, object]]:
    # Spawned: CUDA may not be used in a child forked after the parent asked CUDA about
    # its devices.
    context = multiprocessing.get_context("spawn")
    world = len(lengths)
    ranks = [
        context.Process(target=_nccl_rank, args=(r, world, str(tmp_path), lengths[r]))
        for r in range(world)
    ]
    hung = start_and_join(ranks, timeout=240)
    assert not hung, f"rank(s) {hung} still waiting after 240 s"
    assert [p.exitcode for p in ranks] == [0] * world
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]


def test_the_online_loader_meets_over_nccl(tmp_path: Path) -> None:
    (result,) = run_nccl_ranks(tmp_path, (160,))
    assert result["device"] == "cuda:0"
    assert result["epochs"] == [list(range(160))] * 2


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_nccl_ranks_with_uneven_batches_meet_on_their_own_gpus(tmp_path: Path) -> None:
    # On one GPU for both, as the current device gave before, NCCL refuses the group.
    results = run_nccl_ranks(tmp_path, (160, 112))
    assert [r["device"] for r in results] == ["cuda:0", "cuda:1"]
    assert [r["epochs"] for r in results] == [[list(range(n))] * 2 for n in (160, 112)]


def test_a_tuned_trainer_copies_pinned_batches_to_the_gpu_without_blocking(
    tmp_path: Path,
) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from hf_pieces import Sentences, pad, tiny_bert
    from transformers import TrainingArguments
    from tuned import tuned_result

    from autotune.integrations import hf

    result = tuned_result(batch_size=8, num_workers=1, prefetch_factor=2, pin_memory=True)
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        **hf.training_arguments(result),
    )
    trainer = hf.TunedTrainer(
        model=tiny_bert(), args=args, train_dataset=Sentences(), data_collator=pad, result=result
    )
    assert trainer.accelerator.non_blocking is True
    loader = trainer.get_train_dataloader()
    assert loader.pin_memory is True and loader._non_blocking is True
    batch = next(iter(loader))
    assert batch["input_ids"].device.type == "cuda"
