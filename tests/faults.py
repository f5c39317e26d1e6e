"""Driving one fault through the CLI and through the Python API alike.

The fault suite (tests/integration/test_faults_*.py) runs each case with both drivers:
``cli`` is ``autotune search CONFIG`` (in this process through ``cli.main``, or as
a command of its own when the test must signal or kill it), ``api`` is
``autotune.search(dataset=..., model=...)`` with the same pieces.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pickle
import queue
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
import workloads
from conftest import CHILD_PYTHONPATH, QUICK, TESTS

import autotune
from autotune.cli import main
from autotune.probe import ProbeRequest, WorkloadSource
from autotune.settings import Settings
from autotune.study import Attr, TrialRecord, records
from autotune.workload import Workload

DRIVERS = ("cli", "api")
NAME = "fault"
"""The config file is fault.py, the API's name= is "fault": either way studies/fault.db."""
SMALL_SPACE: Mapping[str, Any] = {
    "num_workers": [0, 1],
    "prefetch_factor": 2,
    "persistent_workers": False,
    "threads": 1,
    "batch_size": 8,
    "amp": "off",
}
"""Two configs: no workers (warm start), and one worker."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Case:
    """A small search on pieces from workloads.py."""

    dataset: str = "sleepy_dataset"
    model: str = "linear_model"
    collate_fn: str | None = None
    batch_size: int = 8
    space: Mapping[str, Any] = dataclasses.field(default_factory=lambda: dict(SMALL_SPACE))
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def search_options(self) -> dict[str, Any]:
        return {**QUICK, "max_windows": 2, "trials": 2, "seed": 0, "finalists": 1, **self.options}

    def config(self) -> str:
        """The case as a config file."""
        lines = [
            "import sys",
            f"sys.path.insert(0, {str(TESTS)!r})",
            "import workloads",
            f"dataset = workloads.{self.dataset}",
            f"model = workloads.{self.model}",
            f"batch_size = {self.batch_size}",
            f"space = {dict(self.space)!r}",
            f"search = {self.search_options()!r}",
        ]
        if self.collate_fn:
            lines.append(f"collate_fn = workloads.{self.collate_fn}")
        return "\n".join(lines) + "\n"

    def api_kwargs(self) -> dict[str, Any]:
        """The case as keywords of autotune.search."""
        return {
            "dataset": getattr(workloads, self.dataset),
            "model": getattr(workloads, self.model),
            "collate_fn": getattr(workloads, self.collate_fn) if self.collate_fn else None,
            "batch_size": self.batch_size,
            "space": dict(self.space),
            "name": NAME,
            **self.search_options(),
        }


@dataclasses.dataclass(kw_only=True)
class Outcome:
    """What a search ended with, the same way for both drivers."""

    code: int
    """The CLI's exit code; for the API 0 (returned) or 2 (raised an AutotuneError)."""
    error: str | None
    """The error's one line, without the CLI's ``autotune: error: `` prefix."""
    stderr: str = ""
    result: autotune.SearchResult | None = None
    study: Path

    def trials(self) -> list[TrialRecord]:
        return study_trials(self.study)


def study_trials(path: Path) -> list[TrialRecord]:
    """Every trial in the study at ``path``, read the way `autotune show` reads them."""
    summaries = optuna.get_all_study_summaries(f"sqlite:///{path}")
    assert len(summaries) == 1, summaries
    study = optuna.load_study(study_name=summaries[0].study_name, storage=f"sqlite:///{path}")
    return records(study)


def one_error_line(err: str) -> str:
    """The error is one line; only progress lines ("[  0.2s] ...") may come before it."""
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[")]
    assert len(lines) == 1, err
    assert lines[0].startswith("autotune: error: "), err
    assert "Traceback" not in err
    return lines[0].removeprefix("autotune: error: ")


def api_keywords(case: Case, args: tuple[str, ...]) -> dict[str, Any]:
    """The keywords of autotune.search that ``case`` and the CLI's ``args`` mean."""
    keywords = case.api_kwargs()
    flags = list(args)
    while flags:
        flag = flags.pop(0)
        if flag == "--resume":
            keywords["resume"] = True
        elif flag in ("--study", "--trials"):
            value = flags.pop(0)
            keywords[flag[2:]] = int(value) if flag == "--trials" else value
        else:
            raise ValueError(f"no API keyword for {flag}")
    return keywords


def drive(
    driver: str, case: Case, workdir: Path, capsys: Any, *args: str, config: Path | None = None
) -> Outcome:
    """Run ``case`` as a search, in this process, through ``driver``; the CLI's config is
    written to ``config`` (default: fault.py in ``workdir``)."""
    keywords = api_keywords(case, args)
    study = Path(keywords.get("study") or workdir / "studies" / f"{NAME}.db")
    if driver == "cli":
        config = config or workdir / f"{NAME}.py"
        config.write_text(case.config())
        code = main(["search", str(config), *args])
        err = capsys.readouterr().err
        return Outcome(
            code=code, error=one_error_line(err) if code else None, stderr=err, study=study
        )
    try:
        result = autotune.search(**keywords)
    except autotune.AutotuneError as error:
        return Outcome(code=2, error=str(error), study=study)
    return Outcome(code=0, error=None, result=result, study=study)


def search_file(driver: str, path: Path | str, capsys: Any) -> Outcome:
    """A search of a config file, for mistakes in the file itself."""
    study = Path("studies") / f"{Path(path).stem}.db"
    if driver == "cli":
        code = main(["search", str(path)])
        err = capsys.readouterr().err
        return Outcome(
            code=code, error=one_error_line(err) if code else None, stderr=err, study=study
        )
    try:
        result = autotune.search(path)
    except autotune.AutotuneError as error:
        return Outcome(code=2, error=str(error), study=study)
    return Outcome(code=0, error=None, result=result, study=study)


def probe_request(dataset: Any, model: Any = workloads.linear_model, **fields: Any) -> ProbeRequest:
    """One probe of ``dataset`` and ``model`` on the CPU, short: batch 4, no workers, three
    windows of 0.2 s, unless ``fields`` say otherwise."""
    workload = Workload(dataset=dataset, model=model, batch_size=fields.pop("batch_size", 4))
    settings = fields.pop("settings", Settings(batch_size=workload.batch_size))
    defaults = {
        "window_seconds": 0.2,
        "max_windows": 3,
        "warmup_seconds": 0.05,
        "stall_timeout": 20.0,
    }
    defaults.update(fields)
    return ProbeRequest(
        source=WorkloadSource(pickled=pickle.dumps(workload)),
        settings=settings,
        device="cpu",
        **defaults,
    )


# ------------------------------------------------------------ a search in its own process
_API_SCRIPT = """
import json, sys
import autotune, workloads
spec = json.loads(sys.argv[1])
pieces = {k: getattr(workloads, v) if v else None for k, v in spec["pieces"].items()}
try:
    autotune.search(**pieces, **spec["keywords"], progress=autotune.LineProgress())
except autotune.AutotuneError as error:
    print(f"autotune: error: {error}", file=sys.stderr)
    sys.exit(2)
except KeyboardInterrupt:
    print("autotune: interrupted", file=sys.stderr)
    sys.exit(130)
"""


class Running:
    """A search running as a process of its own, in its own session, as a job started
    from a terminal is; its stderr is read as it comes."""

    def __init__(
        self,
        driver: str,
        case: Case,
        cwd: Path,
        *args: str,
        config: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if driver == "cli":
            config = config or cwd / f"{NAME}.py"
            config.write_text(case.config())
            command = [sys.executable, "-m", "autotune", "search", str(config), *args]
        else:
            keywords = {k: v for k, v in api_keywords(case, args).items() if k not in _PIECES}
            spec = {
                "pieces": {
                    "dataset": case.dataset,
                    "model": case.model,
                    "collate_fn": case.collate_fn,
                },
                "keywords": keywords,
            }
            command = [sys.executable, "-c", _API_SCRIPT, json.dumps(spec)]
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            command,
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": CHILD_PYTHONPATH, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, pattern: str, timeout: float = 120) -> str:
        """Block until a stderr line matches ``pattern``; returns it."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no line matching {pattern!r} in:\n{''.join(self.lines)}"
                ) from None
            if line is None:
                raise AssertionError(f"ended before {pattern!r}:\n{''.join(self.lines)}")
            self.lines.append(line)
            if re.search(pattern, line):
                return line

    def failed(self) -> bool:
        """Whether the search has ended with a non-zero exit already."""
        return self.process.poll() not in (None, 0)

    def finish(self, timeout: float = 120) -> tuple[int, str]:
        """Wait for the end; returns the exit code and all of stderr."""
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout=10)
        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                self.lines.append(line)
        assert self.process.stdout is not None
        self.process.stdout.read()
        self.process.stdout.close()
        self.process.stderr.close()  # type: ignore[union-attr]
        return code, "".join(self.lines)


_PIECES = ("dataset", "model", "collate_fn")


@dataclasses.dataclass(frozen=True)
class Places:
    """An empty working directory and an empty HOME, with the config and the study in
    directories of their own: whatever a search writes besides its study shows."""

    root: Path

    @property
    def cwd(self) -> Path:
        return self.root / "cwd"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def config(self) -> Path:
        return self.root / "configs" / f"{NAME}.py"

    @property
    def study(self) -> Path:
        return self.root / "studies" / f"{NAME}.db"

    def make(self) -> Places:
        for directory in (self.cwd, self.home, self.config.parent, self.study.parent):
            directory.mkdir(parents=True)
        return self

    def check_nothing_else_written(self, *, killed: bool = False) -> None:
        """Only the config and the study, with SQLite's files beside it."""
        assert listing(self.cwd) == []
        assert listing(self.home) == []
        assert listing(self.config.parent) in ([], [self.config.name])  # no __pycache__
        # Beside the study, SQLite's own: a WAL study's log and index; after a kill, also
        # the journal of a write the kill cut short (the next opening rolls it back).
        studies = [self.study.name, f"{self.study.name}-wal", f"{self.study.name}-shm"]
        studies += [f"{self.study.name}-journal"] if killed else []
        assert set(listing(self.study.parent)) <= set(studies)
        assert self.study.name in listing(self.study.parent)


def listing(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


def running_trial(study: Path, at_least: int, *, owned: bool = False) -> int | None:
    """The number of a RUNNING trial numbered ``at_least`` or more in the study at
    ``study``, started after the last one that finished, if there is one; read as another
    process would. ``owned``: only a trial whose search has written its owner on it
    (Optuna makes the trial RUNNING a moment before: a search killed in between leaves a
    trial only its heartbeat can settle).

    Started after the last one that finished: the first trials (the warm starts) are
    measured together in one process and end together; a trial started after them is
    measured alone, so a signal sent while it runs cuts that one trial short."""
    if not study.exists():
        return None
    uri = f"file:{study}?mode=ro"
    owner = (
        " AND trial_id IN (SELECT trial_id FROM trial_user_attributes WHERE key = ?)"
        if owned
        else ""
    )
    owner += (
        " AND datetime_start > (SELECT MAX(datetime_complete) FROM trials WHERE state IN"
        " ('COMPLETE', 'PRUNED', 'FAIL'))"
    )
    arguments: tuple[object, ...] = (at_least, Attr.OWNER) if owned else (at_least,)
    with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=30)) as connection:
        try:
            row = connection.execute(
                "SELECT number FROM trials WHERE state = 'RUNNING' AND number >= ?" + owner,
                arguments,
            ).fetchone()
        except sqlite3.OperationalError:  # no tables yet
            return None
    return None if row is None else int(row[0])


def wait_for_running_trial(study: Path, at_least: int, timeout: float = 120) -> None:
    """Block until a trial numbered ``at_least`` or more runs (and measures: a moment
    more) in the study at ``study``."""
    deadline = time.monotonic() + timeout
    while running_trial(study, at_least) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"no trial #{at_least}+ of {study} ran within {timeout} s")
        time.sleep(0.05)
    time.sleep(0.3)


def finished_numbers(stderr: str) -> set[int]:
    """Numbers of the trials a search's progress reported as finished."""
    return {int(n) for n in re.findall(r"trial #(\d+) ", stderr)}


def finish_together(*running: Running, timeout: float = 300) -> list[tuple[int, str]]:
    """Wait for searches that run at once; the first to fail ends the wait, where its
    partner would otherwise wait out its own timeout for a trial that never comes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(r.failed() for r in running) or all(r.process.poll() is not None for r in running):
            break
        time.sleep(0.1)
    for r in running:
        if r.process.poll() is None and any(other.failed() for other in running):
            os.killpg(r.process.pid, signal.SIGKILL)
    return [r.finish(timeout=max(1.0, deadline - time.monotonic())) for r in running]
