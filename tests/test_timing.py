"""Timing on a device, with stand-ins for the device boundary: the synchronize of any
accelerator module, the copy timed apart from the wait, the batch's samples counted
from its sampler."""

from __future__ import annotations

import types

import pytest
import torch

from autotune.probe._timing import synchronize


class FakeAccelerator(types.SimpleNamespace):
    """A ``torch.<device type>`` module stand-in that counts its synchronize calls."""

    def __init__(self) -> None:
        super().__init__(calls=[])

    def synchronize(self, *args: object) -> None:
        self.calls.append(args)


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("mps", [()]),  # torch.mps.synchronize() takes no device
        ("xpu", [(torch.device("xpu", 1),)]),
        ("hpu", [()]),  # any accelerator module torch exposes with a synchronize
    ],
)
def test_synchronize_calls_the_device_modules_own(monkeypatch, kind, expected) -> None:
    fake = FakeAccelerator()
    monkeypatch.setattr(torch, kind, fake, raising=False)
    device = torch.device(kind, 1) if kind == "xpu" else torch.device(kind)
    synchronize(device)
    assert fake.calls == expected


def test_synchronize_passes_the_cuda_device(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: calls.append(args))
    synchronize(torch.device("cuda", 0))
    assert calls == [(torch.device("cuda", 0),)]


def test_synchronize_does_nothing_on_the_cpu_or_without_a_module(monkeypatch) -> None:
    synchronize(torch.device("cpu"))
    # A device type whose module has no synchronize (or no module at all) is left alone.
    monkeypatch.setattr(torch, "hpu", types.SimpleNamespace(), raising=False)
    synchronize(torch.device("hpu"))
    monkeypatch.delattr(torch, "hpu", raising=False)
    synchronize(torch.device("hpu"))
