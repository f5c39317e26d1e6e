"""Workloads with known behaviour, for tests. Module level, so probes can unpickle them."""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import time
from typing import Any

import psutil
import torch
from torch import nn
from torch.utils.data import Dataset, IterableDataset

FEATURES = 8
CLASSES = 3


class SleepyDataset(Dataset):
    """Each item sleeps ``delay`` seconds: a known per-item cost that leaves the CPU free."""

    def __init__(self, length: int = 256, delay: float = 0.0) -> None:
        self.length = length
        self.delay = delay

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self.delay:
            time.sleep(self.delay)
        generator = torch.Generator().manual_seed(index)
        return torch.randn(FEATURES, generator=generator), index % CLASSES


class SleepyStream(IterableDataset):
    """An iterable dataset of ``length`` items."""

    def __init__(self, length: int = 256) -> None:
        self.length = length

    def __iter__(self):
        for index in range(self.length):
            yield torch.full((FEATURES,), float(index)), index % CLASSES


class RaisingDataset(SleepyDataset):
    """Raises on every index divisible by ``every``."""

    def __init__(self, every: int = 1, length: int = 256) -> None:
        super().__init__(length)
        self.every = every

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if index % self.every == 0:
            raise ValueError(f"corrupt record {index}")
        return super().__getitem__(index)


class _CountingDataset(SleepyDataset):
    """Counts the items this process has read; ``past_limit()`` is true once more than
    ``after`` were."""

    def __init__(self, after: int) -> None:
        super().__init__(256)
        self.after = after
        self.read = 0

    def past_limit(self) -> bool:
        self.read += 1
        return self.read > self.after


class FailingAfterDataset(_CountingDataset):
    """Raises once ``after`` items have been read by this process (passes a preflight)."""

    def __init__(self, after: int = 8) -> None:
        super().__init__(after)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self.past_limit():
            raise ValueError(f"corrupt record {index}")
        return super().__getitem__(index)


class HangingDataset(_CountingDataset):
    """Hangs forever once ``after`` items have been read by this process."""

    def __init__(self, after: int = 0) -> None:
        super().__init__(after)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self.past_limit():
            time.sleep(3600)
        return super().__getitem__(index)


class SuicidalDataset(SleepyDataset):
    """Kills the process that reads it (a DataLoader worker, or the probe itself)."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        os.kill(os.getpid(), signal.SIGKILL)
        return super().__getitem__(index)


class HungryDataset(SleepyDataset):
    """Each item keeps a reference to ``mib`` MiB of fresh memory."""

    def __init__(self, mib: int = 64) -> None:
        super().__init__(256)
        self.mib = mib
        self.hoard: list[bytearray] = []

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        self.hoard.append(bytearray(os.urandom(1)) * (self.mib * 2**20))
        return super().__getitem__(index)


class BigBatchOOM(nn.Module):
    """A linear model that raises CUDA's out-of-memory error above a batch size."""

    def __init__(self, limit: int = 8) -> None:
        super().__init__()
        self.limit = limit
        self.linear = nn.Linear(FEATURES, CLASSES)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if inputs.shape[0] > self.limit:
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {inputs.shape[0]} MiB (simulated)"
            )
        return self.linear(inputs)


def linear_model() -> nn.Module:
    return nn.Linear(FEATURES, CLASSES)


def sleepy_dataset() -> Dataset:
    return SleepyDataset(length=256, delay=0.002)


def waiting_dataset() -> Dataset:
    """Items that wait 5 ms each: the loading's own CPU (collating, handing the batches
    over) stays small beside the wait, so more workers raise the rate even on a loaded
    machine."""
    return SleepyDataset(length=256, delay=0.005)


def stream_dataset() -> IterableDataset:
    return SleepyStream()


TWO_SEARCHES_STUDY = "AUTOTUNE_TEST_TWO_SEARCHES_STUDY"
"""The study two searches share, for :class:`TwoSearchesDataset` (unset: it waits for none)."""
_OWNER = "autotune.owner"
"""The trial attribute that names the search running it (``autotune.study.OWNER``)."""


_ENGINES: dict[str, Any] = {}


def _database_owners(url: str) -> set[int] | None:
    """:func:`_owners` of a study in a database server."""
    import json

    import sqlalchemy

    # One engine per process: a DataLoader worker forked from a probe must not read on the
    # probe's pooled connection, whose socket its sibling workers share.
    key = f"{os.getpid()} {url}"
    engine = _ENGINES.get(key)
    if engine is None:
        engine = _ENGINES[key] = sqlalchemy.create_engine(
            url.replace("postgresql://", "postgresql+psycopg://")
        )
    query = sqlalchemy.text("SELECT value_json FROM trial_user_attributes WHERE key = :key")
    try:
        with engine.connect() as connection:
            rows = connection.execute(query, {"key": _OWNER}).fetchall()
    except sqlalchemy.exc.ProgrammingError:  # no tables yet
        return set()
    except sqlalchemy.exc.SQLAlchemyError:
        return None
    return {int(json.loads(value)["pid"]) for (value,) in rows}


def _owners(study: str) -> set[int] | None:
    """The pids of the searches that own a trial in the study at ``study`` (an SQLite
    file, or a database URL); None while it cannot be read (a search is writing it)."""
    import json
    import sqlite3

    if "://" in study:
        return _database_owners(study)
    if not os.path.exists(study):
        return set()
    try:
        uri = f"file:{study}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=30)) as db:
            rows = db.execute(
                "SELECT value_json FROM trial_user_attributes WHERE key = ?", (_OWNER,)
            ).fetchall()
    except sqlite3.Error as error:
        return set() if "no such table" in str(error) else None
    return {int(json.loads(value)["pid"]) for (value,) in rows}


class TwoSearchesDataset(SleepyDataset):
    """A SleepyDataset whose items, in a probe of a search that owns a trial in the study
    named by ``study`` (else $AUTOTUNE_TEST_TWO_SEARCHES_STUDY), wait until another search
    owns one too: the first trial of each of two searches runs while the other's exists,
    however the machine schedules their start-ups (a search's preflight, before its first
    trial, never waits)."""

    def __init__(self, length: int = 256, study: str | None = None) -> None:
        super().__init__(length)
        self.study = study

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        study = self.study or os.environ.get(TWO_SEARCHES_STUDY)
        if study:
            _wait_for_another_search(study)
        return super().__getitem__(index)


def _search_pid() -> int | None:
    """The search this probe (or its loader's worker) runs for: the process that started
    the fork server the probe came from; None outside a probe."""
    try:
        ancestors = psutil.Process().parents()  # nearest first
        for at, ancestor in enumerate(ancestors[:-1]):
            if "multiprocessing.forkserver" in " ".join(ancestor.cmdline()):
                return ancestors[at + 1].pid
    except psutil.Error:
        pass
    return None


def _wait_for_another_search(study: str, limit: float = 240.0) -> None:
    # By the search's own pid, not every ancestor's: one search may have started the other.
    mine = _search_pid()
    deadline = time.monotonic() + limit
    while True:
        owners = _owners(study)
        if owners is not None and (mine not in owners or len(owners) >= 2):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"no other search owned a trial of {study} within {limit:g} s")
        time.sleep(0.02)


def two_searches_dataset() -> Dataset:
    return TwoSearchesDataset(length=256)


def raising_dataset() -> Dataset:
    return RaisingDataset(every=1)


def oom_model() -> nn.Module:
    return BigBatchOOM(limit=8)


def not_a_dataset() -> int:
    return 42


def not_a_model() -> str:
    return "resnet"


class RayWorkerKillingDataset(SleepyDataset):
    """Under Ray, kills the Ray worker running the probe (as a lost node would); elsewhere
    (the search's own preflight) an ordinary dataset."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:

        for ancestor in psutil.Process().parents():
            if ancestor.name().startswith("ray::"):
                ancestor.kill()
                time.sleep(60)  # the probe ends with its worker
        return super().__getitem__(index)


# ------------------------------------------------------- faults (tests/integration/test_faults_*)
def _in_worker() -> bool:
    return torch.utils.data.get_worker_info() is not None


def _segfault() -> None:
    ctypes.string_at(0)  # reads address 0: SIGSEGV, as a bug in native code would


class CorruptInWorkersDataset(SleepyDataset):
    """Raises on some indices, and only in DataLoader workers (say, a file handle opened
    before the fork): configs with workers fail, configs without pass."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if _in_worker() and index % 4 == 0:
            raise ValueError(f"corrupt record {index}")
        return super().__getitem__(index)


class DyingWorkerDataset(SleepyDataset):
    """Kills the DataLoader worker that reads it (SIGKILL) or crashes it (SIGSEGV);
    reads without workers pass."""

    def __init__(self, death: str = "kill") -> None:
        super().__init__(256, delay=0.002)
        self.death = death

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if _in_worker():
            if self.death == "segfault":
                _segfault()
            os.kill(os.getpid(), signal.SIGKILL)
        return super().__getitem__(index)


class SegfaultDataset(_CountingDataset):
    """Crashes (SIGSEGV) whatever process reads it, after ``after`` items."""

    def __init__(self, after: int = 0) -> None:
        super().__init__(after)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self.past_limit():
            _segfault()
        return super().__getitem__(index)


class HangInWorkersDataset(SleepyDataset):
    """Hangs in DataLoader workers (a lock held at fork time, say); passes without."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if _in_worker():
            time.sleep(3600)
        return super().__getitem__(index)


def collate_hanging_in_workers(items: list) -> object:
    """A collate_fn that deadlocks in DataLoader workers; fine without them."""
    if _in_worker():
        time.sleep(3600)
    return torch.utils.data.default_collate(items)


class BatchMemoryModel(nn.Module):
    """Holds ``mib`` MiB of activations per sample of the batch, as a large model does:
    memory grows with the batch size."""

    def __init__(self, mib: int = 16) -> None:
        super().__init__()
        self.mib = mib
        self.linear = nn.Linear(FEATURES, CLASSES)
        self.held: torch.Tensor | None = None

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        self.held = None
        self.held = torch.ones(inputs.shape[0] * self.mib * 2**18)  # 4 bytes each
        return self.linear(inputs)


class BigItemsDataset(SleepyDataset):
    """Items of ``kib`` KiB, so batches take room in shared memory."""

    def __init__(self, kib: int = 256) -> None:
        super().__init__(64)
        self.kib = kib

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return torch.zeros(self.kib * 256), index % CLASSES


class HalfMadeShmDataset(SleepyDataset):
    """In a worker, each item leaves a batch file in ``directory`` named as torch names
    those in /dev/shm (after the worker's pid): half-made, its size set and none of its
    memory allocated, as when /dev/shm is full (or whole, when ``allocated``). Then the
    worker hangs (``then="hang"``: a batch it could not hand over, that the loader waits
    for) or dies (``then="exit"``)."""

    def __init__(self, directory: str, then: str, *, allocated: bool = False) -> None:
        super().__init__(64)
        self.directory = directory
        self.then = then
        self.allocated = allocated

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if torch.utils.data.get_worker_info() is None:
            return super().__getitem__(index)
        with open(os.path.join(self.directory, f"torch_{os.getpid()}_{index}_0"), "wb") as file:
            if self.allocated:
                file.write(os.urandom(2**16))
            else:
                file.truncate(2**16)
        if self.then == "hang":
            time.sleep(3600)
        os._exit(1)


def corrupt_in_workers_dataset() -> Dataset:
    return CorruptInWorkersDataset(length=256)


def failing_after_dataset() -> Dataset:
    return FailingAfterDataset(after=8)


def worker_killed_dataset() -> Dataset:
    return DyingWorkerDataset("kill")


def worker_segfault_dataset() -> Dataset:
    return DyingWorkerDataset("segfault")


def hang_in_workers_dataset() -> Dataset:
    return HangInWorkersDataset(length=256, delay=0.002)


def batch_memory_model() -> nn.Module:
    return BatchMemoryModel(mib=32)


def big_items_dataset() -> Dataset:
    return BigItemsDataset(kib=256)


def big_items_model() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(256 * 256, CLASSES))


def segfault_after_dataset() -> Dataset:
    return SegfaultDataset(after=8)


class SteadyModel(nn.Module):
    """A linear model whose every forward takes ``seconds`` whatever the batch: a known
    compute cost per step, so a larger batch trains proportionally faster."""

    def __init__(self, seconds: float = 0.01) -> None:
        super().__init__()
        self.seconds = seconds
        self.linear = nn.Linear(FEATURES, CLASSES)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        return self.linear(inputs)


def steady_model() -> nn.Module:
    return SteadyModel(0.03)


class AloneModel(nn.Module):
    """A linear model that raises if its process has any child (a loader worker) alive
    when it trains: for probes that must measure the model alone."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(FEATURES, CLASSES)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        # multiprocessing's own list, not a scan of /proc: cheap enough for every step,
        # and DataLoader workers are multiprocessing children of the probe.
        children = multiprocessing.active_children()
        if children:
            raise RuntimeError(f"{len(children)} loader worker(s) alive while training")
        return self.linear(inputs)


class InstantDataset(Dataset):
    """Items made in advance: reading one costs next to nothing."""

    def __init__(self, length: int = 512) -> None:
        generator = torch.Generator().manual_seed(0)
        self.inputs = torch.randn(length, FEATURES, generator=generator)
        self.targets = torch.arange(length) % CLASSES

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[index], self.targets[index]


def instant_dataset() -> Dataset:
    return InstantDataset()


def sequence_first(items: list) -> torch.Tensor:
    """Collates items into one ``(features, batch)`` tensor: not batch-major, as a
    sequence model's ``(sequence, batch)`` batch is. Its leading dimension is FEATURES
    whatever the batch size."""
    return torch.stack([inputs for inputs, _target in items], dim=1)


class SequenceFirstModel(nn.Module):
    """A linear model over ``(features, batch)`` batches (see sequence_first)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(FEATURES, CLASSES)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.linear(inputs.T)


class ImageLikeDataset(Dataset):
    """Items of one fixed ``(3, size, size)`` float image and a label: large batches to
    copy to a device, next to nothing to read (for the GPU tests)."""

    def __init__(self, length: int = 2048, size: int = 224) -> None:
        self.length = length
        self.image = torch.rand(3, size, size, generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.image, index % CLASSES


def image_linear_model(size: int = 224) -> nn.Module:
    """A linear model over flattened ``(3, size, size)`` images: little compute."""
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * size * size, CLASSES))


class WideFeaturesDataset(InstantDataset):
    """Items of ``width`` features made in advance (for the GPU tests' wide models)."""

    def __init__(self, length: int = 4096, width: int = 1024) -> None:
        generator = torch.Generator().manual_seed(0)
        self.inputs = torch.randn(length, width, generator=generator)
        self.targets = torch.arange(length) % CLASSES


def wide_model(width: int = 1024, depth: int = 4) -> nn.Module:
    """Square layers of ``width``: a step whose device compute outweighs its loading."""
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, CLASSES))
