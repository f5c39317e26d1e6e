"""The report of a real study: one self-contained HTML file, or Markdown."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import sys
from html import escape
from pathlib import Path

import numpy as np
import optuna
import pytest
from conftest import QUICK, defaults_measured

import autotune
from autotune import ConfigError, MissingExtraError
from autotune._format import format_rate
from autotune.cli import main
from autotune.study import records

PLOTS = ("ceilings", "timeline", "by_num_workers", "by_batch_size", "wait_share")


@pytest.fixture(scope="module")
def html(small_study) -> str:
    return autotune.report(small_study.path)


def figures_shown(diagnosis: autotune.Diagnosis) -> list[str]:
    """The figures of a diagnosis as the report writes them."""
    shown = [
        f"{format_rate(diagnosis.samples_per_s)} samples/s",
        f"{diagnosis.wait_share:.0%} of each step",
        diagnosis.verdict,
    ]
    for value in (diagnosis.compute_ceiling, diagnosis.data_ceiling):
        assert value, "the small study measures every ceiling"
        shown.append(f"{format_rate(value)} samples/s")
    assert diagnosis.of_ceiling is not None
    shown.append(f"{diagnosis.of_ceiling:.0%}")
    return shown


def test_the_html_report_holds_every_plot_as_an_embedded_png(html: str) -> None:
    images = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(images) == len(PLOTS)
    for image in images:
        assert base64.b64decode(image).startswith(b"\x89PNG\r\n\x1a\n")
    for key in PLOTS:
        assert f'id="plot-{key}"' in html
    # self-contained: nothing to fetch
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "<link" not in html and "<script" not in html


def test_the_html_report_shows_the_diagnosis_figures(html: str, small_study) -> None:
    result = autotune.load(small_study.path)
    best, default = autotune.diagnose(result)
    assert (best.subject, default.subject) == ("best", "default loader")
    for diagnosis in (best, default):
        for shown in figures_shown(diagnosis):
            assert escape(shown) in html, shown
        for advice in diagnosis.advice:
            assert escape(advice) in html
    assert best.loader_limit is not None
    assert f"loader alone, {best.limit_workers} workers" in html
    assert escape(result.settings.describe()) in html
    assert f"{result.speedup_text()} the default DataLoader" in html


def test_the_html_report_lists_every_trial(html: str, small_study) -> None:
    study = optuna.load_study(study_name="small", storage=f"sqlite:///{small_study.path}")
    trials = records(study)
    rows = re.findall(r'<tr class="([a-z ]+)">', html)
    assert len(rows) == len(trials)
    confirming = sum(t.role == "confirm" for t in trials)
    assert rows.count("complete baseline") == defaults_measured(confirming, QUICK["rounds"])
    assert any("pruned" in row for row in rows)


def test_the_markdown_report(small_study) -> None:
    text = autotune.report(small_study.path, format="md")
    assert text.startswith("# autotune report: small\n")
    assert "data:image" not in text
    for diagnosis in autotune.diagnose(autotune.load(small_study.path)):
        assert f"### {diagnosis.subject.capitalize()}: {diagnosis.verdict}" in text
        for shown in figures_shown(diagnosis):
            assert shown in text, shown
    study = optuna.load_study(study_name="small", storage=f"sqlite:///{small_study.path}")
    table = [line for line in text.splitlines() if re.match(r"\| \d+ \| ", line)]
    assert len(table) == len(records(study))


def test_the_cli_writes_html_next_to_the_study_and_md_to_stdout(
    capsys, small_study, tmp_path: Path
) -> None:
    study = tmp_path / "copy.db"
    shutil.copy(small_study.path, study)
    assert main(["report", str(study)]) == 0
    written = study.with_suffix(".html")
    assert f"wrote {written}" in capsys.readouterr().err
    assert written.read_text().count("data:image/png;base64,") == len(PLOTS)

    assert main(["report", str(study), "--format", "md", "-o", str(tmp_path / "r.md")]) == 0
    assert (tmp_path / "r.md").read_text().startswith("# autotune report: small\n")

    assert main(["report", str(study), "--format", "md"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# autotune report: small\n") and "## Diagnosis" in out
    took = autotune.load(small_study.path).search_time
    assert took is not None and f"- **search time**: {took.describe()}" in out


def test_show_prints_the_diagnosis(capsys, small_study) -> None:
    assert main(["show", str(small_study.path)]) == 0
    out = capsys.readouterr().out
    best, default = autotune.diagnose(autotune.load(small_study.path))
    assert f"diagnosis of the {best.headline()}" in out
    assert f"diagnosis of the {default.headline()}" in out
    assert "compute ceiling (the model on batches already in memory)" in out
    took = next(line for line in out.splitlines() if line.startswith("search time: "))
    assert "ceilings " in took and "bounds" not in took  # it measured ceilings, not bounds


def test_without_matplotlib_html_names_the_extra_and_md_still_works(
    capsys, monkeypatch, small_study
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    with pytest.raises(MissingExtraError, match=r"pip install 'autotune\[report\]'"):
        autotune.report(small_study.path)
    assert "## Diagnosis" in autotune.report(small_study.path, format="md")
    assert main(["report", str(small_study.path), "-o", "-"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("autotune: error: the HTML report draws its plots with matplotlib")
    assert len(err.splitlines()) == 1


def test_a_study_without_trials_reports_what_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    optuna.create_study(storage=f"sqlite:///{path}", study_name="empty")
    missing = "No settings chosen yet: study 'empty' has no finished trial"
    assert missing in autotune.report(path, format="md")
    html = autotune.report(path, format="html")
    assert escape(missing) in html
    assert "data:image" not in html


def test_an_unknown_format_is_refused(small_study) -> None:
    with pytest.raises(ConfigError, match=r"report format is 'pdf'; expected one of"):
        autotune.report(small_study.path, format="pdf")


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_a_headless_browser_renders_the_plots(html: str, tmp_path: Path) -> None:
    image = pytest.importorskip("PIL.Image")
    page = tmp_path / "report.html"
    page.write_text(html)
    shot = tmp_path / "report.png"
    subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=1280,2400",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    pixels = np.asarray(image.open(shot).convert("RGB"), dtype=np.int16)
    assert pixels.shape == (2400, 1280, 3)
    # The ceilings plot's compute bar is drawn in this blue, which no CSS of the page uses:
    # finding a block of it means the embedded PNG was decoded and shown.
    blue = np.array([0x4C, 0x72, 0xB0], dtype=np.int16)
    painted = int((np.abs(pixels - blue) <= 8).all(axis=2).sum())
    assert painted > 2000, painted
