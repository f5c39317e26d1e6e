"""The memory watch lists a probe's tree from the tree itself, not from every process
on the machine, and finds the same processes either way."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from autotune.probe import _memory_watch

_TREE = """
import subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(grandchild.pid, flush=True)
time.sleep(60)
"""


@pytest.fixture
def tree() -> Iterator[tuple[psutil.Process, int]]:
    """A process with a child of its own; the child's pid."""
    child = subprocess.Popen([sys.executable, "-c", _TREE], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    grandchild = int(child.stdout.readline())
    try:
        yield psutil.Process(child.pid), grandchild
    finally:
        with contextlib.suppress(psutil.Error):
            psutil.Process(grandchild).kill()
        child.kill()
        child.wait()
        child.stdout.close()


def test_the_kernels_lists_of_children_find_what_psutils_walk_finds(
    tree: tuple[psutil.Process, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, grandchild = tree
    expected = {p.pid for p in root.children(recursive=True)}
    assert expected == {grandchild}

    def machine_wide(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("read every process of the machine")

    # The tree is read where the kernel lists children: psutil's walk is not used.
    monkeypatch.setattr(psutil.Process, "children", machine_wide)
    monkeypatch.setattr(psutil, "process_iter", machine_wide)
    monkeypatch.setattr(psutil, "pids", machine_wide)
    if not _memory_watch._KERNEL_CHILDREN:
        pytest.skip("this kernel keeps no per-thread lists of children")
    assert {p.pid for p in _memory_watch.descendants(root)} == expected
    watch = _memory_watch.TreeWatch(root.pid, limit=None, interval=3600)
    try:
        assert {p.pid for p in watch._processes(fresh=True)} == {root.pid, grandchild}
    finally:
        watch.stop()


def test_without_the_kernels_lists_the_watch_walks_with_psutil(
    tree: tuple[psutil.Process, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, grandchild = tree
    monkeypatch.setattr(_memory_watch, "_KERNEL_CHILDREN", False)
    assert {p.pid for p in _memory_watch.descendants(root)} == {grandchild}
