"""One source for the search options: every SearchOptions field has a docstring, and a
command-line flag or a reason it has none; the flags, their help and the docs' table are
built from the fields."""

from __future__ import annotations

import dataclasses
import importlib.util
import types
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import autotune.pipeline
from autotune import SearchOptions
from autotune.cli import CONFIG_ONLY, SEARCH_FLAGS, flag_name, main

FIELDS = [field.name for field in dataclasses.fields(SearchOptions)]
ROOT = Path(__file__).resolve().parents[2]


def _reference_hook() -> ModuleType:
    """The docs site's hook, loaded from its file as MkDocs loads it."""
    spec = importlib.util.spec_from_file_location("reference", ROOT / "docs/hooks/reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _search_help(capsys: pytest.CaptureFixture[str]) -> str:
    """``autotune search --help``, its whitespace collapsed."""
    with pytest.raises(SystemExit):
        main(["search", "--help"])
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("name", FIELDS)
def test_every_option_has_a_flag_or_a_reason_for_none(name: str) -> None:
    in_flags, in_config_only = name in SEARCH_FLAGS, name in CONFIG_ONLY
    assert in_flags != in_config_only, (
        f"search option {name} must be in exactly one of cli.SEARCH_FLAGS (a flag) and "
        f"cli.CONFIG_ONLY (no flag, with the reason); it is in "
        f"{'both' if in_flags else 'neither'}."
    )
    if in_config_only:
        assert len(CONFIG_ONLY[name].split()) >= 5, f"{name}: give a reason, not a word"


def test_the_flag_tables_name_only_options() -> None:
    assert set(SEARCH_FLAGS) | set(CONFIG_ONLY) <= set(FIELDS)


@pytest.mark.parametrize("name", FIELDS)
def test_every_option_has_a_one_line_summary(name: str) -> None:
    doc = SearchOptions.field_docs().get(name)
    assert doc, f"search option {name} has no docstring under its field"
    summary, *rest = doc.split("\n")
    assert summary.endswith(".") and len(summary) <= 93, summary
    assert not rest or rest[0] == "", f"{name}: the summary is one line, then a blank line"


def test_the_docstrings_are_read_from_the_source() -> None:
    docs = SearchOptions.field_docs()
    assert list(docs) == FIELDS
    assert docs["tolerance"] == (
        "Configs within this fraction of the best count as equally fast; the cheapest wins."
    )


@pytest.mark.parametrize("name", list(SEARCH_FLAGS))
def test_the_help_of_each_flag_is_its_fields_summary_and_default(capsys, name: str) -> None:
    text = _search_help(capsys)
    summary = SearchOptions.field_docs()[name].split("\n")[0].rstrip(".")
    default = next(f.default for f in dataclasses.fields(SearchOptions) if f.name == name)
    assert flag_name(name) in text
    assert summary[1:] in text, f"{flag_name(name)}'s help is not its docstring's summary"
    if default is not None and default is not False:
        assert f"{summary[1:]} (default {default})" in text


def test_each_flag_reaches_its_option_with_the_options_type(monkeypatch, write_config) -> None:
    given = {
        "--trials": "5",
        "--timeout": "2.5",
        "--budget": "1m30s",
        "--study": "runs/a.db",
        "--study-name": "team",
        "--seed": "7",
        "--warm-from": "old.db",
        "--gpus": "0,1",
        "--ranks": "2",
        "--backend": "ray",
        "--address": "auto",
        "--concurrent": "3",
        "--tolerance": "0.05",
        "--memory-limit": "4GiB",
        "--window-seconds": "1",
        "--max-windows": "4",
        "--rounds": "5",
        "--runoff-rounds": "0",
    }
    expected: dict[str, Any] = {
        "trials": 5,
        "timeout": 2.5,
        "budget": "1m30s",
        "study": "runs/a.db",
        "study_name": "team",
        "seed": 7,
        "resume": True,
        "warm_from": ("old.db",),
        "gpus": "0,1",
        "ranks": 2,
        "backend": "ray",
        "address": "auto",
        "concurrent": 3,
        "tolerance": 0.05,
        "memory_limit": "4GiB",
        "window_seconds": 1.0,
        "max_windows": 4,
        "rounds": 5,
        "runoff_rounds": 0,
    }
    seen: list[dict[str, Any]] = []

    def dry_run(config: str, **options: Any) -> list[str]:
        seen.append(options)
        return ["planned"]

    # Wherever the command line takes it from: the stage's module, or its front door.
    monkeypatch.setattr("autotune.pipeline._dry_run.dry_run", dry_run)
    monkeypatch.setattr(autotune.pipeline, "dry_run", dry_run, raising=False)
    config = str(write_config("", "c.py"))
    argv = [part for pair in given.items() for part in pair]
    assert main(["search", config, "--dry-run", "--resume", *argv]) == 0
    assert main(["search", config, "--dry-run"]) == 0
    with_flags, without = seen
    assert with_flags == {"device": None, **expected}
    assert {key: type(value) for key, value in with_flags.items()} == {
        key: type(value) for key, value in {"device": None, **expected}.items()
    }
    # A flag not given is None, which keeps the config's value.
    assert without == {"device": None, **dict.fromkeys(SEARCH_FLAGS)}
    assert set(expected) == set(SEARCH_FLAGS)


def test_a_flag_refuses_what_its_option_refuses(capsys, write_config) -> None:
    config = str(write_config("", "c.py"))
    with pytest.raises(SystemExit):
        main(["search", config, "--backend", "dask", "--dry-run"])
    assert "invalid choice: 'dask'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["search", config, "--trials", "many", "--dry-run"])
    assert "invalid int value: 'many'" in capsys.readouterr().err


def test_the_docs_table_has_a_row_per_option_with_its_default_and_flag() -> None:
    table = _reference_hook().options_table().splitlines()
    rows = {line.split(" | ")[0].strip("| `"): line for line in table[2:]}
    assert list(rows) == FIELDS
    docs = SearchOptions.field_docs()
    for field in dataclasses.fields(SearchOptions):
        row = rows[field.name]
        assert f"`{field.default!r}`" in row
        assert docs[field.name].split("\n")[0] in row
        assert (
            f"`{flag_name(field.name)}`" in row
            if field.name in SEARCH_FLAGS
            else CONFIG_ONLY[field.name] in row
        )


def test_the_configuration_page_holds_the_generated_table() -> None:
    page = (ROOT / "docs/configuration.md").read_text()
    assert "\n<!-- search-options -->\n" in page
    docs_page = types.SimpleNamespace(file=types.SimpleNamespace(src_uri="configuration.md"))
    rendered = _reference_hook().on_page_markdown(
        page, docs_page, {"config_file_path": str(ROOT / "mkdocs.yml")}, None
    )
    assert "<!-- search-options -->" not in rendered
    assert "| `trials` | `int` | `24` | `--trials` |" in rendered


def test_a_link_out_of_the_docs_becomes_the_repository_path_and_one_inside_points_there() -> None:
    hook = _reference_hook()
    text = "[the merge](../benchmarks/results/x.md), [home](index.md#top), [gh](https://a.b/c)"
    assert hook.repository_links(text, "docs", "docs") == (
        "the merge (`benchmarks/results/x.md`), [home](index.md#top), [gh](https://a.b/c)"
    )
    # Written beside the results files, shown on a page of docs/ (the benchmarks page):
    text = "[the history](../docs/benchmark-history.md#top), [a run](results/r.md)"
    assert hook.repository_links(text, "benchmarks", "docs") == (
        "[the history](benchmark-history.md#top), a run (`benchmarks/results/r.md`)"
    )
