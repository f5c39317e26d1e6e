"""The fork server probes start from preloads only modules that leave CUDA alone: a module
that initialises CUDA at import (or queries it, which marks every forked child as unable
to use it) would make every probe fail. The device is faked only at its boundary: modules
that mark torch's CUDA state as a real initialisation would."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from autotune.probe import _preload

INITIALISES = """
import torch.cuda
torch.cuda._initialized = True  # what torch.cuda.init() leaves behind
"""
POISONS_FORK = """
import os
import torch.cuda
# What torch.cuda.is_available() does on a CUDA build: a forked child can no longer use CUDA.
os.register_at_fork(after_in_child=lambda: setattr(torch.cuda, "_is_in_bad_fork", lambda: True))
"""
HARMLESS = """
import torch
VALUE = torch.zeros(1)
"""


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, source in (
        ("fake_cuda_init", INITIALISES),
        ("fake_cuda_query", POISONS_FORK),
        ("fake_harmless", HARMLESS),
    ):
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setattr(_preload, "cuda_built", lambda: True)
    _preload.cuda_safe.cache_clear()
    return tmp_path


def test_modules_that_touch_cuda_at_import_are_not_preloaded(modules, monkeypatch) -> None:
    checks = []
    run = _preload.subprocess.run

    def counted(*args, **kwargs):
        checks.append(args)
        return run(*args, **kwargs)

    monkeypatch.setattr(_preload.subprocess, "run", counted)
    with pytest.warns(RuntimeWarning) as warned:
        assert _preload.cuda_safe(("fake_cuda_init", "fake_harmless", "fake_cuda_query")) == (
            "fake_harmless",
        )
    assert sorted(str(w.message).split(" touches CUDA")[0] for w in warned) == [
        "importing fake_cuda_init",
        "importing fake_cuda_query",
    ]
    assert len(checks) == 1  # one interpreter (one import of torch) checks them all


def test_when_the_check_fails_nothing_is_preloaded_and_a_warning_says_why(
    modules, monkeypatch
) -> None:
    monkeypatch.setattr(_preload, "_CHECK", "raise SystemExit('no torch here')")
    with pytest.warns(RuntimeWarning, match=r"could not check whether importing fake_harmless"):
        assert _preload.cuda_safe(("fake_harmless",)) == ()


def test_modules_that_leave_cuda_alone_are_preloaded(modules) -> None:
    assert _preload.cuda_safe(("fake_harmless", "not_a_module")) == (
        "fake_harmless",
        "not_a_module",  # the fork server skips what does not import; so do the probes
    )


def test_without_cuda_in_torch_nothing_is_checked(modules, monkeypatch) -> None:
    monkeypatch.setattr(_preload, "cuda_built", lambda: False)
    _preload.cuda_safe.cache_clear()
    # A CPU-only torch has no CUDA to initialise: no subprocess, the modules as given.
    monkeypatch.setattr(_preload.subprocess, "run", None)
    assert _preload.cuda_safe(("fake_cuda_init",)) == ("fake_cuda_init",)
