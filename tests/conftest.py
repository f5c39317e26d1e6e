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


def _is_helper(process: psutil.Process) -> bool:
    """A long-lived helper: a fork server or resource tracker that a fork server did not
    start (probes, forked from a fork server, share its command line), or one of Ray's
    own processes (its servers and workers, in the Ray tests)."""
    argv = process.cmdline()
    if process.name() in ("raylet", "gcs_server") or (argv and argv[0].startswith("ray::")):
        return True
    if any(arg.endswith(".py") and f"{os.sep}ray{os.sep}" in arg for arg in argv):
        return True  # Ray's monitors and agents
    cmdline = " ".join(argv)
    if "forkserver" not in cmdline and "resource_tracker" not in cmdline:
        return False
    parent = process.parent()
    return parent is None or "forkserver" not in " ".join(parent.cmdline())


def _probe_processes() -> list[psutil.Process]:
    """Processes started by probes: every descendant of this process but the helpers."""
    leftovers = []
    for process in psutil.Process().children(recursive=True):
        try:
            if not _is_helper(process):
                leftovers.append(process)
        except psutil.Error:
            continue
    return leftovers


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
# A local Ray otherwise turns token authentication on and writes a token under ~/.ray.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


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
