"""What every run of the suite shares: progress lines, the facts its results start with
(host, commit, versions), the workloads' clean-up, the loop of a check that runs
workload by workload (the agreement check, the online comparison, the generalisation
benchmark), and the flags a check's options take from the command line."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import json
import platform
import re
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
import torch

import autotune
from autotune import Machine
from benchmarks.common._workloads import BenchWorkload

HERE = Path(__file__).parent
FORMAT = 1
"""The version of the results' JSON layout."""

Say = Callable[[str], None]


class Clock:
    """Progress lines on stderr, with the time since the run began."""

    def __init__(self) -> None:
        self.began = time.monotonic()
        self.prefix = ""

    def say(self, text: str) -> None:
        elapsed = time.monotonic() - self.began
        print(f"[{elapsed:7.1f}s] {self.prefix}{text}", file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Check:
    """A check run workload by workload (agreement, online, generalise): what it writes
    and how."""

    name: str
    header: dict[str, Any]
    """The fields of its results besides the run's own (options, bounds)."""
    run: Callable[[BenchWorkload, Say], dict[str, Any]]
    table: Callable[[Mapping[str, Any]], str]
    """One workload's section, in markdown."""
    document: Callable[[Mapping[str, Any]], str] | None = None
    """The whole markdown file (written beside the JSON); None: no markdown file."""
    write: Callable[[Mapping[str, Any], Path], Sequence[Path]] | None = None
    """Writes the results to the ``.json`` path it is given and what goes beside it, and
    returns the files written; None: the JSON, and ``document``'s markdown if any."""
    stamp: str = "%Y-%m-%d"
    """How the file's name dates the run when ``out`` is a folder (``NAME-<stamp>.json``)."""


def run_check(
    check: Check,
    workloads: Sequence[BenchWorkload],
    machine: Machine,
    *,
    out: Path,
    keep_data: bool,
) -> int:
    """Run ``check`` on every workload, printing each table and writing the results after
    each (a run cut short keeps what it measured) to ``out`` (a ``.json`` file, or a
    folder for ``NAME-<date>.json``, dated by ``check.stamp``); returns 1 when a workload
    failed, else 0."""
    clock = Clock()
    started = datetime.datetime.now()
    path = results_path(out, check.name, started, check.stamp)
    results: dict[str, Any] = {
        "format": FORMAT,
        "mode": check.name,
        "started": started.isoformat(timespec="seconds"),
        "host": host(),
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        **check.header,
        "machine": machine.to_dict(),
        "versions": versions(),
        "workloads": [],
    }
    written: Sequence[Path] = ()
    try:
        for workload in workloads:
            clock.prefix = f"{workload.name}: "
            try:
                section = check.run(workload, clock.say)
            except Exception as error:  # report it, and go on with the other workloads
                clock.say(f"FAILED: {error}\n{traceback.format_exc()}")
                section = {"name": workload.name, "error": f"{type(error).__name__}: {error}"}
            results["workloads"].append(section)
            results["wall_s"] = time.monotonic() - clock.began
            print(check.table(section), flush=True)
            written = _write(check, results, path)
    finally:
        clock.prefix = ""
        if not keep_data:
            cleanup(workloads)
    clock.say(f"results: {', '.join(str(p) for p in written)}")
    return 1 if any("error" in s for s in results["workloads"]) else 0


def given(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The flags among ``names`` the command line was given (those not None), by name: a
    check's options take them and their own defaults for the rest, so that a default is
    written once, in the options."""
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def results_path(out: Path, name: str, started: datetime.datetime, stamp: str = "%Y-%m-%d") -> Path:
    """``out`` when it names a ``.json`` file, else ``NAME-<started, as stamp>.json`` in
    that folder."""
    return out if out.suffix == ".json" else out / f"{name}-{started.strftime(stamp)}.json"


def _write(check: Check, results: dict[str, Any], path: Path) -> Sequence[Path]:
    """The results' files, as ``check`` writes them; returns their paths."""
    if check.write is not None:
        return check.write(results, path)
    write_json(path, results)
    if check.document is None:
        return (path,)
    md_path = path.with_suffix(".md")
    md_path.write_text(check.document(results))
    return (path, md_path)


def write_json(path: Path, results: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")


def versions() -> dict[str, str]:
    return {
        "autotune": autotune.__version__,
        "torch": torch.__version__,
        "optuna": optuna.__version__,
        "python": platform.python_version(),
    }


def host() -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname().split(".")[0]) or "host"


def git(*command: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *command], cwd=HERE, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def cleanup(workloads: Sequence[BenchWorkload]) -> None:
    """Call ``cleanup()`` of every config the run used that defines one."""
    configs = {w.config for w in workloads} | {r.config for w in workloads for r in w.references}
    for config in sorted(configs):
        spec = importlib.util.spec_from_file_location(f"benchmark_cleanup_{config.stem}", config)
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        clean = getattr(module, "cleanup", None)
        if callable(clean):
            clean()
