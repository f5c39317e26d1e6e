"""The memory of a probe's process tree, watched from the search: the probe, its
loader's workers and every process they start, read in the background for the peak and
for the memory limit.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable

import psutil

PSS_SECONDS = 1.0
"""How often, at most, the memory watch reads the proportional sizes for the peak."""
PEAK_SHARE = 0.02
"""The most of one core the peak's proportional-size reads may take: a read of a tree of
many workers (about 3.5 ms per process) is spaced out until it costs no more."""
LIMIT_SHARE = 0.25
"""The most of one core the reads may take while the resident sum is over the limit (the
tree may be over it, so they come more often than the peak's)."""
TREE_SECONDS = 1.0
"""How often the memory watch lists the probe's descendants again."""


class TreeWatch:
    """Samples the memory of a process and all its descendants in the background.

    Memory is the proportional set size (shared pages split among sharers), so
    forked workers that share their parent's pages are not counted twice.

    The watch shares the CPUs with the probe it measures, so it is kept cheap: the
    tree's resident sizes (a stat read per process) every ``interval``; the
    proportional sizes (a walk of every mapping, about 3.5 ms per torch process, under
    the lock the process's own allocations need) only for the peak and when the
    resident sum is over the limit (the proportional size is never larger), each
    time no sooner than their last read's own cost allows: at most
    :data:`PEAK_SHARE` of a core for the peak (and no more often than every
    :data:`PSS_SECONDS`), :data:`LIMIT_SHARE` over the limit; the list of
    descendants every :data:`TREE_SECONDS`. Read at a fixed interval instead, the
    watch slowed the probe it measured (the runs: ``docs/decisions.md``).
    """

    def __init__(
        self,
        pid: int,
        *,
        limit: int | None,
        interval: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.peak = 0
        self.exceeded_at: int | None = None
        self._seen: dict[int, psutil.Process] = {}
        self._gone: set[int] = set()  # adopted when already ended
        try:
            self._root: psutil.Process | None = psutil.Process(pid)
        except psutil.Error:  # it ended already (a probe that failed at once): nothing to read
            self._root = None
            self._gone.add(pid)
        else:
            self._seen[pid] = self._root
        self._tree: list[psutil.Process] = [self._root] if self._root else []
        self._clock = clock
        self._tree_at: float | None = None
        self._peak_due: float | None = None
        self._over_due: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._interval = interval
        self._thread = threading.Thread(target=self._loop, name="autotune-treewatch", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def sample(self, *, force: bool = False) -> int:
        """Read the tree's memory now; returns what it read, in bytes (the proportional
        size when it was read, else the resident size). ``force``: read the proportional
        sizes whatever they cost, of the tree listed afresh (at a moment that is not
        measured)."""
        processes = self._processes(fresh=force)
        began = self._clock()
        resident = sum(_resident(process) for process in processes)
        over = self.limit is not None and resident > self.limit
        due = self._over_due if over else self._peak_due
        if not force and due is not None and began < due:
            return resident
        total = sum(_memory_of(process) for process in processes)
        cost = self._clock() - began
        self._peak_due = began + max(PSS_SECONDS, cost / PEAK_SHARE)
        self._over_due = began + cost / LIMIT_SHARE
        self.peak = max(self.peak, total)
        if self.limit is not None and total > self.limit and self.exceeded_at is None:
            self.exceeded_at = total
        return total

    def _processes(self, *, fresh: bool = False) -> list[psutil.Process]:
        """The tree, listed again every :data:`TREE_SECONDS` (reading every process's
        parent in /proc) or when ``fresh``; the root alone once it cannot be read."""
        if self._root is None:
            return []
        now = self._clock()
        if not fresh and self._tree_at is not None and now - self._tree_at < TREE_SECONDS:
            return self._tree
        self._tree_at = now
        try:
            tree = [self._root, *descendants(self._root)]
        except psutil.Error:
            return [self._root]
        with self._lock:
            for process in tree:
                self._seen.setdefault(process.pid, process)
        self._tree = tree
        return tree

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def collect(self) -> None:
        """Remember every process of the tree now (before it is ended)."""
        try:
            current = descendants(self._root) if self._root else []
        except psutil.Error:
            current = []
        with self._lock:
            for process in current:
                self._seen.setdefault(process.pid, process)

    def adopt(self, pids: Iterable[int]) -> None:
        """Count these processes in the tree (a probe's loader workers, told by the probe),
        also those already gone: what they left in shared memory is theirs."""
        with self._lock:
            for pid in pids:
                if pid in self._seen or pid in self._gone:
                    continue
                try:
                    self._seen[pid] = psutil.Process(pid)
                except psutil.Error:
                    self._gone.add(pid)

    @property
    def pids(self) -> list[int]:
        """Every process of the tree ever seen or adopted."""
        with self._lock:
            return [*self._seen, *self._gone]

    def kill_all(self) -> None:
        """SIGKILL every process of the tree ever seen that is still alive."""
        self.collect()
        with self._lock:
            processes = list(self._seen.values())
        for process in processes:
            with contextlib.suppress(psutil.Error):
                process.kill()  # psutil checks the pid was not reused


_KERNEL_CHILDREN = os.path.exists(f"/proc/self/task/{os.getpid()}/children")
"""Whether the kernel lists each thread's children (``/proc/PID/task/TID/children``)."""


def descendants(root: psutil.Process) -> list[psutil.Process]:
    """Every descendant of ``root`` that can still be read, as psutil's
    ``children(recursive=True)`` finds them.

    Read from the kernel's list of each thread's children, a read per process of the
    tree: psutil's walk reads the parent of every process on the machine, a cost that
    grows with the machine's other processes and is taken from the probe being watched.
    psutil's walk where the kernel keeps no such lists.

    Raises:
        psutil.Error: ``root`` cannot be read (psutil's walk only).
    """
    if not _KERNEL_CHILDREN:
        return list(root.children(recursive=True))
    found: list[psutil.Process] = []
    seen = {root.pid}
    pending = _child_pids(root.pid)
    while pending:
        pid = pending.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            found.append(psutil.Process(pid))
        except psutil.Error:  # ended since it was listed: nor are its children read
            continue
        pending.extend(_child_pids(pid))
    return found


def _child_pids(pid: int) -> list[int]:
    """The children of every thread of ``pid``; none once it has ended."""
    children: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return children
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as listing:
                children.extend(int(child) for child in listing.read().split())
        except OSError:  # the thread or the process ended meanwhile
            continue
    return children


def _resident(process: psutil.Process) -> int:
    try:
        return int(process.memory_info().rss)
    except psutil.Error:
        return 0


def _memory_of(process: psutil.Process) -> int:
    try:
        info = process.memory_full_info()
        return int(getattr(info, "pss", info.rss))
    except psutil.AccessDenied:
        try:
            return int(process.memory_info().rss)
        except psutil.Error:
            return 0
    except psutil.Error:
        return 0
