"""One epoch from a cold start, timed in a new process: a fixed loader's or the online
loader's.

The sibling of the plain-loop checker (:mod:`benchmarks.common._checker`): the same process
handling (a session of its own, killed whole when it ends) and the same training step
(to the device, forward, loss, backward, optimizer step), but instead of a steady pace
after a warm-up it times what a user's first epoch costs: building the loader,
starting its workers, and, for ``autotune.online``, its tuning, up to the last step.
Starting Python and torch and building the dataset and the model are left out: they
cost every loader the same.

It is a module of its own because the online loader imports autotune's decision code,
which the checker must not (``tests/benchmarks/test_checker.py``).

::

    measure_epoch("benchmarks/workloads/io_bound.py", Settings(batch_size=32), online=True)
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset, IterableDataset

from autotune.settings._settings import Settings
from autotune.workload._workload import Workload, load_config
from benchmarks.common._checker import (
    STARTUP_ALLOWANCE_S,
    batch_samples,
    make_train_step,
    run_measurement,
    synchronize,
    to_device,
)

EPOCH_LIMIT_S = 900.0
"""The longest an epoch may take before its process is killed."""


class EpochView(Dataset[Any]):
    """``items`` items of a map-style dataset: its first ones, or its items over again
    (item ``i`` is ``dataset[i % len(dataset)]``), for an epoch of the length a
    benchmark wants.

    Raises:
        ValueError: ``items`` < 1, or a dataset without a length.
    """

    def __init__(self, dataset: Any, items: int) -> None:
        if items < 1:
            raise ValueError(f"items is {items}; an epoch needs at least one.")
        if isinstance(dataset, IterableDataset) or not hasattr(dataset, "__len__"):
            raise ValueError(
                f"{type(dataset).__name__} has no length to cut or repeat; "
                "give no epoch length for it (its own epoch is timed)."
            )
        if len(dataset) < 1:
            raise ValueError(f"{type(dataset).__name__} is empty.")
        self.dataset = dataset
        self.items = items

    def __len__(self) -> int:
        return self.items

    def __getitem__(self, index: int) -> Any:
        if not 0 <= index < self.items:
            raise IndexError(f"index {index} out of an epoch of {self.items} items")
        return self.dataset[index % len(self.dataset)]


@dataclasses.dataclass(frozen=True, kw_only=True)
class EpochPlan:
    """One epoch, as the child process receives it (JSON types only)."""

    config: str
    settings: dict[str, Any]
    """The fixed loader's config; for the online loader, only its batch size counts."""
    online: bool = False
    """Time ``autotune.online`` (with its defaults) instead of ``settings``' DataLoader."""
    items: int | None = None
    """Items in the epoch (:class:`EpochView`); None: the dataset as it is."""
    device: str | None = None
    """None: the config's device, else a GPU when there is one, else the CPU."""
    seed: int = 0


def measure_epoch(
    config_path: str | Path,
    settings: Settings,
    *,
    online: bool = False,
    items: int | None = None,
    device: str | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Time one epoch from a cold start in a new process.

    Returns:
        ``seconds`` (loader construction to the end of the last step), ``batches``,
        ``samples``; for the online loader also ``choice`` (its settings at the end,
        as a dict), ``describe``, ``tuning`` (still climbing at the end) and ``log``
        (its messages).

    Raises:
        CheckerError: the epoch failed or did not finish in time.
    """
    plan = EpochPlan(
        config=str(Path(config_path).resolve()),
        settings=settings.to_dict(),
        online=online,
        items=items,
        device=device,
        seed=seed,
    )
    what = "the online loader" if online else settings.describe()
    return run_measurement(
        "benchmarks.online._epoch",
        dataclasses.asdict(plan),
        limit=STARTUP_ALLOWANCE_S + EPOCH_LIMIT_S,
        what=f"{Path(config_path).name} {what}, one epoch",
    )


# --------------------------------------------------------------------- the child's side
class _Lines(logging.Handler):
    """Keeps the online loader's messages, to report its switches and its choice."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _loader_factory(
    workload: Workload, settings: Settings, online: bool, device: str
) -> Callable[[Any], Any]:
    """What builds the loader over a dataset; made before the clock starts, so that
    importing the online loader (a user's script does it at the top) is not timed."""
    if online:
        # Imported here: the fixed loaders' epochs do not load the online loader. By
        # name, not as ``autotune.online`` in ``tuned``: that attribute imports the
        # online loader's modules lazily, 0.2 s that fell inside the timed epoch.
        from autotune import online as make_online

        def tuned(dataset: Any) -> Any:
            return make_online(
                dataset, settings.batch_size, collate_fn=workload.collate_fn, device=device
            )

        return tuned
    overrides = {"collate_fn": workload.collate_fn} if workload.collate_fn else {}
    return functools.partial(settings.loader, **overrides)


def run_epoch(plan: EpochPlan) -> dict[str, Any]:
    """Build the config's dataset and model here, then time one epoch of the plain loop
    through a new loader (see :func:`measure_epoch` for what is returned)."""
    workload = load_config(plan.config).workload
    settings = Settings.from_dict(plan.settings)
    torch.manual_seed(plan.seed)
    cuda = torch.cuda.is_available()
    device = torch.device(plan.device or workload.device or ("cuda" if cuda else "cpu"))
    model = workload.make_model().to(device)
    model.train()
    train = make_train_step(workload, model, device, settings.amp)
    dataset = workload.make_dataset()
    if plan.items is not None:
        dataset = EpochView(dataset, plan.items)
    # Pinned batches (the online loader may pin on CUDA) copy without blocking.
    non_blocking = device.type == "cuda" and (plan.online or settings.pin_memory)
    lines = _Lines()
    logging.getLogger("autotune.online").addHandler(lines)
    logging.getLogger("autotune.online").setLevel(logging.INFO)
    make_loader = _loader_factory(workload, settings, plan.online, str(device))
    clock = time.perf_counter
    began = clock()
    loader = make_loader(dataset)
    samples = batches = 0
    for batch in loader:
        train(to_device(batch, device, non_blocking))
        samples += batch_samples(batch) or settings.batch_size
        batches += 1
    synchronize(device)
    answer: dict[str, Any] = {"seconds": clock() - began, "batches": batches, "samples": samples}
    if plan.online:
        answer |= {
            "choice": loader.settings.to_dict(),
            "describe": loader.settings.describe(),
            "tuning": loader.tuning,
            "log": lines.lines,
        }
        loader.close()
    return answer


def _child_main(argv: Sequence[str]) -> int:
    """``python -m benchmarks.online._epoch PLAN_JSON ANSWER_PATH``: one epoch."""
    plan = EpochPlan(**json.loads(argv[0]))
    Path(argv[1]).write_text(json.dumps(run_epoch(plan)))
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
