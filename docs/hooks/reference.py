"""MkDocs hook: the pages' generated parts, written from the code at build time.

A page holds a marker (an HTML comment on a line of its own) where a generated part goes:

- ``<!-- search-options -->``: the table of every ``SearchOptions`` field (name, type,
  default, command-line flag or why there is none, docstring);
- ``<!-- search-help -->``: what ``autotune search --help`` prints;
- ``<!-- api-reference -->``: a mkdocstrings entry for each name in ``autotune.__all__``,
  grouped into functions, classes, and errors and warnings;
- ``<!-- benchmarks/RESULTS.md -->``: the benchmarks' results page, its headings one level
  down.

On every page, a link to a file outside docs/ becomes that file's repository path, since
the site holds only docs/.

So a default, a flag or a verdict cannot drift between the code and the docs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
from pathlib import Path
from typing import Any, get_type_hints

_MARKER = re.compile(
    r"^<!-- (search-options|search-help|api-reference|benchmarks/RESULTS\.md) -->$", re.M
)
_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")
_HELP_COLUMNS = "92"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace each marker in a page with its generated part."""
    root = Path(config["config_file_path"]).parent
    shown_in = os.path.dirname(os.path.join("docs", page.file.src_uri))
    parts = {
        "search-options": options_table,
        "search-help": search_help,
        "api-reference": api_reference,
        "benchmarks/RESULTS.md": lambda: results_page(root / "benchmarks" / "RESULTS.md", shown_in),
    }
    markdown = _MARKER.sub(lambda match: parts[match.group(1)](), markdown)
    return repository_links(markdown, shown_in, shown_in)


def options_table() -> str:
    """A Markdown table of SearchOptions, one row per field, in the class's order."""
    from autotune import SearchOptions
    from autotune.cli import CONFIG_ONLY, SEARCH_FLAGS, flag_name

    types = get_type_hints(SearchOptions)
    docs = SearchOptions.field_docs()
    rows = [
        "| option | type | default | flag | what |",
        "| --- | --- | --- | --- | --- |",
    ]
    for field in dataclasses.fields(SearchOptions):
        choices = field.metadata.get("choices")
        kind = (
            " or ".join(f"`{choice!r}`" for choice in choices)
            if choices
            else _type(types[field.name])
        )
        what = _prose(docs[field.name])
        if field.name in SEARCH_FLAGS:
            flag = f"`{flag_name(field.name)}`"
        else:
            flag = "config only"
            what += f" *No flag: {CONFIG_ONLY[field.name]}.*"
        cells = [f"`{field.name}`", kind, f"`{field.default!r}`", flag, what.replace("|", "\\|")]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def api_reference() -> str:
    """One ``::: autotune.NAME`` entry per public name, for mkdocstrings to render from
    the docstrings: the names are ``autotune.__all__``, so a new one cannot be missed."""
    import autotune

    groups: dict[str, list[str]] = {"Functions": [], "Classes": [], "Errors and warnings": []}
    for name in sorted(set(autotune.__all__) - {"__version__"}):
        value = getattr(autotune, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            groups["Errors and warnings"].append(name)
        elif isinstance(value, type):
            groups["Classes"].append(name)
        else:
            groups["Functions"].append(name)
    sections = []
    for title, names in groups.items():
        entries = "\n\n".join(f"::: autotune.{name}" for name in names)
        sections.append(f"## {title}\n\n{entries}")
    return "\n\n".join(sections)


def search_help() -> str:
    """``autotune search --help`` as a console block, at a fixed width."""
    from autotune.cli import main

    out = io.StringIO()
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = _HELP_COLUMNS
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            main(["search", "--help"])
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    return "```text\n$ autotune search --help\n" + out.getvalue().rstrip() + "\n```"


def results_page(path: Path, shown_in: str) -> str:
    """The results page as a section of this one: headings one level down, and each link
    to a file of the repository written as its path (those files are not in the site)."""
    text = re.sub(r"^(#{1,5}) ", r"#\1 ", path.read_text(), flags=re.M)
    return repository_links(text, "benchmarks", shown_in)


def repository_links(text: str, written_in: str, shown_in: str) -> str:
    """The relative links of ``text``, written in the repository folder ``written_in`` and
    shown on a page in ``shown_in``: one to a page of docs/ points there from ``shown_in``,
    one to any other file becomes the repository path it names (the site holds only docs/)."""

    def as_path(match: re.Match[str]) -> str:
        image, label, target = match.groups()
        if target.startswith(("http://", "https://", "#")):
            return match.group(0)
        path, hash_, anchor = target.partition("#")
        where = os.path.normpath(os.path.join(written_in, path))
        if where.startswith("docs" + os.sep):
            return f"{image}[{label}]({os.path.relpath(where, shown_in)}{hash_}{anchor})"
        where = f"`{where}`"
        return where if image or label.strip("`") == target else f"{label} ({where})"

    return _LINK.sub(as_path, text)


def _type(annotation: Any) -> str:
    """``int``, ``float | None``: an annotation as it is written."""
    name = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    return f"`{name}`"


def _prose(doc: str) -> str:
    """A docstring as one line of Markdown: paragraphs joined, reST literals as code."""
    return " ".join(doc.split()).replace("``", "`")
