"""A search writes its study and nothing else: not beside the config, not in the working
directory, not in the home directory (temp files are checked by the autouse fixtures)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import TESTS
from faults import Case

from autotune._workload import load_config

SCRIPT = """
import json, sys
import autotune, workloads
from autotune.cli import main
assert main(["search", sys.argv[1], "--study", sys.argv[2]]) == 0
autotune.search(**json.loads(sys.argv[3]), dataset=workloads.sleepy_dataset,
                model=workloads.linear_model, study=sys.argv[4])
"""


def listing(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


def test_a_search_writes_only_its_study(tmp_path: Path) -> None:
    cwd, home, configs, studies = (tmp_path / d for d in ("cwd", "home", "configs", "studies"))
    for directory in (cwd, home, configs, studies):
        directory.mkdir()
    case = Case()
    (configs / "fault.py").write_text(case.config())
    keywords = {k: v for k, v in case.api_kwargs().items() if k not in ("dataset", "model")}
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT,
            str(configs / "fault.py"),
            str(studies / "cli.db"),
            json.dumps(keywords),
            str(studies / "api.db"),
        ],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(TESTS), "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert listing(cwd) == []
    assert listing(home) == []
    assert listing(configs) == ["fault.py"]  # no __pycache__ beside the config
    assert listing(studies) == ["api.db", "cli.db"]


def test_loading_a_config_leaves_no_bytecode_beside_it(write_config, monkeypatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # as Python runs by default
    path = write_config("from workloads import sleepy_dataset as dataset, linear_model as model")
    load_config(path)
    assert listing(path.parent) == [path.name]
    assert sys.dont_write_bytecode is False
