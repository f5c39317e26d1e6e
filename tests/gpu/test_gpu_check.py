"""tools/gpu_check.py where there is no GPU: it says so in one line and exits 0, and its
parts are contained: one that fails or runs past its limit is recorded, and the next
one still runs."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).parents[2]
TOOL = ROOT / "tools" / "gpu_check.py"
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")


def load_tool():
    spec = importlib.util.spec_from_file_location("gpu_check", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_cuda_it_says_so_in_one_line_and_exits_0(tmp_path: Path) -> None:
    out = tmp_path / "check.json"
    done = subprocess.run(
        [sys.executable, str(TOOL), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: no CUDA"), done.stdout
    assert lines[0].endswith("nothing to check")
    assert not out.exists()


def test_a_part_that_fails_or_overruns_is_recorded_and_the_next_still_runs() -> None:
    tool = load_tool()
    results = tool.check(
        ["gpu_tests", "compute"], limits={"gpu_tests": 1.0, "compute": 90.0}, budget=200.0
    )
    overran, failed = results["gpu_tests"], results["compute"]
    assert not overran["ok"] and overran["error"].startswith("timed out after 1 s"), overran
    assert not failed["ok"] and failed["error"].startswith("exited with code 1"), failed
    assert "cuda" in failed["error"].lower(), failed  # the part's own error, not a blank


def test_parts_past_the_whole_budget_are_not_run() -> None:
    tool = load_tool()

    def never(name: str, limit: float) -> dict:
        raise AssertionError(f"{name} ran with {limit} s left")

    results = tool.check(["copy", "oom"], budget=4.0, run=never)
    assert results == {
        "copy": {"ok": False, "error": "not run: 4 s left of 4"},
        "oom": {"ok": False, "error": "not run: 4 s left of 4"},
    }


def test_missing_imports_without_wheels_say_how_to_carry_them(monkeypatch, tmp_path) -> None:
    tool = load_tool()
    monkeypatch.setattr(tool, "NEEDED", {"no_such_module_here": "no-such-dist"})
    monkeypatch.setattr(tool, "WHEEL_DIRS", (tmp_path / "wheels",))
    with pytest.raises(SystemExit, match="no-such-dist not installed and no wheels folder"):
        tool.install_missing(None)


def test_the_gpu_tier_starts_without_xdist_or_the_suite_s_addopts() -> None:
    # `-n 3` in addopts needs pytest-xdist, which the tier's command blocks (-p no:xdist)
    # as a GPU machine without it would: the tier must still be collected and run.
    counts = load_tool().gpu_tests()
    assert counts["exit_code"] == 0, counts
    assert counts["errors"] == 0 and counts["failures"] == 0, counts
    assert counts["tests"] > 0 and counts["skipped"] == counts["tests"], counts  # no CUDA


def test_the_amp_tests_model_is_compute_bound_even_on_an_h200() -> None:
    gpu_workloads = pytest.importorskip("gpu_workloads")
    with torch.device("meta"):  # its shapes only: 3 GB of float32 weights, never filled
        model = gpu_workloads.compute_bound_model()
    batch, inputs = 512, model[0].in_features
    # Forward and backward: 6 FLOP per weight per sample.
    flop = 6 * batch * sum(p.numel() for n, p in model.named_parameters() if "weight" in n)
    copied = batch * inputs * 4  # float32 inputs crossing to the device
    # An H200: about 990 TFLOP/s dense bf16 and 55 GB/s over PCIe 5: a step that is
    # compute-bound there needs more than 990e12 / 55e9 = 18,000 FLOP per byte copied,
    # and milliseconds of compute, so that an edge missing the queued kernels shows.
    assert flop / copied > 10 * 18_000
    assert flop / 990e12 > 2e-3
