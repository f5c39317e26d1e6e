"""autotune.online(): a DataLoader for the user's own loop that tunes itself.

The same decision a search makes, without probe processes: the measurements are
windows of the user's own training steps, the moves are one loader knob at a time,
and the choice can be written into a study for ``autotune show``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import IterableDataset, RandomSampler, Sampler, SequentialSampler

from autotune._errors import ConfigError
from autotune.inloop._budget import DEFAULT_SECONDS, Budget
from autotune.inloop._build import Data
from autotune.inloop._climb import ClimbOptions
from autotune.inloop._ddp import Ranks
from autotune.inloop._loader import OnlineLoader
from autotune.inloop._order import epoch_length
from autotune.inloop._record import check_recordable
from autotune.inloop._start import StudySource, start_settings
from autotune.inloop._tuner import Tuner, TunerOptions
from autotune.machine import usable_cpus
from autotune.settings import Settings
from autotune.space import default_max_workers

LOG = logging.getLogger("autotune.online")
LATENCY_WORKERS = 16
"""The most workers a climb tries on a machine whose CPU count allows fewer: loading that
waits on storage or the network leaves its CPU free, and gains from more workers than
CPUs. A jump goes above the CPUs only when the loads left the loop's CPU idle."""


def most_workers(cpus: int) -> int:
    """The most DataLoader workers the online loader tries on ``cpus`` CPUs."""
    return max(default_max_workers(cpus), LATENCY_WORKERS)


def online(  # noqa: PLR0913 - DataLoader's own keywords and the climb's, the public API
    dataset: Any,
    batch_size: int = 32,
    *,
    shuffle: bool | None = None,
    sampler: Sampler[int] | None = None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    drop_last: bool = False,
    worker_init_fn: Callable[[int], None] | None = None,
    budget_seconds: float | None = None,
    budget_fraction: float | None = 0.05,
    window_seconds: float = 0.5,
    windows: int = 3,
    retune: bool = True,
    study: StudySource | None = None,
    record: str | Path | None = None,
    device: str | torch.device | None = None,
    log: logging.Logger | None = None,
) -> OnlineLoader:
    """A loader that tunes ``num_workers``, ``prefetch_factor``, ``pin_memory`` and
    ``persistent_workers`` while it feeds the user's training loop.

    For a budget at the start of training it climbs from its first config to better
    neighbours (more workers, deeper prefetch, pinned memory on CUDA), keeping a move
    only when the user's own steps get faster beyond the noise; then it settles on the
    best for the rest of training, and climbs again if throughput falls for long.
    Under DDP, create it after ``torch.distributed.init_process_group``: each rank then
    climbs within its share of the CPUs, and all take rank 0's choice.

    Args:
        dataset: a map-style dataset or an IterableDataset (which changes config only
            between epochs, and must shard itself across workers as with any DataLoader).
        batch_size: the batch size of the user's training; never changed.
        shuffle: draw each epoch in a random order; None: yes for a map-style dataset.
        sampler: the index order (e.g. a DistributedSampler); excludes ``shuffle``.
        collate_fn: as DataLoader's.
        drop_last: as DataLoader's.
        worker_init_fn: as DataLoader's.
        budget_seconds: the most seconds of steps a climb measures (default 60).
        budget_fraction: the most steps a climb measures, as a share of an epoch's
            batches; None: seconds only. The first limit reached ends the climb.
        window_seconds: a measuring window ends at the first step after this long.
        windows: windows measured per config.
        retune: climb again when throughput stays below 0.7x the settled figure for
            30 s (never under DDP, where the ranks would have to climb together).
        study: start from the choice saved in a study (a ``.db`` path or a name),
            exported JSON, or a ``SearchResult``; None starts from ``num_workers=0``.
        record: a study file to write the choice into (for ``autotune show``).
        device: the training device; pinned memory is tried only on CUDA.
        log: where the one-line messages go (default the "autotune.online" logger).

    Raises:
        ConfigError: an argument, or a knob of the study's choice, is out of range.
        StudyError: the study cannot be read, or ``record`` holds a search's result.
    """
    iterable = isinstance(dataset, IterableDataset)
    _check(iterable, shuffle, sampler, batch_size, budget_seconds, budget_fraction, windows)
    logger = log or LOG
    training_on = str(device) if device is not None else _default_device()
    pin = training_on.startswith("cuda") and torch.cuda.is_available()
    start, origin = start_settings(study, batch_size, pin_memory=pin)
    target = check_recordable(record) if record is not None else None
    order = None if iterable else sampler or _default_sampler(dataset, shuffle is not False)
    ranks = Ranks.detect()
    cpus = ranks.cpu_share() if ranks is not None else usable_cpus()
    batches = epoch_length(dataset, order, batch_size, drop_last)
    options = TunerOptions(
        climb=ClimbOptions(
            max_workers=most_workers(cpus),
            cpus=cpus,
            windows=windows,
            pin_memory=pin,
        ),
        budget=Budget.of(batches, budget_fraction, budget_seconds or DEFAULT_SECONDS),
        window_seconds=window_seconds,
        retune=retune,
        device=training_on,
        record=target,
        ranks=ranks,
        epoch_batches=batches,
    )
    _say_start(logger, start, origin, options, dataset)
    tuner = Tuner(start, options, logger)
    data = Data(dataset, batch_size, collate_fn, drop_last, worker_init_fn)
    return OnlineLoader(data, order, tuner)


def _say_start(
    logger: logging.Logger, start: Settings, origin: str, options: TunerOptions, dataset: Any
) -> None:
    """One line on where the climb starts and how far it may go, and one on why an
    IterableDataset changes config only between epochs."""
    logger.info(
        "online: climbing from %s (%s) for at most %s; up to %d workers",
        start.describe(),
        origin,
        _budget_text(options.budget),
        options.climb.max_workers,
    )
    if isinstance(dataset, IterableDataset):
        logger.info(
            "online: %s is an IterableDataset, which cannot resume mid-epoch: configs switch "
            "only at epoch boundaries, one config tried per epoch",
            type(dataset).__name__,
        )


def _check(
    iterable: bool,
    shuffle: bool | None,
    sampler: Sampler[int] | None,
    batch_size: int,
    budget_seconds: float | None,
    budget_fraction: float | None,
    windows: int,
) -> None:
    if batch_size < 1:
        raise ConfigError(f"batch_size is {batch_size}, but must be >= 1.")
    if sampler is not None and shuffle:
        raise ConfigError("shuffle is True and a sampler is given; give one or the other.")
    if iterable and (shuffle or sampler is not None):
        raise ConfigError(
            "an IterableDataset sets its own order: shuffle and sampler must be left unset."
        )
    if budget_seconds is not None and budget_seconds <= 0:
        raise ConfigError(f"budget_seconds is {budget_seconds}, but must be > 0.")
    if budget_fraction is not None and not 0 < budget_fraction <= 1:
        raise ConfigError(f"budget_fraction is {budget_fraction}, but must be in (0, 1].")
    if windows < 1:
        raise ConfigError(f"windows is {windows}, but must be >= 1.")


def _default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _default_sampler(dataset: Any, shuffle: bool) -> Sampler[int]:
    # Without a generator, RandomSampler seeds each epoch from torch's global RNG, as a
    # shuffling DataLoader does: torch.manual_seed makes the orders repeatable.
    return RandomSampler(dataset) if shuffle else SequentialSampler(dataset)


def _budget_text(budget: Budget) -> str:
    seconds = f"{budget.seconds:g} s of steps"
    return f"{budget.batches} steps or {seconds}" if budget.batches is not None else seconds
