"""The Lightning integration, for real: a tiny LightningModule trained by a real Trainer on CPU."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset
from tuned import tuned_result

import autotune
from autotune.integrations import lightning
from autotune.probe import _forkserver
from autotune.settings._worker_threads import WorkerThreads

# pytorch_lightning's own use of a torch API that torch 2.13 deprecates.
pytestmark = [
    pytest.mark.scaleout,
    pytest.mark.filterwarnings(r"ignore:`isinstance\(treespec, LeafSpec\)`:FutureWarning"),
]


class Regression(pl.LightningModule):
    """A linear model and its MSE: the smallest module a Trainer fits."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_index: int) -> torch.Tensor:
        inputs, targets = batch
        return torch.nn.functional.mse_loss(self.layer(inputs), targets)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Data(pl.LightningDataModule):
    """64 random samples, loaded the tuned way."""

    def __init__(self, result: autotune.SearchResult, *, keywords_only: bool) -> None:
        super().__init__()
        self.result = result
        self.keywords_only = keywords_only
        generator = torch.Generator().manual_seed(0)
        inputs = torch.randn(64, 4, generator=generator)
        self.train_set = TensorDataset(inputs, inputs.sum(dim=1, keepdim=True))

    def train_dataloader(self) -> Any:
        if self.keywords_only:
            return DataLoader(
                self.train_set, shuffle=True, **lightning.dataloader_arguments(self.result)
            )
        return lightning.tuned_loader(self.train_set, self.result)


def fit(result: autotune.SearchResult, tmp_path: Path, *, keywords_only: bool) -> Any:
    """Three steps of a real Trainer with the result's Trainer keywords."""
    trainer = pl.Trainer(
        max_steps=3,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        **lightning.trainer_arguments(result),
    )
    trainer.fit(Regression(), datamodule=Data(result, keywords_only=keywords_only))
    return trainer


@pytest.mark.parametrize(
    ("amp", "precision"), [("off", "32-true"), ("bf16", "bf16-mixed"), ("fp16", "16-mixed")]
)
def test_trainer_arguments_name_the_measured_precision(amp: str, precision: str) -> None:
    result = tuned_result(batch_size=8, amp=amp, user_batch_size=32)
    assert lightning.trainer_arguments(result) == {
        "precision": precision,
        "accumulate_grad_batches": 4,  # 4 x 8 keeps the user's 32
    }


def test_dataloader_arguments_are_the_tuned_keywords() -> None:
    result = tuned_result(batch_size=16, num_workers=2, prefetch_factor=4, persistent_workers=True)
    assert lightning.dataloader_arguments(result) == {
        "batch_size": 16,
        "num_workers": 2,
        "prefetch_factor": 4,
        "persistent_workers": True,
        "pin_memory": False,
    }
    assert lightning.dataloader_arguments(tuned_result(batch_size=4)) == {
        "batch_size": 4,
        "num_workers": 0,
        "pin_memory": False,
    }
    with pytest.warns(UserWarning, match="tuned_loader"):
        lightning.dataloader_arguments(tuned_result(echo=2))
    capped = tuned_result(num_workers=2, worker_threads=1)
    assert lightning.dataloader_arguments(capped)["worker_init_fn"] == WorkerThreads(1)


def test_a_trainer_fits_with_the_tuned_keywords(tmp_path: Path) -> None:
    result = tuned_result(batch_size=8, num_workers=1, prefetch_factor=2, user_batch_size=16)
    trainer = fit(result, tmp_path, keywords_only=True)
    assert trainer.global_step == 3
    assert trainer.accumulate_grad_batches == 2
    assert trainer.train_dataloader.num_workers == 1


def test_a_trainer_fits_on_the_tuned_loader(tmp_path: Path) -> None:
    result = tuned_result(batch_size=8, amp="bf16", echo=2)
    trainer = fit(result, tmp_path, keywords_only=False)
    assert trainer.global_step == 3
    assert trainer.precision == "bf16-mixed"
    assert isinstance(trainer.train_dataloader, autotune.EchoLoader)


def test_the_tuned_loader_reads_exported_settings(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(tuned_result(batch_size=3).to_dict()))
    loader = lightning.tuned_loader(list(range(10)), path, shuffle=False)
    assert [len(batch) for batch in loader] == [3, 3, 3, 1]


def test_probes_import_lightning_once_in_their_fork_server() -> None:
    assert "pytorch_lightning" in _forkserver._preload


def test_without_lightning_the_import_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pytorch_lightning", None)  # neither package imports
    monkeypatch.setitem(sys.modules, "lightning", None)
    monkeypatch.delitem(sys.modules, "autotune.integrations.lightning")
    with pytest.raises(autotune.MissingExtraError, match=r"pip install 'autotune\[lightning\]'"):
        importlib.import_module("autotune.integrations.lightning")
