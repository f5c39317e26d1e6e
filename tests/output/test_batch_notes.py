"""A chosen batch other than the user's: the accumulation steps that keep the user's
batch, and the learning-rate note where they cannot (``autotune/result/_launch.py``,
``SearchResult.batch_notes`` and ``to_code``)."""

from __future__ import annotations

import pytest
from tuned import tuned_result

from autotune.result._launch import accumulation_steps


@pytest.mark.parametrize(
    ("user", "step", "steps"),
    [
        (32, 16, 2),
        (32, 8, 4),
        (32, 32, 1),  # the user's own batch
        (32, 64, 1),  # larger: accumulating cannot shrink it
        (32, 24, 1),  # no whole count of 24 makes 32
        (48, 32, 1),
    ],
)
def test_accumulation_keeps_the_users_batch_only_in_whole_steps(
    user: int, step: int, steps: int
) -> None:
    assert accumulation_steps(user, step) == steps


def test_a_smaller_batch_that_divides_the_users_is_accumulated_back_to_it() -> None:
    result = tuned_result(batch_size=16, user_batch_size=32)
    assert result.gradient_accumulation_steps == 2
    assert result.global_batch_size == 32
    assert result.lr_note() is None  # the global batch is the user's: the rate stands
    line = (
        "gradient_accumulation_steps = 2: step the optimizer every 2 batches to keep your "
        "global batch of 32"
    )
    assert result.batch_notes() == [line]
    code = result.to_code()
    assert f"# {line}\n" in code
    compile(code, "<tuned>", "exec")


def test_a_larger_batch_gets_a_learning_rate_note_and_no_accumulation() -> None:
    result = tuned_result(batch_size=64, user_batch_size=32)
    assert result.gradient_accumulation_steps == 1
    assert result.global_batch_size == 64
    assert result.batch_notes() == [
        "learning rate: the batch is 64, 2x the 32 you train with: by the linear scaling "
        "rule, multiply the learning rate by 2 (with a few epochs of warm-up when it grows)."
    ]
    assert "# learning rate: the batch is 64, 2x" in result.to_code()


def test_a_smaller_batch_that_does_not_divide_the_users_gets_the_note() -> None:
    result = tuned_result(batch_size=24, user_batch_size=32)
    assert result.gradient_accumulation_steps == 1
    assert result.global_batch_size == 24
    (note,) = result.batch_notes()
    assert note.startswith("learning rate: the batch is 24, 0.75x the 32 you train with")
    assert "multiply the learning rate by 0.75" in note


def test_the_users_own_batch_needs_no_note() -> None:
    result = tuned_result(batch_size=32, user_batch_size=32)
    assert result.batch_notes() == []
    code = result.to_code()
    assert "gradient_accumulation_steps" not in code and "learning rate" not in code
