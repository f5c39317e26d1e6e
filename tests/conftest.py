"""Shared fixtures: a scratch working directory, quick search options, leak checks."""

from __future__ import annotations

import dataclasses
import io
import os
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

TESTS = Path(__file__).parent
# Probes unpickle test workloads by module name; make `workloads` importable everywhere.
sys.path.insert(0, str(TESTS))

QUICK = {
    "window_seconds": 0.1,
    "max_windows": 3,
    "warmup_seconds": 0.05,
    "trial_timeout": 20.0,
    "ceilings": False,
}
"""Search options that keep a test search to a few seconds."""


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in a temporary directory, so studies/ lands there."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def write_config(workdir: Path) -> Callable[..., Path]:
    """Write a config file from source text; returns its path."""

    def write(source: str, name: str = "config.py") -> Path:
        path = workdir / name
        header = f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n"
        path.write_text(header + textwrap.dedent(source))
        return path

    return write


def _probe_processes() -> list[psutil.Process]:
    """Processes started by probes: every descendant of this process except the
    long-lived helpers themselves (the fork server, the resource tracker)."""
    helpers = set()
    for child in psutil.Process().children():
        try:
            cmdline = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "forkserver" in cmdline or "resource_tracker" in cmdline:
            helpers.add(child.pid)
    return [p for p in psutil.Process().children(recursive=True) if p.pid not in helpers]


@pytest.fixture(autouse=True)
def no_leftover_processes() -> Iterator[None]:
    """Every test must leave no probe or DataLoader worker behind."""
    yield
    leftovers = _probe_processes()
    if leftovers:
        _gone, alive = psutil.wait_procs(leftovers, timeout=5)
        assert not alive, f"processes left behind: {[p.pid for p in alive]}"


def quick(**overrides: object) -> dict[str, object]:
    """QUICK options with overrides."""
    return {**QUICK, **overrides}


os.environ.setdefault("PYTHONHASHSEED", "0")


@dataclasses.dataclass(frozen=True)
class SmallStudy:
    """A real study of a tiny search with every ceiling measured, and its progress lines."""

    path: Path
    progress: str


@pytest.fixture(scope="session")
def small_study(tmp_path_factory: pytest.TempPathFactory) -> SmallStudy:
    """One tiny real search (I/O-bound items, so workers help), shared by report and
    progress tests; read it, do not change it."""
    import workloads

    import autotune

    path = tmp_path_factory.mktemp("small_study") / "small.db"
    stream = io.StringIO()
    autotune.search(
        dataset=workloads.sleepy_dataset,
        model=workloads.linear_model,
        batch_size=8,
        name="small",
        space={"num_workers": [0, 1, 2], "threads": 1, "batch_size": [8, 16]},
        progress=autotune.LineProgress(stream),
        **quick(trials=6, seed=0, study=str(path), ceilings=True),
    )
    return SmallStudy(path=path, progress=stream.getvalue())
