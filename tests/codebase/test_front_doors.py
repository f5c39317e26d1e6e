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


MOST_NAMES = 12
"""A stage's front door holds about ten names: what other stages need of it, no more."""
WIDER: dict[str, tuple[int, str]] = {
    "decide": (
        22,
        "the budget's plan counts the probes of confirming, the runoff and DDP from it",
    ),
    "probe": (21, "every stage passes its records (requests, figures, failures, windows)"),
    "explore": (14, "the pipeline runs the bounds and the worker sweep, and plans their cost"),
    "machine": (15, "the probe places ranks by its GPUs, topology and monitor"),
    "settings": (14, "the space, the probe and the output each read the settings' rules"),
    "study": (24, "the search, the CLI and the online loader each open and read studies"),
}
"""Stages allowed past :data:`MOST_NAMES`, each at its own cap and for its reason: a cap
here is lowered when a name leaves, never raised to let one in."""


def cap(stage: str) -> int:
    """The most names ``stage``'s ``__all__`` may hold."""
    return WIDER[stage][0] if stage in WIDER else MOST_NAMES


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_exports_no_more_names_than_its_cap(stage: str) -> None:
    exported = importlib.import_module(f"autotune.{stage}").__all__
    assert len(exported) <= cap(stage), sorted(exported)


def test_a_wider_cap_is_what_its_stage_exports_today() -> None:
    """A wider cap above its stage's count would let a name in unnoticed."""
    for stage, (most, reason) in WIDER.items():
        assert stage in STAGES and reason
        assert len(importlib.import_module(f"autotune.{stage}").__all__) == most, stage
        assert most > MOST_NAMES
