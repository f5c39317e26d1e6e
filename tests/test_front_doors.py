"""Each stage's front door: its ``__all__`` names what other stages import, and it exists."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import autotune

STAGES = (
    "decide",
    "explore",
    "inloop",
    "integrations",
    "machine",
    "output",
    "pipeline",
    "probe",
    "progress",
    "result",
    "settings",
    "space",
    "study",
    "workload",
)


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_exports_names_that_exist(stage: str) -> None:
    module = importlib.import_module(f"autotune.{stage}")
    exported = module.__all__
    assert len(set(exported)) == len(exported)
    assert [name for name in exported if not hasattr(module, name)] == []
    assert [name for name in exported if name.startswith("_")] == []


def _type_checking_imports() -> dict[str, str]:
    """The names autotune/__init__.py imports for type checkers, and where from."""
    tree = ast.parse(Path(autotune.__file__).read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If))
    return {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


def test_the_package_names_its_public_names_once_for_type_checkers_and_at_run_time() -> None:
    imports = _type_checking_imports()
    assert sorted([*imports, "__version__"]) == sorted(autotune.__all__)
    for name, home in imports.items():
        assert getattr(autotune, name) is getattr(importlib.import_module(home), name), name
