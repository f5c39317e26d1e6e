"""No function in the library is longer than a screen: a long one is split into named steps.

Parameters are held to eight by ruff (``PLR0913``, ``max-args`` in pyproject.toml); the
length is held here, as ruff counts statements, not lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

import autotune

MOST_LINES = 60
"""The most lines of code a function may span, its docstring not counted: the docstring is
the contract, and a public function's arguments are documented there in full."""


def _code_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from ``def`` to the function's last line, less those of its docstring."""
    lines = (function.end_lineno or function.lineno) - function.lineno + 1
    first = function.body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        lines -= (first.end_lineno or first.lineno) - first.lineno + 1
    return lines


def long_functions(root: Path) -> list[str]:
    """``path:line name (lines)`` for each function under ``root`` over :data:`MOST_LINES`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = _code_lines(node)
                if lines > MOST_LINES:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines})")
    return found


def test_no_function_in_the_library_is_over_sixty_lines() -> None:
    assert long_functions(Path(autotune.__file__).parent) == []


def test_the_scan_finds_a_long_function_and_leaves_its_docstring_out(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MOST_LINES - 1))
    docstring = '    """A contract.\n\n    Over several lines.\n    """\n'
    (tmp_path / "fits.py").write_text(f"def fits():\n{docstring}{body}\n")
    (tmp_path / "long.py").write_text(f"def long():\n{body}\n    x = 0\n    y = 1\n")
    assert long_functions(tmp_path) == [f"long.py:1 long ({MOST_LINES + 2})"]
