"""One source for the tolerance: ``autotune._noise.DEFAULT_TOLERANCE`` is the only 0.03
in autotune/, benchmarks/ and tools/, and every default that means it reads it."""

from __future__ import annotations

import ast
from pathlib import Path

from autotune import SearchResult, Settings
from autotune._noise import DEFAULT_TOLERANCE
from autotune.inloop._climb import ClimbOptions
from autotune.machine import detect_machine
from autotune.probe import Figures
from autotune.workload import SearchOptions
from benchmarks.common._verdicts import CLEAR_MARGIN

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("autotune", "benchmarks", "tools")
HOME = "autotune/_noise.py"
OTHER_RULES = {
    ("autotune/inloop/_climb.py", "IDLE_WAIT"): "seconds a worker may idle, not a fraction",
    ("benchmarks/common/_checker.py", "GAP_SHARE"): "the checker's timing resolution",
    ("benchmarks/suite/_strategies.py", "GREEDY_MIN_GAIN"): "the greedy baseline's own rule",
}
"""Constants that happen to be 0.03 and are not the tolerance, each with what it is."""


def _named_rules(tree: ast.Module, path: str) -> set[int]:
    """The ids of the 0.03 constants assigned to a name of :data:`OTHER_RULES`."""
    allowed = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        if any((path, name) in OTHER_RULES for name in names):
            allowed.add(id(value))
    return allowed


def tolerance_literals(root: Path) -> list[str]:
    """``path:line`` of every float literal equal to 0.03 (written 0.03, .03, 3e-2...) in
    the Python files under ``root``'s scanned folders, but the home module and the
    named other rules."""
    found = []
    for folder in SCANNED:
        for file in sorted((root / folder).rglob("*.py")):
            path = file.relative_to(root).as_posix()
            if path == HOME:
                continue
            tree = ast.parse(file.read_text(), filename=path)
            allowed = _named_rules(tree, path)
            found += [
                f"{path}:{node.lineno}"
                for node in ast.walk(tree)
                if isinstance(node, ast.Constant)
                and type(node.value) is float
                and node.value == DEFAULT_TOLERANCE
                and id(node) not in allowed
            ]
    return found


def test_the_tolerance_is_written_once() -> None:
    assert (ROOT / HOME).read_text().count(f"DEFAULT_TOLERANCE = {DEFAULT_TOLERANCE}") == 1
    assert tolerance_literals(ROOT) == []


def test_the_check_finds_a_tolerance_written_again(tmp_path: Path) -> None:
    (tmp_path / "autotune").mkdir()
    (tmp_path / "benchmarks" / "suite").mkdir(parents=True)
    (tmp_path / "tools").mkdir()
    (tmp_path / HOME).write_text("DEFAULT_TOLERANCE = 0.03\n")
    (tmp_path / "autotune" / "_options.py").write_text("x = 1\ntolerance: float = 0.03\n")
    (tmp_path / "benchmarks" / "suite" / "_strategies.py").write_text(
        "GREEDY_MIN_GAIN = 0.03\nMARGIN = 3e-2\n"
    )
    (tmp_path / "tools" / "t.py").write_text("within = [b for b in (.03, 0.05)]\n")
    assert tolerance_literals(tmp_path) == [
        "autotune/_options.py:2",
        "benchmarks/suite/_strategies.py:2",
        "tools/t.py:1",
    ]


def test_every_default_tolerance_is_the_one() -> None:
    assert SearchOptions().tolerance == DEFAULT_TOLERANCE
    assert ClimbOptions(max_workers=1).tolerance == DEFAULT_TOLERANCE
    assert CLEAR_MARGIN == DEFAULT_TOLERANCE


def test_a_result_saved_without_a_tolerance_reads_the_default() -> None:
    """A result written by hand or by an older autotune without the field was chosen under
    the default: it reads as that, not as 0%."""
    result = SearchResult(
        settings=Settings(batch_size=8),
        figures=Figures(),
        device="cpu",
        machine=detect_machine(None),
    )
    assert result.tolerance == DEFAULT_TOLERANCE
    saved = result.to_dict()
    del saved["tolerance"]
    assert SearchResult.from_dict(saved).tolerance == DEFAULT_TOLERANCE
    assert SearchResult.from_dict({**saved, "tolerance": 0.05}).tolerance == 0.05
