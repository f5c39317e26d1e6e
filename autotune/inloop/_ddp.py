"""Online tuning under DDP: each rank climbs within its share of the CPUs, and the
ranks agree on one config.

Collectives must be called by every rank at the same step, or training hangs. Ranks
need not have as many batches (a sampler of the user's, an IterableDataset, or DDP's
``join`` for uneven inputs), so they meet at the start of each epoch, where all of them
are, and agree there how many batches every rank has this epoch: the least of their
counts (none when a rank's count is unknown). Within that count they meet every
:data:`SYNC_STEPS` steps of a climb: a climb ends for all when any rank's budget is
spent or every rank's climb has finished, and then they take rank 0's choice.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

import torch
import torch.distributed as dist

from autotune.machine import usable_cpus
from autotune.settings import Settings

SYNC_STEPS = 8
"""Steps between two meetings of the ranks during a climb (one tiny all-reduce)."""


@dataclasses.dataclass(frozen=True)
class Ranks:
    """This process's place among the ranks of an initialised process group."""

    rank: int
    world: int
    local_world: int
    """Ranks on this node, which share its CPUs (torchrun's LOCAL_WORLD_SIZE)."""

    @classmethod
    def detect(cls) -> Ranks | None:
        """The ranks, when ``torch.distributed`` is initialised; None otherwise."""
        if not (dist.is_available() and dist.is_initialized()):
            return None
        world = dist.get_world_size()
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        return cls(rank=dist.get_rank(), world=world, local_world=max(1, local))

    def cpu_share(self) -> int:
        """The CPUs of this node divided among its ranks: what one rank's workers may use."""
        return max(1, usable_cpus() // self.local_world)

    def ends(self, spent: bool, finished: bool) -> bool:
        """Whether the climb ends now, for every rank (a collective: all ranks call it).

        Args:
            spent: this rank's budget is spent.
            finished: this rank's climb has no neighbour left to try.
        """
        flags = torch.tensor([int(spent), int(not finished)], dtype=torch.int64)
        flags = flags.to(self._device())
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        return bool(flags[0].item() == 1 or flags[1].item() == 0)

    def epoch_starts(self, batches: int | None, spent: bool, finished: bool) -> tuple[int, bool]:
        """The epoch's agreed batch count, and whether the climb ends now (a collective:
        all ranks call it as their epoch starts, while climbing).

        Args:
            batches: this rank's batches this epoch; None: unknown (an IterableDataset).
            spent: this rank's budget is spent.
            finished: this rank's climb has no neighbour left to try.

        Returns:
            The least of the ranks' batch counts (0 when any is unknown), and whether
            any rank's budget is spent or every rank's climb has finished.
        """
        values = [batches if batches is not None else 0, int(not spent), int(finished)]
        flags = torch.tensor(values, dtype=torch.int64).to(self._device())
        dist.all_reduce(flags, op=dist.ReduceOp.MIN)
        return int(flags[0].item()), bool(flags[1].item() == 0 or flags[2].item() == 1)

    def agree(self, settings: Settings) -> Settings:
        """Rank 0's choice, on every rank (a collective)."""
        payload: list[object] = [settings.to_dict() if self.rank == 0 else None]
        dist.broadcast_object_list(payload, src=0, device=self._device())
        chosen = payload[0]
        assert isinstance(chosen, dict)  # rank 0 always sends a dict
        return Settings.from_dict(chosen)

    @staticmethod
    def _device() -> torch.device:
        return collective_device(os.environ)


def collective_device(environ: Mapping[str, str]) -> torch.device:
    """Where this rank's meeting tensors go: the CPU for gloo (and the rest); for NCCL,
    which moves tensors between GPUs only, this rank's GPU.

    That is the current device when the user chose one (``torch.cuda.set_device``), else
    ``cuda:LOCAL_RANK`` (modulo the visible GPUs: one visible per rank is ``cuda:0``).
    The current device alone is ``cuda:0`` on every rank that never called
    ``set_device``, and NCCL then runs every rank's meeting on one GPU.
    """
    if dist.get_backend() != "nccl":
        return torch.device("cpu")
    current = torch.cuda.current_device()
    local = environ.get("LOCAL_RANK", "")
    if current != 0 or not local.isdigit():
        return torch.device("cuda", current)
    return torch.device("cuda", int(local) % max(1, torch.cuda.device_count()))
