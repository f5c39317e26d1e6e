"""The suite's own leak check (conftest's ``no_leftover_files``) tells this session's
semaphores from a neighbour's: a test of another xdist process that runs meanwhile holds
semaphores of its own in /dev/shm, and they are not this test's leftovers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import SESSION_TAG, SHM, _held_by_others, _ours

HOLDS_A_QUEUE = """
import multiprocessing, sys
queue = multiprocessing.get_context("forkserver").Queue()  # its semaphores in /dev/shm
print("holding", flush=True)
sys.stdin.read()
"""


def mapped_by(pid: int) -> set[int]:
    """The inodes of the /dev/shm files process ``pid`` maps."""
    with open(f"/proc/{pid}/maps") as maps:
        fields = [line.split() for line in maps]
    return {int(f[4]) for f in fields if len(f) > 5 and f[5].startswith("/dev/shm/")}


def inode(path: os.PathLike[str]) -> int | None:
    """The inode of ``path``; None where it is gone (a neighbour's, removed meanwhile)."""
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def semaphores_held(env: dict[str, str]) -> tuple[set[str], set[str]]:
    """The /dev/shm files of a process holding a queue, started with ``env`` (not those a
    test of another xdist process makes meanwhile), and those of them that
    _held_by_others reads as another session's."""
    before = set(os.listdir(SHM))
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDS_A_QUEUE],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == "holding\n"
        inodes = mapped_by(process.pid)
        new = {
            name
            for name in set(os.listdir(SHM)) - before
            if _ours(name) and inode(SHM / name) in inodes
        }
        return new, _held_by_others(new)
    finally:
        process.communicate(timeout=60)  # stdin closed: it ends and removes them itself


@pytest.mark.skipif(not SHM.is_dir(), reason="needs /dev/shm")
def test_semaphores_of_another_session_are_not_this_test_s() -> None:
    neighbour = {k: v for k, v in os.environ.items() if k != SESSION_TAG}
    new, others = semaphores_held(neighbour)
    assert new and others == new
    new, others = semaphores_held(dict(os.environ))  # a process this session started
    assert new and others == set()
