"""Where probes run: one slot per DDP rank of the node, each its GPU and its CPU share.

Settings tuned on one device are wrong on eight: each of eight ranks gets an
eighth of the CPUs for its DataLoader workers. So a search for N ranks splits
the CPUs this process may use into N disjoint sets, and every probe runs
pinned (CPU affinity) to one set and, on GPUs, to one GPU: a trial measures
what one rank will have. Up to N trials run at once, one per slot, as N ranks
would. The DDP probe then runs all N ranks together.

A set is made of whole physical cores where the share allows (a rank whose CPUs
are hyper-thread siblings of another rank's shares their cores), taken first from
the CPUs NVML names near the rank's GPU (its NUMA node).
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from autotune._errors import ConfigError
from autotune.machine import (
    FLAT,
    CpuTopology,
    Discovery,
    Gpu,
    GpuSpec,
    format_cpulist,
    parse_spec,
    select,
)
from autotune.probe._protocol import DdpSpec, ProbeRequest, RankPlace

_VISIBLE = "CUDA_VISIBLE_DEVICES"
PLACEMENT = "autotune.placement"
"""Trial attribute: the slot a trial ran in, the CPUs its probe saw (``cpus_seen``), and
when it held the slot (``held``: epoch seconds, from and until)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Slot:
    """One rank's share of the node: where one probe at a time runs."""

    index: int
    device: str
    """The device as the probe sees it: "cuda:0" (its GPU is the only one visible), "cpu"."""
    cpus: tuple[int, ...] | None
    """Its CPU affinity; None: every CPU of the search (a single slot)."""
    gpu: Gpu | None = None
    ranks: int = 1
    """The ranks the node trains with: with several, a probe here loads this rank's part
    of each epoch."""

    def apply(self, request: ProbeRequest) -> ProbeRequest:
        """``request`` pinned to this slot."""
        env = dict(request.env)
        if self.gpu is not None:
            env[_VISIBLE] = self.gpu.pin
        return dataclasses.replace(
            request,
            device=self.device,
            cpus=self.cpus,
            shard=(self.ranks, self.index) if self.ranks > 1 else None,
            env=tuple(env.items()),
            monitor_gpus=(self.gpu.pin,) if self.gpu else (),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "slot": self.index,
            "device": self.device,
            "cpus": list(self.cpus) if self.cpus is not None else None,
            "gpu": self.gpu.to_dict() if self.gpu else None,
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class Placement:
    """The devices of a search: its ranks, their GPUs and their CPU shares."""

    device_type: str
    """"cuda", "cpu", or another torch device type (one rank)."""
    ranks: int
    """DDP ranks on this node: one per selected GPU; on CPU, as asked (default 1)."""
    cpu_sets: tuple[tuple[int, ...], ...]
    """Each rank's CPUs (disjoint)."""
    gpus: tuple[Gpu, ...] = ()
    """The selected GPUs, rank order."""
    device: str | None = None
    """The device as the workload named it, for a single rank (e.g. "mps")."""
    visible: str | None = None
    """CUDA_VISIBLE_DEVICES for the training launch; None: leave the environment's."""

    @property
    def rank_cpus(self) -> int:
        """CPUs of one rank."""
        return len(self.cpu_sets[0])

    @property
    def backend(self) -> str:
        """The process group backend of a DDP run here."""
        return "nccl" if self.device_type == "cuda" else "gloo"

    def slots(self) -> tuple[Slot, ...]:
        """One slot per rank; a single rank keeps every CPU (no pinning)."""
        slots = []
        for index, cpus in enumerate(self.cpu_sets):
            gpu = self.gpus[index] if self.gpus else None
            device = "cuda:0" if gpu else (self.device or self.device_type)
            pinned = cpus if self.ranks > 1 else None
            slots.append(Slot(index=index, device=device, cpus=pinned, gpu=gpu, ranks=self.ranks))
        return tuple(slots)

    def ddp_request(self, template: ProbeRequest, kwargs: dict[str, Any]) -> ProbeRequest:
        """A DDP probe of ``template``'s settings across every rank (its memory limit is
        the template's, one trial's, times the ranks)."""
        env = dict(template.env)
        if self.gpus:
            env[_VISIBLE] = ",".join(g.pin for g in self.gpus)
        ranks = tuple(
            RankPlace(device=f"cuda:{rank}" if self.gpus else "cpu", cpus=cpus)
            for rank, cpus in enumerate(self.cpu_sets)
        )
        limit = template.memory_limit
        return dataclasses.replace(
            template,
            mode="ddp",
            memory_limit=limit * self.ranks if limit is not None else None,
            device=self.device_type,
            cpus=tuple(c for cpus in self.cpu_sets for c in cpus),
            env=tuple(env.items()),
            monitor_gpus=tuple(g.pin for g in self.gpus),
            ddp=DdpSpec(backend=self.backend, ranks=ranks, kwargs=tuple(sorted(kwargs.items()))),
        )

    def describe(self) -> str:
        """One line: ranks, devices, CPUs each (and which, with several ranks)."""
        if self.gpus:
            devices = "GPU " + ", ".join(f"{g.ordinal} ({g.name})" for g in self.gpus)
        else:
            devices = self.device or self.device_type
        rank_word = "rank" if self.ranks == 1 else "ranks"
        line = f"{self.ranks} {rank_word} on {devices}, {self.rank_cpus} CPU(s) each"
        if self.ranks > 1:
            line += ": " + " | ".join(format_cpulist(cpus) for cpus in self.cpu_sets)
        return line

    def to_dict(self) -> dict[str, Any]:
        """As JSON types, for the study (a study continues only with the same placement)."""
        return {
            "device_type": self.device_type,
            "ranks": self.ranks,
            "rank_cpus": self.rank_cpus,
            "gpus": [g.name for g in self.gpus],
            "visible": self.visible,
        }

    @classmethod
    def plan(
        cls,
        *,
        device: str | None,
        gpus: GpuSpec,
        ranks: int | None,
        discovery: Discovery,
        cpus: Sequence[int],
        usable: int,
        topology: CpuTopology = FLAT,
    ) -> Placement:
        """The placement for a search.

        Args:
            device: the workload's device ("cuda", "cuda:1", "cpu"...); None: GPUs when visible.
            gpus: which visible GPUs (see :func:`autotune.machine._gpus.parse_spec`).
            ranks: DDP ranks on CPU; on GPUs one per selected GPU (None, or the same number).
            discovery: the visible GPUs.
            cpus: the CPUs this process may run on (its affinity).
            usable: how many of them it may keep busy (a cgroup quota may allow fewer).
            topology: the CPUs' cores and NUMA nodes
                (:func:`autotune.machine._topology.read_topology`); the default knows none,
                and splits the CPUs in order.

        Raises:
            ConfigError: a selection that contradicts the device, names an invisible GPU,
                or more ranks than CPUs.
        """
        device_type = device.split(":")[0] if device else None
        if ranks is not None and (
            isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1
        ):
            raise ConfigError(f"ranks is {ranks!r}; expected a whole number >= 1.")
        if device_type not in (None, "cuda", "cpu"):
            return _other_device(str(device), gpus, ranks, cpus)
        selected = _select(device, device_type, gpus, discovery)
        count = _rank_count(selected, ranks)
        if usable < count:
            raise ConfigError(
                f"{count} ranks need a CPU each at least, but this process may use {usable}."
            )
        near = [g.cpu_affinity for g in selected] if selected else [None] * count
        visible = None
        if selected and (discovery.visible_env is not None or len(selected) < len(discovery.gpus)):
            visible = ",".join(g.token for g in selected)
        return Placement(
            device_type="cuda" if selected else "cpu",
            ranks=count,
            cpu_sets=split_cpus(cpus, usable=usable, near=near, topology=topology),
            gpus=selected,
            visible=visible,
        )


def _other_device(device: str, gpus: GpuSpec, ranks: int | None, cpus: Sequence[int]) -> Placement:
    """One rank on a device other than CUDA GPUs and CPUs ("mps"), with every CPU.

    Raises:
        ConfigError: several ranks, or GPUs selected, for it.
    """
    if (ranks or 1) > 1 or parse_spec(gpus):
        raise ConfigError(
            f"device is {device!r}; several ranks and gpus apply to CUDA GPUs and CPUs only."
        )
    return Placement(
        device_type=device.split(":")[0], ranks=1, cpu_sets=(tuple(cpus),), device=device
    )


def _rank_count(selected: Sequence[Gpu], ranks: int | None) -> int:
    """The ranks of the node: one per selected GPU, else as asked (default 1).

    Raises:
        ConfigError: ranks asked that differ from the GPUs selected.
    """
    if not selected:
        return ranks or 1
    if ranks is not None and ranks != len(selected):
        raise ConfigError(
            f"ranks is {ranks}, but {len(selected)} GPU(s) are selected; on GPUs each rank "
            "has its own GPU. Select GPUs with gpus (e.g. '0,1') instead."
        )
    return len(selected)


def split_cpus(
    cpus: Iterable[int],
    *,
    usable: int,
    near: Sequence[Sequence[int] | None],
    topology: CpuTopology,
) -> tuple[tuple[int, ...], ...]:
    """Disjoint CPU sets of ``usable // len(near)`` CPUs each, one per rank.

    Each rank takes, from the CPUs near its GPU first (``near``; None: no preference),
    then from the others, in the order of :data:`_PASSES`: whole cores that fit its
    share, then a part of an untouched core, and only then what is left of a core
    another rank holds part of. Ranks with fewer near CPUs choose first, so a rank
    with no preference does not take theirs.

    Args:
        cpus: the CPUs this process may run on.
        usable: how many of them it may keep busy.
        near: per rank, the CPUs near its GPU.
        topology: which CPUs are one core's hyper-threads.
    """
    allowed = set(cpus)
    share = usable // len(near)
    pool = _Cores(free=topology.group(allowed))
    close = [set(n) & allowed if n else set() for n in near]
    sets: dict[int, tuple[int, ...]] = {}
    for rank in sorted(range(len(near)), key=lambda r: len(close[r]) or len(allowed) + 1):
        taken: list[int] = []
        for group in (close[rank] or allowed, allowed):
            for shared, whole in _PASSES:
                taken += pool.take(share - len(taken), group, shared=shared, whole=whole)
        sets[rank] = tuple(sorted(taken))
    return tuple(sets[rank] for rank in range(len(near)))


_PASSES = ((False, True), (False, False), (True, True), (True, False))
"""(shared, whole) in the order a rank takes cores: whole untouched ones, part of an
untouched one, whole leftovers of cores other ranks hold part of, part of a leftover."""


@dataclasses.dataclass
class _Cores:
    """The cores no rank has taken yet, and which of them are leftovers of a split."""

    free: list[tuple[int, ...]]
    touched: set[tuple[int, ...]] = dataclasses.field(default_factory=set)

    def take(self, need: int, group: set[int], *, shared: bool, whole: bool) -> list[int]:
        """Up to ``need`` CPUs of cores within ``group``: leftovers (``shared``) or
        untouched ones; whole cores only (``whole``), or the first that has any."""
        taken: list[int] = []
        for core in list(self.free):
            left = need - len(taken)
            if not left:
                break
            if (core in self.touched) != shared or not set(core) <= group:
                continue
            if whole and len(core) > left:
                continue
            self.free.remove(core)
            taken += core[:left]
            if len(core) > left:
                rest = core[left:]
                self.free.append(rest)
                self.touched.add(rest)
        return taken


def _select(
    device: str | None, device_type: str | None, gpus: GpuSpec, discovery: Discovery
) -> tuple[Gpu, ...]:
    numbers = parse_spec(gpus)
    if device_type == "cpu":
        if numbers:
            raise ConfigError(
                f"device is 'cpu' but gpus is {gpus!r}; drop one of them (gpus='none' is CPU)."
            )
        return ()
    if device_type == "cuda":
        if ":" in str(device) and numbers is None:
            index = str(device).split(":", 1)[1]
            gpus = index if index.isdigit() else gpus
        if numbers == ():
            raise ConfigError(f"device is {device!r} but gpus is {gpus!r}; drop one of them.")
        if not discovery.gpus:
            raise ConfigError(f"device is {device!r}, but {discovery.describe()}.")
    selected = select(gpus, discovery)
    problem = discovery.torch_problem()
    if selected and problem:
        raise ConfigError(problem)
    return selected


class SlotPool:
    """Hands out free slots to concurrent trials (one trial per slot at a time)."""

    def __init__(self, slots: Sequence[Slot]) -> None:
        self._free: queue.Queue[Slot] = queue.Queue()
        for slot in slots:
            self._free.put(slot)

    @contextlib.contextmanager
    def acquire(self) -> Iterator[Slot]:
        """A free slot for the duration of the block."""
        slot = self._free.get()
        try:
            yield slot
        finally:
            self._free.put(slot)
