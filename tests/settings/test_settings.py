"""Settings: validation, and the forms they take (kwargs, JSON, code, a loader)."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.data import DataLoader
from workloads import SleepyDataset, SleepyStream

from autotune import ConfigError, EchoLoader, Settings


def test_dataloader_kwargs_hold_worker_knobs_only_with_workers() -> None:
    assert Settings(batch_size=8).dataloader_kwargs() == {
        "batch_size": 8,
        "num_workers": 0,
        "pin_memory": False,
    }
    kwargs = Settings(batch_size=8, num_workers=2, prefetch_factor=4, persistent_workers=True)
    assert kwargs.dataloader_kwargs() == {
        "batch_size": 8,
        "num_workers": 2,
        "pin_memory": False,
        "persistent_workers": True,
        "prefetch_factor": 4,
    }


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"batch_size": 0}, "batch_size is 0"),
        ({"num_workers": -2}, "num_workers is -2"),
        ({"prefetch_factor": 2}, "need num_workers > 0"),
        ({"num_workers": 1, "prefetch_factor": 0}, "prefetch_factor is 0"),
        ({"amp": "fp8"}, "amp is 'fp8'"),
        ({"echo": 0}, "echo is 0"),
        ({"threads": 0}, "threads is 0"),
    ],
)
def test_invalid_settings_say_what_was_given(fields, message) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings(**{"batch_size": 4, **fields})


def test_json_round_trip() -> None:
    settings = Settings(
        batch_size=8, num_workers=2, prefetch_factor=4, amp="bf16", echo=2, threads=1
    )
    data = json.loads(json.dumps(settings.to_dict()))
    assert Settings.from_dict(data) == settings
    with pytest.raises(ConfigError, match="unknown settings"):
        Settings.from_dict({**data, "shuffle": True})


def test_code_builds_the_same_loader() -> None:
    settings = Settings(
        batch_size=8, num_workers=2, prefetch_factor=4, persistent_workers=True, threads=1
    )
    code = settings.to_code()
    namespace = {"dataset": SleepyDataset(length=16)}
    before = torch.get_num_threads()
    try:
        exec(compile(code, "<settings>", "exec"), namespace)
    finally:
        torch.set_num_threads(before)
    loader = namespace["loader"]
    assert isinstance(loader, DataLoader)
    assert (loader.batch_size, loader.num_workers, loader.prefetch_factor) == (8, 2, 4)
    assert loader.persistent_workers


def test_loader_applies_the_settings_and_overrides() -> None:
    settings = Settings(batch_size=8, num_workers=1, prefetch_factor=3)
    loader = settings.loader(SleepyDataset(length=20), drop_last=True)
    assert isinstance(loader, DataLoader)
    assert loader.num_workers == 1 and loader.prefetch_factor == 3 and loader.drop_last
    assert len(list(loader)) == 2


def test_iterable_datasets_are_not_shuffled() -> None:
    loader = Settings(batch_size=4).loader(SleepyStream(length=8))
    first = next(iter(loader))[0]
    assert first[:, 0].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_echo_loader_repeats_each_batch() -> None:
    loader = Settings(batch_size=5, echo=3).loader(SleepyDataset(length=10), shuffle=False)
    assert isinstance(loader, EchoLoader)
    assert len(loader) == 6
    batches = [b[1].tolist() for b in loader]
    assert batches[0] == batches[1] == batches[2] != batches[3]
    assert loader.dataset is loader.loader.dataset and loader.batch_size == 5


def test_the_batches_ahead_are_the_workers_by_their_prefetch_depth() -> None:
    # What the workers hand over at once when starting: the checker's warm-up and the
    # online loader's clock skip that many steps.
    assert Settings(batch_size=4, num_workers=16, persistent_workers=True).batches_ahead == 32
    assert Settings(batch_size=4, num_workers=3, prefetch_factor=4).batches_ahead == 12
    assert Settings(batch_size=4).batches_ahead == 0
