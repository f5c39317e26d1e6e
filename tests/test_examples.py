"""Every example config runs, with a tiny budget, so none of them rots."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import quick

import autotune

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path: Path, workdir: Path) -> None:
    result = autotune.search(path, **quick(trials=2, max_windows=2, seed=0))
    assert result.samples_per_s > 0
    assert result.baseline is not None
    assert (workdir / "studies" / f"{path.stem}.db").exists()


def test_there_are_examples() -> None:
    assert any(p.name == "quickstart.py" for p in EXAMPLES)
