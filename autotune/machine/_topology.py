"""The CPUs' topology: which logical CPUs are hyper-thread siblings of one physical core,
and which NUMA node each belongs to, read from Linux's sysfs.

Two ranks that share a physical core, or a rank whose CPUs sit on another NUMA node
than its GPU, measure and train slower than the CPU count says; the placement needs
the topology to avoid both. The sysfs root is an argument, so tests read a tree of
their own.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

SYSFS = Path("/sys/devices/system")
_NUMBERED = re.compile(r"^(cpu|node)(\d+)$")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CpuTopology:
    """Physical cores and NUMA nodes of the machine's logical CPUs."""

    cores: tuple[tuple[int, ...], ...] = ()
    """Each physical core's logical CPUs (its hyper-thread siblings), in package order."""
    nodes: tuple[tuple[int, ...], ...] = ()
    """Each NUMA node's logical CPUs; empty when the machine reports none."""

    def group(self, cpus: Iterable[int]) -> list[tuple[int, ...]]:
        """``cpus`` grouped by physical core, in the order of :attr:`cores` (node by node);
        a CPU the topology does not know is a core of its own, after the known ones."""
        wanted = set(cpus)
        grouped = []
        for core in self.cores:
            members = tuple(sorted(c for c in core if c in wanted))
            if members:
                grouped.append(members)
                wanted.difference_update(members)
        grouped += [(cpu,) for cpu in sorted(wanted)]
        return grouped

    def node_of(self, cpu: int) -> int | None:
        """The NUMA node of ``cpu``; None when unknown."""
        for index, members in enumerate(self.nodes):
            if cpu in members:
                return index
        return None


FLAT = CpuTopology()
"""No topology known: every CPU is a core of its own, on no known node."""


def read_topology(root: Path = SYSFS) -> CpuTopology:
    """The topology that ``root`` (Linux's ``/sys/devices/system``) describes.

    Cores come from each CPU's ``topology/thread_siblings_list``, ordered by
    ``physical_package_id``; nodes from ``node/nodeN/cpulist``. What cannot be read is
    left out (a machine without sysfs gives :data:`FLAT`), so the placement falls back
    to counting CPUs.
    """
    cores: dict[tuple[int, ...], int] = {}
    for _, directory in _numbered(root / "cpu", "cpu"):
        siblings = _read_list(directory / "topology" / "thread_siblings_list")
        if not siblings:
            continue
        package = _read_int(directory / "topology" / "physical_package_id")
        cores.setdefault(tuple(sorted(siblings)), package if package is not None else 0)
    nodes = [
        tuple(sorted(_read_list(directory / "cpulist")))
        for _, directory in _numbered(root / "node", "node")
    ]
    ordered = sorted(cores, key=lambda core: (cores[core], core[0]))
    return CpuTopology(cores=tuple(ordered), nodes=tuple(n for n in nodes if n))


def _numbered(directory: Path, prefix: str) -> list[tuple[int, Path]]:
    try:
        entries = list(directory.iterdir())
    except OSError:
        return []
    found = []
    for entry in entries:
        match = _NUMBERED.match(entry.name)
        if match and match.group(1) == prefix:
            found.append((int(match.group(2)), entry))
    return sorted(found)


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _read_list(path: Path) -> list[int]:
    try:
        return parse_cpulist(path.read_text())
    except (OSError, ValueError):
        return []


def parse_cpulist(text: str) -> list[int]:
    """Linux's CPU list format: ``"0-3,8,10-11"`` -> ``[0, 1, 2, 3, 8, 10, 11]``.

    Raises:
        ValueError: text that is not such a list.
    """
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus += range(int(low), int(high or low) + 1)
    return cpus


def format_cpulist(cpus: Sequence[int]) -> str:
    """The inverse of :func:`parse_cpulist`, runs collapsed: ``[0, 1, 2, 5]`` -> ``"0-2,5"``
    (what ``taskset -c`` and ``numactl --physcpubind`` take)."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{low}" if low == high else f"{low}-{high}" for low, high in runs)
