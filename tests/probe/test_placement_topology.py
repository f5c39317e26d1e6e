"""Per-rank CPU sets from the machine's topology: whole physical cores, near each rank's
GPU, read from a sysfs tree of the test's own and an NVML stand-in; and the launch line
that pins each rank to the CPUs it was measured on."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import fake_nvml
import pytest
from fake_nvml import FakeGpu

from autotune.machine._gpus import discover
from autotune.machine._topology import CpuTopology, format_cpulist, parse_cpulist, read_topology
from autotune.probe._placement import Placement, split_cpus
from autotune.result._launch import torchrun_line

NODE0 = (0, 1, 2, 3, 8, 9, 10, 11)
NODE1 = (4, 5, 6, 7, 12, 13, 14, 15)


def two_socket_tree(root: Path) -> Path:
    """Two sockets of four cores with two hyper-threads each, numbered as Linux numbers
    them: CPUs 0-7 the first thread of each core, 8-15 their siblings; node N = socket N."""
    for cpu in range(16):
        core = cpu % 8
        topology = root / "cpu" / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "thread_siblings_list").write_text(f"{core},{core + 8}\n")
        (topology / "physical_package_id").write_text(f"{core // 4}\n")
    (root / "cpu" / "cpufreq").mkdir()  # not a CPU
    for node, cpus in enumerate((NODE0, NODE1)):
        (root / "node" / f"node{node}").mkdir(parents=True)
        (root / "node" / f"node{node}" / "cpulist").write_text(format_cpulist(cpus) + "\n")
    return root


def whole_cores(sets: tuple[tuple[int, ...], ...]) -> bool:
    """Whether every rank's CPUs hold both threads of each core they touch."""
    return all((cpu + 8) % 16 in cpus for cpus in sets for cpu in cpus)


def test_the_topology_is_read_from_sysfs(tmp_path: Path) -> None:
    topology = read_topology(two_socket_tree(tmp_path))
    assert topology.cores == ((0, 8), (1, 9), (2, 10), (3, 11), (4, 12), (5, 13), (6, 14), (7, 15))
    assert topology.nodes == (NODE0, NODE1)
    assert topology.node_of(13) == 1 and topology.node_of(99) is None
    assert read_topology(tmp_path / "absent") == CpuTopology()


def test_cpu_lists_read_and_write_as_linux_writes_them() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert format_cpulist([5, 0, 1, 2, 8]) == "0-2,5,8"
    with pytest.raises(ValueError):
        parse_cpulist("zero")


def test_ranks_get_whole_cores_not_siblings_of_each_other(tmp_path: Path) -> None:
    topology = read_topology(two_socket_tree(tmp_path))
    sets = split_cpus(range(16), usable=16, near=[None] * 4, topology=topology)
    assert sets == ((0, 1, 8, 9), (2, 3, 10, 11), (4, 5, 12, 13), (6, 7, 14, 15))
    assert whole_cores(sets)
    # Slices of the logical ids would give rank 0 the first threads of four cores and
    # rank 2 their siblings.
    assert not whole_cores(tuple(tuple(range(i * 4, i * 4 + 4)) for i in range(4)))


def test_each_gpu_rank_gets_whole_cores_on_its_gpus_node(monkeypatch, tmp_path: Path) -> None:
    # GPU 0 hangs off socket 1 and GPU 1 off socket 0: rank order is not node order.
    fake_nvml.install(
        monkeypatch,
        [
            FakeGpu(name="H100", uuid="GPU-aaaa", cpu_affinity=NODE1),
            FakeGpu(name="H100", uuid="GPU-bbbb", cpu_affinity=NODE0),
        ],
    )
    found = discover()
    assert [g.cpu_affinity for g in found.gpus] == [NODE1, NODE0]
    topology = read_topology(two_socket_tree(tmp_path))
    placement = Placement.plan(
        device=None,
        gpus=None,
        ranks=None,
        discovery=found,
        cpus=range(16),
        usable=16,
        topology=topology,
    )
    assert placement.cpu_sets == (NODE1, NODE0)
    assert placement.describe().endswith("8 CPU(s) each: 4-7,12-15 | 0-3,8-11")
    half = Placement.plan(
        device=None,
        gpus=None,
        ranks=None,
        discovery=found,
        cpus=range(16),
        usable=8,
        topology=topology,
    )
    assert half.cpu_sets == ((4, 5, 12, 13), (0, 1, 8, 9))
    assert [s.cpus for s in half.slots()] == list(half.cpu_sets)


def test_a_share_of_an_odd_count_splits_one_core_at_most(tmp_path: Path) -> None:
    topology = read_topology(two_socket_tree(tmp_path))
    sets = split_cpus(range(16), usable=6, near=[NODE0, NODE0], topology=topology)
    assert sets == ((0, 1, 8), (2, 3, 10))
    # A core each rank holds one thread of, whose sibling no other rank gets.
    split = [core for core in topology.cores for cpus in sets if len(set(core) & set(cpus)) == 1]
    assert split == [(1, 9), (3, 11)]


def test_a_rank_without_preference_leaves_the_near_cpus_to_one_with_it(tmp_path: Path) -> None:
    topology = read_topology(two_socket_tree(tmp_path))
    sets = split_cpus(range(16), usable=16, near=[None, NODE0], topology=topology)
    assert sets == (NODE1, NODE0)


def test_affinity_outside_the_allowed_cpus_is_ignored(tmp_path: Path) -> None:
    topology = read_topology(two_socket_tree(tmp_path))
    allowed = [0, 1, 2, 3, 8, 9, 10, 11]  # a container kept on socket 0
    sets = split_cpus(allowed, usable=8, near=[NODE1, NODE1], topology=topology)
    assert sets == ((0, 1, 8, 9), (2, 3, 10, 11))


def test_without_a_topology_the_cpus_split_in_order() -> None:
    sets = split_cpus([2, 3, 5, 7, 8, 9, 11], usable=6, near=[None] * 3, topology=CpuTopology())
    assert sets == ((2, 3), (5, 7), (8, 9))


def test_the_launch_line_pins_each_rank_to_its_measured_cpus(tmp_path: Path) -> None:
    line = torchrun_line(
        world_size=2,
        device_type="cuda",
        visible=None,
        threads=4,
        cpu_sets=(NODE1, NODE0),
    )
    assert "--no-python" in line and "taskset -c" in line
    assert "4-7,12-15 0-3,8-11" in line
    assert (
        torchrun_line(world_size=2, device_type="cpu", visible=None, threads=1).count("taskset")
        == 0
    )


def test_the_launch_lines_wrapper_runs_each_rank_on_its_cpus(tmp_path: Path) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    sets = ((allowed[0],), (allowed[-1],))
    (tmp_path / "train.py").write_text("import os\nprint(sorted(os.sched_getaffinity(0)))\n")
    line = torchrun_line(
        world_size=2, device_type="cpu", visible=None, threads=1, cpu_sets=sets, allocator=None
    )
    words = shlex.split(line)
    wrapper = words[words.index("--no-python") + 1 :]
    assert wrapper[:2] == ["sh", "-c"]
    python = Path(sys.executable).parent
    for rank, cpus in enumerate(sets):
        env = {**os.environ, "LOCAL_RANK": str(rank), "PATH": f"{python}:{os.environ['PATH']}"}
        done = subprocess.run(
            wrapper, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=True
        )
        assert done.stdout.strip() == str(list(cpus))


TRAIN = """import os, pathlib
rank = os.environ["LOCAL_RANK"]
pathlib.Path(f"rank{rank}.txt").write_text(str(sorted(os.sched_getaffinity(0))))
"""


@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not on PATH")
def test_torchrun_runs_the_launch_line_with_each_rank_on_its_cpus(tmp_path: Path) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    sets = ((allowed[-1],), (allowed[0],))
    (tmp_path / "train.py").write_text(TRAIN)
    line = torchrun_line(
        world_size=2, device_type="cpu", visible=None, threads=1, cpu_sets=sets, allocator=None
    )
    python = Path(sys.executable).parent
    scratch = tmp_path / "tmp"  # torchrun leaves its own folder behind there
    scratch.mkdir()
    env = {**os.environ, "PATH": f"{python}:{os.environ['PATH']}", "TMPDIR": str(scratch)}
    subprocess.run(line, shell=True, cwd=tmp_path, env=env, timeout=180, check=True)
    for rank, cpus in enumerate(sets):
        assert (tmp_path / f"rank{rank}.txt").read_text() == str(list(cpus))
