"""The report: the diagnosis, the trials and plots of a study, as HTML or Markdown.

    study -> ReportData (gathered once) -> plots (matplotlib, PNG) -> HTML | Markdown

HTML is one self-contained file (plots embedded as base64 PNG) and needs the
``report`` extra (matplotlib); Markdown needs nothing more.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import optuna

from autotune._errors import ConfigError
from autotune.output._report._data import ReportData, gather
from autotune.study import StudyLocation, locate, open_study

Format = Literal["html", "md"]
FORMATS: tuple[Format, ...] = ("html", "md")


def report(
    study: str | Path | StudyLocation | optuna.Study,
    output: str | Path | None = None,
    *,
    format: str = "html",
) -> str:
    """Render a study's report; write it to ``output`` when given.

    Args:
        study: a study file (``studies/quickstart.db``), a study name, a storage URL
            (``postgresql://...``), or an ``optuna.Study``.
        output: a file to write the report to.
        format: "html" (one self-contained file with plots) or "md" (Markdown, no plots).

    Returns:
        The report's text.

    Raises:
        ConfigError: an unknown format.
        StudyError: the study cannot be opened.
        MissingExtraError: HTML was asked for and matplotlib is not installed.
    """
    if format not in FORMATS:
        raise ConfigError(f"report format is {format!r}; expected one of {list(FORMATS)}.")
    data = _data(study)
    text = render(data, format)
    if output is not None:
        Path(output).write_text(text, encoding="utf-8")
    return text


def render(data: ReportData, format: str) -> str:
    """The report of gathered data in one format."""
    if format == "md":
        from autotune.output._report._markdown import render_markdown

        return render_markdown(data)
    from autotune.output._report._html import render_html
    from autotune.output._report._plots import draw

    return render_html(data, draw(data))


def _data(study: str | Path | StudyLocation | optuna.Study) -> ReportData:
    if isinstance(study, optuna.Study):
        return gather(study)
    where = locate(study, None)
    return gather(open_study(where, create=False), where)


__all__ = ["FORMATS", "ReportData", "gather", "render", "report"]
