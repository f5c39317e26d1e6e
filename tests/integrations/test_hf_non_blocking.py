"""The Hugging Face integration copies pinned batches without blocking, as the probes
measured them: accelerate copies with non_blocking=False unless its DataLoaderConfiguration
says otherwise. A real Trainer, on CPU (whether a copy blocks is read from its accelerator)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from hf_pieces import Sentences, pad, tiny_bert
from transformers import Trainer, TrainingArguments
from tuned import tuned_result

from autotune.integrations import hf

pytestmark = pytest.mark.scaleout


def arguments(tmp_path: Path, **overrides: Any) -> TrainingArguments:
    return TrainingArguments(
        output_dir=str(tmp_path / "out"),
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        **overrides,
    )


def test_pinned_settings_emit_non_blocking_copies() -> None:
    pinned = hf.training_arguments(tuned_result(num_workers=2, pin_memory=True))
    assert pinned["dataloader_pin_memory"] is True
    assert pinned["accelerator_config"] == {"non_blocking": True}
    unpinned = hf.training_arguments(tuned_result(num_workers=2))
    assert "accelerator_config" not in unpinned


def test_a_trainer_built_from_them_copies_without_blocking(tmp_path: Path) -> None:
    tuned = hf.training_arguments(tuned_result(batch_size=8, num_workers=1, pin_memory=True))
    trainer = Trainer(
        model=tiny_bert(),
        args=arguments(tmp_path, **tuned),
        train_dataset=Sentences(),
        data_collator=pad,
    )
    assert trainer.accelerator.non_blocking is True
    plain = Trainer(model=tiny_bert(), args=arguments(tmp_path), train_dataset=Sentences())
    assert plain.accelerator.non_blocking is False  # accelerate's default: what was wrong


def test_the_tuned_trainer_copies_pinned_batches_without_blocking(tmp_path: Path) -> None:
    # Arguments built without training_arguments: the trainer still copies as measured.
    pinned = tuned_result(batch_size=8, pin_memory=True)
    trainer = hf.TunedTrainer(
        model=tiny_bert(),
        args=arguments(tmp_path, per_device_train_batch_size=8),
        train_dataset=Sentences(),
        data_collator=pad,
        result=pinned,
    )
    assert trainer.accelerator.non_blocking is True
    unpinned = hf.TunedTrainer(
        model=tiny_bert(),
        args=arguments(tmp_path, per_device_train_batch_size=8),
        train_dataset=Sentences(),
        data_collator=pad,
        result=tuned_result(batch_size=8),
    )
    assert unpinned.accelerator.non_blocking is False
