"""How to launch the tuned DDP training: the torchrun line, the code, the learning rate.

Pure functions of the chosen values, so what the export says is testable alone.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from autotune.machine import format_cpulist
from autotune.settings import (
    AllocatorState,
    Settings,
    allocator_lines,
    calls_autotune,
    launch_words,
)

SCRIPT = "train.py"
"""Stands for the user's training script in the torchrun line."""


def torchrun_line(
    *,
    world_size: int,
    device_type: str,
    visible: str | None,
    threads: int,
    allocator: AllocatorState | None = "fixed",
    script: str = SCRIPT,
    cpu_sets: Sequence[Sequence[int]] = (),
) -> str:
    """The command that starts ``world_size`` ranks on this node.

    With ``cpu_sets`` each rank runs pinned to its own, as its probes ran: torchrun
    starts a shell per rank that picks its set by ``LOCAL_RANK`` and execs the script
    under ``taskset`` (torchrun's ``--numa-binding`` binds to whole NUMA nodes or an
    even split of them, not to the sets measured).

    Args:
        world_size: ranks (processes) on the node.
        device_type: "cuda" or "cpu".
        visible: CUDA_VISIBLE_DEVICES for the selected GPUs; None: leave it as it is.
        threads: torch's intra-op threads per rank (torchrun would otherwise set 1).
        allocator: the C allocator's rule the configs were measured under
            (:mod:`autotune.settings._allocator`): "fixed" puts glibc malloc's fixed
            thresholds in the line.
        script: the training script.
        cpu_sets: each rank's CPUs, rank order; empty: no pinning.
    """
    words = []
    if device_type == "cuda" and visible is not None:
        words.append(f"CUDA_VISIBLE_DEVICES={visible}")
    words.append(f"OMP_NUM_THREADS={threads}")
    words += launch_words(allocator)
    words += ["torchrun", "--standalone", f"--nproc-per-node={world_size}"]
    if len(cpu_sets) == world_size > 1:
        lists = " ".join(format_cpulist(cpus) for cpus in cpu_sets)
        pinned = f'set -- {lists}; shift "$LOCAL_RANK"; exec taskset -c "$1" python {script}'
        words += ["--no-python", "sh", "-c", shlex.quote(pinned)]
    else:
        words.append(script)
    return " ".join(words)


def accumulation_steps(user_batch: int, step_batch: int) -> int:
    """Batches to accumulate per optimizer step so that ``step_batch`` samples per batch
    (all ranks together) make the user's batch: ``user_batch / step_batch`` when that is
    a whole number above 1; otherwise 1 (no whole count keeps the user's batch)."""
    if step_batch < user_batch and user_batch % step_batch == 0:
        return user_batch // step_batch
    return 1


def lr_note(
    *, user_batch_size: int, per_rank_batch_size: int, world_size: int, accumulation: int = 1
) -> str | None:
    """What the global batch means for the learning rate, when it differs from the user's.

    The global batch is per-rank batch x ranks x accumulation steps. The linear scaling
    rule (Goyal et al., 2017, "Accurate, Large Minibatch SGD"): when the batch grows k
    times, multiply the learning rate by k, with a warm-up.
    """
    global_batch = per_rank_batch_size * world_size * accumulation
    if global_batch == user_batch_size:
        return None
    ratio = global_batch / user_batch_size
    parts = [f"{world_size} ranks"] if world_size > 1 else []
    parts.append(f"{per_rank_batch_size}" if world_size > 1 else f"batch {per_rank_batch_size}")
    if accumulation > 1:
        parts.append(f"{accumulation} accumulation steps")
    what = (
        f"the global batch is {global_batch} ({' x '.join(parts)})"
        if len(parts) > 1
        else f"the batch is {global_batch}"
    )
    note = (
        f"{what}, {ratio:g}x the {user_batch_size} you train with: by the linear scaling rule, "
        f"multiply the learning rate by {ratio:g} (with a few epochs of warm-up when it grows)"
    )
    if world_size > 1 and user_batch_size % world_size == 0:
        note += (
            f", or keep the global batch at {user_batch_size} with a per-rank batch of "
            f"{user_batch_size // world_size} (not measured)"
        )
    return note + "."


def ddp_code(
    *,
    settings: Settings,
    kwargs: dict[str, Any],
    backend: str,
    device_type: str,
    world_size: int,
    launch: str,
    allocator: AllocatorState | None = "fixed",
    dataset: str = "dataset",
) -> str:
    """Python source for one rank: process group, sampler, tuned loader, DDP model
    (``allocator`` as for :func:`torchrun_line`)."""
    on_gpu = device_type == "cuda"
    lines = [
        "import os",
        "",
        *(["import autotune"] if calls_autotune(allocator) else []),
        *(["import threadpoolctl"] if settings.worker_init_code() else []),
        "import torch",
        "import torch.distributed as dist",
        "from torch.nn.parallel import DistributedDataParallel",
        "from torch.utils.data.distributed import DistributedSampler",
        "",
        f"# launch: {launch}",
        *allocator_lines(allocator),
        f'dist.init_process_group("{backend}")',
        'local_rank = int(os.environ["LOCAL_RANK"])',
    ]
    lines += settings.worker_init_code()
    if on_gpu:
        lines.append("torch.cuda.set_device(local_rank)")
    if settings.threads is not None:
        lines.append(f"torch.set_num_threads({settings.threads})")
    lines.append(
        f"sampler = DistributedSampler({dataset})  # call sampler.set_epoch(epoch) per epoch"
    )
    lines.append("loader = torch.utils.data.DataLoader(")
    lines.append(f"    {dataset},")
    lines.append("    sampler=sampler,")
    global_batch = settings.batch_size * world_size
    lines += settings.loader_keyword_lines(
        {"batch_size": f"  # per rank; the global batch is {global_batch}"}
    )
    lines.append(")")
    lines.append("model = DistributedDataParallel(")
    lines.append("    model.to(local_rank)," if on_gpu else "    model,")
    if on_gpu:
        lines.append("    device_ids=[local_rank],")
    for name, value in sorted(kwargs.items()):
        lines.append(f"    {name}={value!r},")
    lines.append(")")
    lines += settings.training_notes(device_type)
    return "\n".join(lines) + "\n"
