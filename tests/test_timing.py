"""Timing on a device, with stand-ins for the device boundary: the synchronize of any
accelerator module, the copy timed apart from the wait, the batch's samples counted
from its sampler."""

from __future__ import annotations

import types

import pytest
import torch

from autotune.probe import Figures, Window
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


# --------------------------------------------------------------------- the record
def test_windows_written_before_the_copy_was_measured_still_load() -> None:
    old = {"index": 0, "seconds": 2.0, "samples": 64, "fresh": 64, "steps": 2}
    figures = Figures.from_dict({"windows": [{**old, "wait_seconds": 0.5}]})
    assert figures.windows[0].copy_seconds == 0.0
    assert figures.copy_fraction == 0.0
    assert figures.wait_fraction == pytest.approx(0.25)


def test_the_copy_share_is_recorded_beside_the_wait_share() -> None:
    window = Window(
        index=0, seconds=2.0, samples=64, fresh=64, steps=2, wait_seconds=0.5, copy_seconds=0.2
    )
    data = Figures(windows=(window,)).to_dict()
    assert data["copy_fraction"] == pytest.approx(0.1)
    assert data["wait_fraction"] == pytest.approx(0.25)
    assert Figures.from_dict(data).windows == (window,)
