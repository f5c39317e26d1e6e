"""Every example runs, with a tiny budget, so none of them rots: the config files through
``autotune.search``, the framework programs with ``python``, and the online example as a
script too, as its docstring tells a user to run it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import quick

import autotune

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
NEEDS = {"hf_trainer.py": "transformers", "lightning_module.py": "pytorch_lightning"}
"""Programs that are not config files, and the framework each needs: its test is skipped
without it (the extra is optional)."""
PROGRAMS = [p for p in EXAMPLES if p.name in NEEDS]
CONFIGS = [p for p in EXAMPLES if p.name not in NEEDS]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_example_runs(path: Path, workdir: Path) -> None:
    result = autotune.search(path, **quick(trials=2, max_windows=2, seed=0))
    assert result.samples_per_s > 0
    assert result.baseline is not None
    assert (workdir / "studies" / f"{path.stem}.db").exists()


@pytest.mark.scaleout
@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.name)
def test_example_program_runs(path: Path, workdir: Path) -> None:
    needed = NEEDS.get(path.name)
    if needed is not None and importlib.util.find_spec(needed) is None:
        pytest.skip(f"{path.name} needs {needed}, which is not installed")
    # This checkout's autotune, whatever is installed.
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    process = subprocess.run(
        [sys.executable, str(path)],
        cwd=workdir,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    assert "tuned: " in process.stdout
    assert "steps on the tuned loader" in process.stdout
    assert (workdir / "studies" / f"{path.stem}.db").exists()


def test_there_are_examples() -> None:
    assert any(p.name == "quickstart.py" for p in CONFIGS)
    assert {p.name for p in PROGRAMS} == set(NEEDS)


def test_the_online_example_trains_settles_and_records(workdir: Path) -> None:
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    run = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "online_loop.py"), "--steps", "200",
         "--record", "studies/online_loop.db"],
        cwd=workdir,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "trained 200 steps" in run.stdout
    assert "online: settled on" in run.stderr
    result = autotune.load(workdir / "studies" / "online_loop.db", check_machine=False)
    assert result.settings.batch_size == 32 and not result.confirmed
    assert result.baseline is not None and result.baseline.settings.num_workers == 0
    assert f"loader settled on: {result.settings.describe()}" in run.stdout
