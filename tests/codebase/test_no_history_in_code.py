"""The code and its configuration state contracts, not history: no word under autotune/,
benchmarks/ or tools/, in pyproject.toml, mkdocs.yml, benchmarks/README.md or .ci/ names a
commit or dates a figure (a run's evidence, its date and the commit it ran at belong in
docs/benchmark-history.md, the reasons behind a rule in docs/decisions.md)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CODE = ("autotune", "benchmarks", "tools")
CONFIG = ("pyproject.toml", "mkdocs.yml", "benchmarks/README.md")
HEX_WORD = re.compile(r"\b[0-9a-fA-F]{7,40}\b")
"""Any word that could abbreviate a commit; git says which do (all digits included)."""
COMMIT_HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
"""A commit as git prints one, 7 to 40 lowercase hex digits with a letter and a digit
among them: known without a checkout."""
_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?"
DATED = re.compile(
    r"\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])\b"  # 2026-11-28
    rf"|\b{_MONTH} (?:\d{{1,2}}, )?(?:19|20)\d\d\b"  # November 2026, Nov 28, 2026
    rf"|\b\d{{1,2}} {_MONTH} (?:19|20)\d\d\b"  # 28 November 2026
    r"|\b(?:at|from|until|till|by) [0-2]?\d:[0-5]\d\b"  # at 16:40
    r"|(?<![\d:])0\d:[0-5]\d(?![\d:])"  # 09:21, not 1:02:03
    r"|\d[T ][0-2]\d:[0-5]\d"  # 2026-11-23T17:50
)
"""A date or a time of day; durations (0:42, 12:05, 1:02:03) are not dated."""


def scanned(root: Path) -> list[Path]:
    """The code (Python and TOML files under :data:`CODE`) and the configuration."""
    paths = [
        p
        for folder in CODE
        for pattern in ("*.py", "*.toml")
        for p in (root / folder).rglob(pattern)
    ]
    paths += [root / name for name in CONFIG if (root / name).exists()]
    paths += [p for p in (root / ".ci").rglob("*") if p.is_file()]
    return sorted(paths)


def history_in(root: Path) -> list[str]:
    """``path:line: words`` for every line of :func:`scanned` that names a commit or a date."""
    found = []
    for path in scanned(root):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            words = COMMIT_HASH.findall(line) + DATED.findall(line)
            if words:
                found.append(f"{path.relative_to(root).as_posix()}:{number}: {', '.join(words)}")
    return found


def test_no_history_in_the_code_or_its_configuration() -> None:
    assert len(scanned(ROOT)) > 150, "the code's files were not found"
    assert history_in(ROOT) == []


def test_the_check_finds_history_where_it_is_planted(tmp_path: Path) -> None:
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "tools").mkdir()
    (tmp_path / ".ci").mkdir()
    (tmp_path / "benchmarks" / "_rounds.py").write_text(
        '"""The default read 8,740 samples/s at 1ed0a02.\n'
        "Durations read 0:42, 12:05, 1:02:03;\n"
        '0x7fffffff, 1234567 and "acceded" name no commit."""\n'
    )
    (tmp_path / "tools" / "t.toml").write_text("# measured 2026-11-28\n")
    (tmp_path / "pyproject.toml").write_text("# -n 3 at 09:21, 274 s\n")
    (tmp_path / ".ci" / "run").write_text("pytest  # 386 s at 16:40 (November 2026)\n")
    assert history_in(tmp_path) == [
        ".ci/run:1: at 16:40, November 2026",
        "benchmarks/_rounds.py:1: 1ed0a02",
        "pyproject.toml:1: at 09:21",
        "tools/t.toml:1: 2026-11-28",
    ]


def _in_a_checkout() -> bool:
    if shutil.which("git") is None:
        return False
    done = subprocess.run(
        ["git", "rev-parse", "--is-inside-work-tree"], cwd=ROOT, capture_output=True, text=True
    )
    return done.returncode == 0 and done.stdout.strip() == "true"


def _commits(words: list[str]) -> list[str]:
    """The words that ``git cat-file -e WORD^{commit}`` finds (one batch, same answer)."""
    query = "".join(f"{word}^{{commit}}\n" for word in words)
    done = subprocess.run(
        ["git", "cat-file", "--batch-check"],
        cwd=ROOT,
        input=query,
        capture_output=True,
        text=True,
        check=True,
    )
    answers = done.stdout.splitlines()
    assert len(answers) == len(words), done.stdout
    return [word for word, answer in zip(words, answers, strict=True) if "missing" not in answer]


@pytest.mark.skipif(not _in_a_checkout(), reason="needs a git checkout to know its commits")
def test_no_word_in_the_code_names_a_commit() -> None:
    words = sorted({word for path in scanned(ROOT) for word in HEX_WORD.findall(path.read_text())})
    assert _commits(words) == []


@pytest.mark.skipif(not _in_a_checkout(), reason="needs a git checkout to know its commits")
def test_the_check_finds_a_commit_when_one_is_named() -> None:
    head = subprocess.run(
        ["git", "rev-parse", "--short=7", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert _commits([head, "0000000"]) == [head]
