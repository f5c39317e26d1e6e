"""Lightning: ``Trainer`` and ``DataLoader`` keywords from tuned settings, and the tuned
loader for a ``LightningDataModule``.

::

    from autotune.integrations import lightning as tuned

    result = autotune.load("studies/mine.db")
    trainer = pl.Trainer(max_epochs=3, **tuned.trainer_arguments(result))

    class Data(pl.LightningDataModule):
        def train_dataloader(self):
            return tuned.tuned_loader(self.train_set, result)
            # or: DataLoader(self.train_set, shuffle=True, **tuned.dataloader_arguments(result))

Both the ``pytorch_lightning`` and the ``lightning`` packages take these keywords.
Needs ``pip install 'autotune[lightning]'``: importing this module without either
package raises :class:`autotune.MissingExtraError`. Importing it also has the probes
of this program's searches import Lightning once, in the process they start from,
rather than each on its own.
"""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any

from autotune.integrations._common import ResultSource, as_result, missing_extra
from autotune.probe import preload_in_probes
from autotune.settings import AmpMode, worker_init

_PACKAGES = ("pytorch_lightning", "lightning")
"""Lightning's two packages: either takes the keywords made here."""

# Nothing here calls Lightning, so it is looked for rather than imported (seconds); but
# keywords for a Trainer that is not installed would only fail later, less clearly.
_INSTALLED = [name for name in _PACKAGES if importlib.util.find_spec(name) is not None]
if not _INSTALLED:
    raise missing_extra(
        "pytorch-lightning", "lightning", "neither pytorch_lightning nor lightning imports"
    )
# A program that uses this module trains with Lightning, so each probe of its searches
# imports Lightning (the script does, and so does a LightningModule's class): seconds a
# probe, unless the fork server the probes start from imported it once.
preload_in_probes(_INSTALLED)

__all__ = ["dataloader_arguments", "trainer_arguments", "tuned_loader"]

PRECISIONS: dict[AmpMode, str] = {"off": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"}
"""Lightning's ``precision`` for each of autotune's AMP modes."""


def trainer_arguments(result: ResultSource) -> dict[str, Any]:
    """``Trainer`` keywords for the tuned settings: the ``precision`` they were measured
    with, and ``accumulate_grad_batches`` that keeps your global batch when the tuned
    batch is smaller than yours.

    Args:
        result: a :class:`autotune.SearchResult`, a study file or name, or exported JSON.
    """
    result = as_result(result)
    return {
        "precision": PRECISIONS[result.settings.amp],
        "accumulate_grad_batches": result.gradient_accumulation_steps,
    }


def dataloader_arguments(result: ResultSource) -> dict[str, Any]:
    """``torch.utils.data.DataLoader`` keywords for ``train_dataloader``: ``batch_size``,
    ``num_workers``, and with workers ``prefetch_factor``, ``persistent_workers`` and
    the ``worker_init_fn`` that caps each worker's native threads (when the settings
    cap them), ``pin_memory``. Data echoing is not a DataLoader keyword:
    :func:`tuned_loader` applies it. The training threads neither: call
    ``torch.set_num_threads(result.settings.threads)`` when they are set.

    Args:
        result: a :class:`autotune.SearchResult`, a study file or name, or exported JSON.
    """
    settings = as_result(result).settings
    if settings.echo > 1:
        warnings.warn(
            f"the tuned settings echo each batch {settings.echo} times, which DataLoader "
            "keywords cannot say; return lightning.tuned_loader(...) to echo.",
            UserWarning,
            stacklevel=2,
        )
    kwargs = settings.dataloader_kwargs()
    init = worker_init(settings.worker_threads, None)  # None without workers
    if init is not None:
        kwargs["worker_init_fn"] = init
    return kwargs


def tuned_loader(dataset: Any, result: ResultSource, **overrides: Any) -> Any:
    """The tuned loader over ``dataset``, to return from ``train_dataloader``.

    A shuffling ``DataLoader`` (not for an ``IterableDataset``) with the tuned keywords,
    wrapped in an :class:`autotune.EchoLoader` when the settings chose echo. Lightning
    shards a DataLoader across DDP processes itself; an echoed loader it cannot, so give
    it ``sampler=DistributedSampler(dataset)`` there. Once autotune's online loader
    exists, return ``autotune.online(...)`` from ``train_dataloader`` instead.

    Args:
        dataset: the training dataset.
        result: a :class:`autotune.SearchResult`, a study file or name, or exported JSON.
        **overrides: DataLoader keywords that win over the tuned ones (``collate_fn``,
            ``shuffle``, ``drop_last``...).
    """
    return as_result(result).loader(dataset, **overrides)
