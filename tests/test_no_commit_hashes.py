"""The package's text states contracts: no word under autotune/ names a commit of this
repository (a run's evidence and the commit it ran at belong in docs/decisions.md)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEX_WORD = re.compile(r"\b[0-9a-fA-F]{7,40}\b")


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
def test_no_word_under_autotune_names_a_commit() -> None:
    paths = sorted((ROOT / "autotune").rglob("*.py"))
    assert len(paths) > 50, "the package's modules were not found"
    words = sorted({word for path in paths for word in HEX_WORD.findall(path.read_text())})
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
