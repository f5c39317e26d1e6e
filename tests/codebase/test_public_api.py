"""The public surface: everything re-exported is listed, and nothing private leaks."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import autotune
import autotune.inloop
import autotune.pipeline
import autotune.probe
import autotune.settings


def test_all_is_complete_and_sorted() -> None:
    public = {name for name in dir(autotune) if not name.startswith("_")}
    # The stage packages and the CLI are submodules, reached by importing them; the API is
    # what autotune/__init__.py re-exports from them.
    modules = {name for name in public if isinstance(getattr(autotune, name), types.ModuleType)}
    assert {"inloop", "pipeline", "probe", "settings"} <= modules
    assert public - modules <= set(autotune.__all__)
    assert set(autotune.__all__) <= set(dir(autotune))
    assert autotune.__all__ == sorted(autotune.__all__)
    assert all(getattr(autotune, name) is not None for name in autotune.__all__)


def test_a_stage_imports_without_the_stages_above_it() -> None:
    # The public names load on first use, so a tool that reads configs and settings
    # (the benchmark's plain-loop checker) does not load the probe or the search.
    code = (
        "import autotune.settings, autotune.workload._workload, sys; "
        "print(sorted(m for m in sys.modules if m.startswith('autotune.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # A stage's front door loads its own modules; no stage above settings and workload,
    # beside the foundation every layer may read (errors, formatting, noise, stage names).
    loaded = eval(done.stdout)
    foundation = ("autotune._errors", "autotune._format", "autotune._noise", "autotune._stages")
    below = (*foundation, "autotune.settings", "autotune.workload")
    assert "autotune.workload._workload" in loaded
    assert [m for m in loaded if m.split(".")[1] not in {b.split(".")[1] for b in below}] == []


def test_errors_share_one_base() -> None:
    for name in ("ConfigError", "SpaceError", "StudyError", "WorkloadError", "MissingExtraError"):
        assert issubclass(getattr(autotune, name), autotune.AutotuneError)


def test_import_autotune_imports_no_optional_framework() -> None:
    # The integrations' frameworks are extras: `import autotune` must work, and stay
    # fast, without them. A new process, as this one has imported them for other tests.
    frameworks = ("transformers", "accelerate", "pytorch_lightning", "lightning")
    code = f"import sys, autotune; print([m for m in {frameworks!r} if m in sys.modules])"
    root = str(Path(__file__).parents[2])
    paths = [root, *filter(None, [os.environ.get("PYTHONPATH")])]
    process = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert process.returncode == 0, process.stderr
    assert process.stdout.strip() == "[]"
