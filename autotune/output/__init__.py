"""Output for people and scripts: loading a saved result, the text views of ``show``,
and the HTML and Markdown report."""

from autotune.output._load import load, result_of, warn_if_moved
from autotune.output._report import report
from autotune.output._show import (
    code_lines,
    counts_line,
    diagnosis_lines,
    result_lines,
    show_json,
    start_lines,
    trials_table,
)

__all__ = [
    "code_lines",
    "counts_line",
    "diagnosis_lines",
    "load",
    "report",
    "result_lines",
    "result_of",
    "show_json",
    "start_lines",
    "trials_table",
    "warn_if_moved",
]
