"""A model built on CUDA (as the Hugging Face integration hands over ``trainer.model``)
travels to each probe pickled with its CUDA storages. The probe restores every storage
on the CPU, and moves the model to its own device once: one copy of the weights per
probe or rank on its own GPU, none beside it on the GPU the storages came from.

The device boundary is faked: storages are pickled as if they lived on ``cuda:0``
(their location tag), which a CPU-only torch refuses to restore there."""

from __future__ import annotations

import copy
import dataclasses
import functools
import pickle

import pytest
import torch
import workloads
from faults import probe_request
from torch import nn

from autotune.probe import WorkloadSource, run_probe
from autotune.probe._build import make_model, materialize
from autotune.workload._workload import Workload


def pickled_on_cuda(monkeypatch: pytest.MonkeyPatch, value: object) -> bytes:
    """``value`` pickled as if its tensors' storages lived on ``cuda:0``."""
    with monkeypatch.context() as patch:
        patch.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        return pickle.dumps(value)


def handed_over_workload() -> Workload:
    """A workload whose model is a copy of a model built already, as ``hf.py`` makes it."""
    built = workloads.linear_model()
    return Workload(
        dataset=workloads.SleepyDataset(length=64),
        model=functools.partial(copy.deepcopy, built),
        batch_size=4,
    )


def test_storages_pickled_on_cuda_are_what_a_plain_unpickle_puts_on_cuda(monkeypatch) -> None:
    # The boundary the fix stands on: without a map to the CPU, torch restores the
    # storages on the device they were pickled from.
    data = pickled_on_cuda(monkeypatch, handed_over_workload())
    with pytest.raises(RuntimeError, match="CUDA"):
        pickle.loads(data)


def test_the_probe_restores_a_workload_pickled_on_cuda_on_the_cpu(monkeypatch) -> None:
    workload = materialize(
        WorkloadSource(pickled=pickled_on_cuda(monkeypatch, handed_over_workload()))
    )
    shipped = workload.model.args[0]  # the model the factory copies
    assert {p.device.type for p in shipped.parameters()} == {"cpu"}
    model = make_model(workload, torch.device("cpu"))
    assert model is not shipped  # the probe trains a copy; the shipped one stays on the CPU


def test_restored_values_are_the_pickled_ones(monkeypatch) -> None:
    layer = nn.Linear(3, 2)
    data = pickled_on_cuda(
        monkeypatch,
        Workload(dataset=workloads.sleepy_dataset, model=functools.partial(copy.deepcopy, layer)),
    )
    restored = materialize(WorkloadSource(pickled=data)).model()
    assert torch.equal(restored.weight, layer.weight) and torch.equal(restored.bias, layer.bias)


def test_a_probe_of_a_model_pickled_on_cuda_trains_on_its_own_device(monkeypatch) -> None:
    data = pickled_on_cuda(monkeypatch, handed_over_workload())
    request = dataclasses.replace(
        probe_request(workloads.SleepyDataset(length=64)), source=WorkloadSource(pickled=data)
    )
    result = run_probe(request)
    assert result.ok, result.failure
    assert result.figures.windows
