"""Online tuning under DDP: each rank climbs within its share of the CPUs, and the
ranks agree on one config.

Collectives must be called by every rank at the same step, or training hangs. Ranks
step in lockstep (DDP's gradient all-reduce sees to it, and a DistributedSampler gives
each rank as many batches), so the ranks meet every :data:`SYNC_STEPS` steps of a
climb, whatever each has measured: a climb ends for all when any rank's budget is
spent or every rank's climb has finished, and then they take rank 0's choice.
"""

from __future__ import annotations

import dataclasses
import os

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

    def agree(self, settings: Settings) -> Settings:
        """Rank 0's choice, on every rank (a collective)."""
        payload: list[object] = [settings.to_dict() if self.rank == 0 else None]
        dist.broadcast_object_list(payload, src=0, device=self._device())
        chosen = payload[0]
        assert isinstance(chosen, dict)  # rank 0 always sends a dict
        return Settings.from_dict(chosen)

    @staticmethod
    def _device() -> torch.device:
        # NCCL moves tensors between GPUs only; gloo (and the rest) between CPUs.
        if dist.get_backend() == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
