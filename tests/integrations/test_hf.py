"""The Hugging Face integration, for real: a one-layer BERT trained by a real Trainer on CPU."""

from __future__ import annotations

import importlib
import json
import pickle
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import torch
from conftest import quick
from hf_pieces import ScaledLossTrainer, Sentences, pad, tiny_bert
from transformers import Trainer, TrainingArguments
from tuned import tuned_result

import autotune
from autotune.integrations import hf
from autotune.probe import _forkserver

pytestmark = pytest.mark.scaleout


def arguments(tmp_path: Path, **overrides: Any) -> TrainingArguments:
    """Three steps on CPU, writing nothing but the output folder."""
    options: dict[str, Any] = {
        "output_dir": str(tmp_path / "out"),
        "max_steps": 3,
        "report_to": [],
        "use_cpu": True,
        "save_strategy": "no",
        "disable_tqdm": True,
        **overrides,
    }
    return TrainingArguments(**options)


def make_trainer(
    tmp_path: Path,
    cls: type = Trainer,
    args: TrainingArguments | None = None,
    model: torch.nn.Module | None = None,
    **kwargs: Any,
) -> Any:
    return cls(
        model=model or tiny_bert(),
        args=args or arguments(tmp_path),
        train_dataset=Sentences(),
        data_collator=pad,
        **kwargs,
    )


# --------------------------------------------------------------------- arguments
def test_training_arguments_carry_every_tuned_knob() -> None:
    result = tuned_result(
        batch_size=16,
        num_workers=2,
        prefetch_factor=4,
        persistent_workers=True,
        amp="bf16",
        user_batch_size=32,
    )
    assert hf.training_arguments(result) == {
        "per_device_train_batch_size": 16,
        "gradient_accumulation_steps": 2,  # 2 x 16 keeps the user's 32
        "dataloader_num_workers": 2,
        "dataloader_prefetch_factor": 4,
        "dataloader_pin_memory": False,
        "dataloader_persistent_workers": True,
        "bf16": True,
        "fp16": False,
    }


def test_training_arguments_leave_out_prefetch_without_workers() -> None:
    arguments = hf.training_arguments(tuned_result(batch_size=8))
    assert "dataloader_prefetch_factor" not in arguments
    assert arguments["dataloader_num_workers"] == 0
    assert not arguments["bf16"] and not arguments["fp16"]


def test_training_arguments_only_what_the_installed_version_takes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def older(output_dir: str, per_device_train_batch_size: int = 8) -> None: ...

    monkeypatch.setattr(hf.transformers, "TrainingArguments", older)
    assert hf.training_arguments(tuned_result(num_workers=2)) == {"per_device_train_batch_size": 8}


def test_training_arguments_from_exported_json(tmp_path: Path) -> None:
    result = tuned_result(batch_size=4, num_workers=1, prefetch_factor=2)
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(result.to_dict()))
    assert hf.training_arguments(path) == hf.training_arguments(result)


def test_training_arguments_warn_that_echo_needs_the_tuned_trainer() -> None:
    with pytest.warns(UserWarning, match="TunedTrainer"):
        hf.training_arguments(tuned_result(echo=2))


def test_a_trainer_trains_with_the_tuned_arguments(tmp_path: Path) -> None:
    result = tuned_result(batch_size=4, num_workers=1, prefetch_factor=2, user_batch_size=8)
    args = arguments(tmp_path, **hf.training_arguments(result))
    trainer = make_trainer(tmp_path, args=args)
    loader = trainer.get_train_dataloader()
    assert (loader.num_workers, loader.prefetch_factor) == (1, 2)
    assert len(next(iter(loader))["labels"]) == 4
    trainer.train()
    assert trainer.state.global_step == 3
    assert args.gradient_accumulation_steps == 2


# --------------------------------------------------------------------- the tuned trainer
def test_the_tuned_trainer_trains_on_the_tuned_loader(tmp_path: Path) -> None:
    result = tuned_result(batch_size=4, echo=2)
    with pytest.warns(UserWarning, match="echo"):
        args = arguments(tmp_path, **hf.training_arguments(result))
    trainer = make_trainer(tmp_path, hf.TunedTrainer, args=args, result=result)
    loader = trainer.get_train_dataloader()
    assert isinstance(loader, autotune.EchoLoader)
    first, again = list(zip(range(2), loader, strict=False))
    assert first[1] is again[1]  # each batch twice in a row
    assert set(first[1]) == {"input_ids", "attention_mask", "labels"}
    trainer.train()
    assert trainer.state.global_step == 3


def test_the_tuned_trainer_takes_any_loader_factory(tmp_path: Path) -> None:
    calls = []

    def make_loader(dataset: Any, batch_size: int, collate_fn: Any) -> Any:
        calls.append((dataset, batch_size))
        return [collate_fn([dataset[i] for i in range(batch_size)])] * 3

    trainer = make_trainer(
        tmp_path, hf.TunedTrainer, args=arguments(tmp_path), make_loader=make_loader
    )
    trainer.train()
    assert trainer.state.global_step == 3
    assert calls == [(trainer.train_dataset, 8)]


def test_the_mixin_keeps_a_compute_loss_override(tmp_path: Path) -> None:
    class Scaled(hf.TunedLoaderMixin, ScaledLossTrainer):
        pass

    trainer = make_trainer(tmp_path, Scaled, result=tuned_result(), loss_scale=0.5)
    trainer.train()
    assert trainer.state.global_step == 3


def test_the_tuned_trainer_needs_one_source_of_loader(tmp_path: Path) -> None:
    with pytest.raises(autotune.ConfigError, match=r"result= .* or make_loader="):
        make_trainer(tmp_path, hf.TunedTrainer)
    with pytest.raises(autotune.ConfigError, match="one of them"):
        make_trainer(tmp_path, hf.TunedTrainer, result=tuned_result(), make_loader=list)


def test_the_tuned_trainer_warns_when_its_batch_is_not_the_tuned_one(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match="batch size is 8, not the tuned 16"):
        make_trainer(tmp_path, hf.TunedTrainer, result=tuned_result(batch_size=16))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_trainer(tmp_path, hf.TunedTrainer, result=tuned_result(batch_size=8))


# --------------------------------------------------------------------- a search
def test_the_search_step_is_the_trainers_compute_loss(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, ScaledLossTrainer, loss_scale=3.0)
    step = pickle.loads(pickle.dumps(hf.search_arguments(trainer)["step"]))  # as a probe gets it
    model = tiny_bert().eval()  # no dropout: the same loss twice
    batch = pad([Sentences()[i] for i in range(8)])
    expected = 3.0 * model(**batch).loss
    torch.testing.assert_close(step(model, batch), expected)
    torch.testing.assert_close(trainer.compute_loss(model, dict(batch)), expected)
    assert "labels" in batch  # the step left the batch as it was


def test_the_search_optimizer_is_the_trainers(tmp_path: Path) -> None:
    params = [torch.nn.Parameter(torch.zeros(2))]
    default = hf.search_arguments(
        make_trainer(tmp_path, args=arguments(tmp_path, learning_rate=0.02))
    )
    optimizer = pickle.loads(pickle.dumps(default["optimizer"]))(params)
    assert isinstance(optimizer, torch.optim.AdamW)
    assert optimizer.defaults["lr"] == 0.02
    model = tiny_bert()
    sgd = torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.5)
    given = make_trainer(tmp_path, model=model, optimizers=(sgd, None))
    optimizer = hf.search_arguments(given)["optimizer"](params)
    assert isinstance(optimizer, torch.optim.SGD)
    assert (optimizer.defaults["lr"], optimizer.defaults["momentum"]) == (0.3, 0.5)


def test_the_search_arguments_are_the_trainers(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, args=arguments(tmp_path, per_device_train_batch_size=6))
    found = hf.search_arguments(trainer)
    assert (found["batch_size"], found["device"]) == (6, "cpu")
    assert found["dataset"] is trainer.train_dataset
    copy = found["model"]()
    assert copy is not trainer.model and type(copy) is type(trainer.model)
    # The trainer's collator, dropping what the model does not take, as Trainer does.
    batch = found["collate_fn"]([{**Sentences()[0], "source": "web"}])
    assert set(batch) == {"input_ids", "attention_mask", "labels"}


def test_a_search_needs_the_training_data(tmp_path: Path) -> None:
    trainer = Trainer(model=tiny_bert(), args=arguments(tmp_path))
    with pytest.raises(autotune.ConfigError, match="no train_dataset"):
        hf.search_arguments(trainer)


def test_a_search_of_a_trainer(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, ScaledLossTrainer, loss_scale=2.0)
    study = tmp_path / "hf.db"
    # One finalist, to keep the test short; a longer timeout, as the first probe may wait
    # for the fork server to import transformers on a busy machine.
    options = quick(trials=2, max_windows=2, finalists=1, trial_timeout=60.0, seed=0)
    result = hf.search_config_from_trainer(trainer, study=str(study), **options)
    assert result.samples_per_s > 0
    assert "transformers.models.bert.modeling_bert" in _forkserver._preload  # once, not per probe
    assert result.user_batch == 8
    assert result.study_path == str(study)
    assert autotune.load(study).settings == result.settings
    tuned = arguments(tmp_path, **hf.training_arguments(study))
    assert tuned.per_device_train_batch_size == result.settings.batch_size


# --------------------------------------------------------------------- without the extra
def test_without_transformers_the_import_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers fails
    monkeypatch.delitem(sys.modules, "autotune.integrations.hf")
    with pytest.raises(autotune.MissingExtraError, match=r"pip install 'autotune\[hf\]'"):
        importlib.import_module("autotune.integrations.hf")
