"""Hugging Face ``Trainer``: tuned ``TrainingArguments``, a search of a trainer's own
input pipeline, and a trainer that trains on the tuned loader.

::

    from autotune.integrations import hf

    result = hf.search_config_from_trainer(trainer, trials=16)  # its model, data, collator
    args = TrainingArguments(output_dir="out", **hf.training_arguments(result))
    trainer = hf.TunedTrainer(model=model, args=args, train_dataset=train,
                              data_collator=collate, result=result)
    trainer.train()

Needs ``pip install 'autotune[hf]'`` (transformers and accelerate): importing this
module without them raises :class:`autotune.MissingExtraError`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import sys
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from autotune._errors import ConfigError
from autotune.integrations._common import MakeLoader, ResultSource, as_result, missing_extra
from autotune.integrations._hf_probe import TrainerLoss, TrainerOptimizer
from autotune.pipeline import search
from autotune.probe import preload_in_probes
from autotune.result import SearchResult

try:
    # accelerate too: Trainer needs it, and saying so now beats failing at the first Trainer.
    import accelerate  # noqa: F401
    import transformers
except ImportError as error:
    raise missing_extra("transformers", "hf", str(error)) from None

__all__ = [
    "TunedLoaderMixin",
    "TunedTrainer",
    "search_arguments",
    "search_config_from_trainer",
    "training_arguments",
]


# --------------------------------------------------------------------- arguments
def training_arguments(result: ResultSource) -> dict[str, Any]:
    """``TrainingArguments`` keywords for the tuned settings.

    The loader knobs (``dataloader_num_workers``, ``dataloader_prefetch_factor`` with
    workers, ``dataloader_pin_memory`` and with it ``accelerator_config={"non_blocking":
    True}``, ``dataloader_persistent_workers``), the batch
    (``per_device_train_batch_size``, and ``gradient_accumulation_steps`` that keeps your
    global batch) and the precision (``bf16``, ``fp16``), each only where the installed
    ``TrainingArguments`` takes it. ``TrainingArguments`` has nothing for three knobs:
    data echoing and the cap on each worker's native threads (:class:`TunedTrainer`
    applies both), and the training threads (call
    ``torch.set_num_threads(result.settings.threads)`` when they are set).

    Args:
        result: a :class:`autotune.SearchResult`, a study file or name, or exported JSON.

    Returns:
        ``TrainingArguments(output_dir=..., **training_arguments(result))``'s keywords
        (merge ``accelerator_config`` into your own when you pass one).
    """
    result = as_result(result)
    settings = result.settings
    wanted: dict[str, Any] = {
        "per_device_train_batch_size": settings.batch_size,
        "gradient_accumulation_steps": result.gradient_accumulation_steps,
        "dataloader_num_workers": settings.num_workers,
        "dataloader_pin_memory": settings.pin_memory,
        "dataloader_persistent_workers": settings.persistent_workers,
        "bf16": settings.amp == "bf16",
        "fp16": settings.amp == "fp16",
    }
    if settings.num_workers > 0 and settings.prefetch_factor is not None:
        wanted["dataloader_prefetch_factor"] = settings.prefetch_factor
    if settings.pin_memory:
        # accelerate copies batches with non_blocking=False unless told; the probes
        # measured pinned batches copied without blocking.
        wanted["accelerator_config"] = {"non_blocking": True}
    if settings.echo > 1:
        warnings.warn(
            f"the tuned settings echo each batch {settings.echo} times, which "
            "TrainingArguments cannot say; train with hf.TunedTrainer to echo.",
            UserWarning,
            stacklevel=2,
        )
    accepted = inspect.signature(transformers.TrainingArguments).parameters
    return {name: value for name, value in wanted.items() if name in accepted}


# --------------------------------------------------------------------- a search
def search_arguments(trainer: Any) -> dict[str, Any]:
    """``autotune.search`` keywords that tune ``trainer``'s own input pipeline.

    Each probe trains a deep copy of the trainer's model on its ``train_dataset``,
    collated by its ``data_collator`` (unused columns removed as Trainer removes
    them), with its optimizer (the one it was given, else the one its arguments
    name) and its ``compute_loss``, overrides in a subclass included. The batch
    size trained with today is ``trainer.args.per_device_train_batch_size``.

    The pieces travel to probe processes pickled: the trainer's class, its dataset
    and collator must be defined at module level, and a script that searches must
    do so under ``if __name__ == "__main__":``. :func:`search_config_from_trainer`
    runs the search on them, with transformers imported once for all the probes.

    Raises:
        ConfigError: the trainer has no ``train_dataset``, or its loss cannot be sent
            to a probe process.
    """
    if getattr(trainer, "train_dataset", None) is None:
        raise ConfigError(
            "the trainer has no train_dataset; autotune tunes the loader of the training "
            "data, so give the Trainer train_dataset=..."
        )
    dataset, collate_fn = _training_data(trainer)
    args = trainer.args
    return {
        "dataset": dataset,
        # Each probe trains a model of its own; the trainer's stays as it is.
        "model": functools.partial(copy.deepcopy, trainer.model),
        "step": TrainerLoss.of(trainer),
        "optimizer": TrainerOptimizer.of(trainer),
        "collate_fn": collate_fn,
        "batch_size": args.per_device_train_batch_size,
        "device": "cpu" if getattr(args, "use_cpu", False) else None,
        "name": type(trainer.model).__name__,
    }


def search_config_from_trainer(trainer: Any, **search_options: Any) -> SearchResult:
    """Tune ``trainer``'s input pipeline: ``autotune.search`` on :func:`search_arguments`.

    Args:
        trainer: a ``transformers.Trainer`` with a ``train_dataset``.
        **search_options: any keyword of ``autotune.search`` (``trials``, ``study``,
            ``space``, ``progress``...); they win over the trainer's (``device``,
            ``name``, ``batch_size``).

    Returns:
        The search's result; :func:`training_arguments` turns it into arguments.
    """
    arguments = search_arguments(trainer)
    # Each probe unpickles the model and the trainer's class, which imports transformers:
    # seconds a probe, unless the fork server the probes start from has it already.
    preload_in_probes(_framework_modules(trainer))
    return search(**{**arguments, **search_options})


def _framework_modules(trainer: Any) -> list[str]:
    """transformers' modules that the trainer's pieces are defined in."""
    classes = [type(trainer.model), type(trainer.data_collator), *type(trainer).__mro__]
    modules = {cls.__module__ for cls in classes}
    return sorted(m for m in modules if m.split(".")[0] == "transformers")


def _training_data(trainer: Any) -> tuple[Any, Callable[[list[Any]], Any] | None]:
    """The dataset and collate_fn ``trainer`` trains on, with the columns its model does
    not take removed, as ``Trainer.get_train_dataloader`` removes them (from a
    ``datasets.Dataset`` itself, else after collation)."""
    dataset = trainer.train_dataset
    collate_fn = trainer.data_collator
    hf_datasets = sys.modules.get("datasets")  # loaded if the dataset is one of its own
    if hf_datasets is not None and isinstance(dataset, hf_datasets.Dataset):
        if hasattr(trainer, "_remove_unused_columns"):
            dataset = trainer._remove_unused_columns(dataset, description="training")
    elif hasattr(trainer, "_get_collator_with_removed_columns"):
        collate_fn = trainer._get_collator_with_removed_columns(collate_fn, description="training")
    return dataset, collate_fn


# --------------------------------------------------------------------- training
class TunedLoaderMixin:
    """Makes a ``Trainer`` train on autotune's loader; mix it in before ``Trainer``.

    ::

        class MyTrainer(hf.TunedLoaderMixin, Trainer):   # compute_loss overrides and all
            ...

        MyTrainer(model=model, args=args, train_dataset=train, result="studies/mine.db")

    Only the training loader changes (and, when the tuned settings pin memory, the
    accelerator copies its batches with ``non_blocking=True``, as the probes did).
    ``get_train_dataloader``, the method Trainer
    documents for overriding, calls ``make_loader(dataset, batch_size, collate_fn)``
    with the trainer's dataset, per-process batch size and collator (unused columns
    removed as Trainer removes them), and hands the loader to the trainer's
    accelerator as Trainer does with its own: a DataLoader is sharded across
    processes and its batches moved to the device; any other iterable is used as it
    is, and Trainer moves each batch to the device itself.

    Keyword arguments (the others go to the Trainer):
        result: tuned settings (a :class:`autotune.SearchResult`, a study file or name,
            exported JSON): train on their DataLoader, echoed when they chose echo.
            Build the ``TrainingArguments`` with :func:`training_arguments` of the
            same result, so that the trainer's batch size is the tuned one (a
            warning says when it is not).
        make_loader: builds the loader instead of the tuned DataLoader; any callable
            ``(dataset, batch_size, collate_fn) -> iterable of batches``. For
            autotune's online loader, once ``autotune.online`` exists, pass a
            function that builds it from these three arguments, e.g.
            ``lambda dataset, batch_size, collate_fn: autotune.online(dataset,
            batch_size=batch_size, collate_fn=collate_fn)`` (its exact keywords are
            that function's).

    Raises:
        ConfigError: neither ``result`` nor ``make_loader`` was given, or both were.
    """

    def __init__(
        self,
        *args: Any,
        result: ResultSource | None = None,
        make_loader: MakeLoader | None = None,
        **kwargs: Any,
    ) -> None:
        self.autotune_make_loader = _loader_factory(type(self).__name__, result, make_loader)
        super().__init__(*args, **kwargs)
        trainer: Any = self  # a Trainer's attributes, which this mixin does not declare
        if isinstance(self.autotune_make_loader, _TunedLoader):
            _warn_if_other_batch(
                trainer.args.per_device_train_batch_size, self.autotune_make_loader.result
            )
            self.autotune_make_loader = dataclasses.replace(
                self.autotune_make_loader, drop_last=trainer.args.dataloader_drop_last
            )
            if self.autotune_make_loader.result.settings.pin_memory:
                # Pinned batches copied as the probes copied them: without blocking.
                trainer.accelerator.dataloader_config.non_blocking = True

    def get_train_dataloader(self) -> Any:
        """The training loader, built by ``make_loader`` (default: the tuned DataLoader)."""
        trainer: Any = self
        if trainer.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        dataset, collate_fn = _training_data(trainer)
        batch_size = getattr(trainer, "_train_batch_size", None) or trainer.args.train_batch_size
        loader = self.autotune_make_loader(dataset, batch_size, collate_fn)
        return trainer.accelerator.prepare(loader)


def _loader_factory(
    trainer: str, result: ResultSource | None, make_loader: MakeLoader | None
) -> MakeLoader:
    if make_loader is not None and result is None:
        return make_loader
    if result is not None and make_loader is None:
        return _TunedLoader(as_result(result))
    raise ConfigError(
        f"{trainer} trains on autotune's loader: give it result= (the tuned settings, or "
        "the study they are in) or make_loader=, one of them."
    )


def _warn_if_other_batch(batch_size: int, result: SearchResult) -> None:
    if batch_size != result.settings.batch_size:
        warnings.warn(
            f"the trainer's batch size is {batch_size}, not the tuned "
            f"{result.settings.batch_size}; build its TrainingArguments with "
            "hf.training_arguments(result) to train with the tuned batch.",
            UserWarning,
            stacklevel=4,
        )


class TunedTrainer(TunedLoaderMixin, transformers.Trainer):  # type: ignore[misc]
    """A ``transformers.Trainer`` that trains on autotune's loader: a ``Trainer`` with the
    ``result=`` or ``make_loader=`` keyword of :class:`TunedLoaderMixin`."""


@dataclasses.dataclass(frozen=True)
class _TunedLoader:
    """The default ``make_loader``: the tuned DataLoader of ``result``."""

    result: SearchResult
    drop_last: bool = False

    def __call__(
        self, dataset: Any, batch_size: int, collate_fn: Callable[[list[Any]], Any] | None
    ) -> Iterable[Any]:
        overrides: dict[str, Any] = {"batch_size": batch_size, "drop_last": self.drop_last}
        if collate_fn is not None:
            overrides["collate_fn"] = collate_fn
        loader: Iterable[Any] = self.result.loader(dataset, **overrides)
        return loader
