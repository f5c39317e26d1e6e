"""The peer's run on one workload, from the benchmark's side: loadtune in a process of
its own (:mod:`benchmarks.peer._child`), timed, its answer read and turned into the
settings the checker measures (:mod:`benchmarks.peer._translate`)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common._checker import config_ranks
from benchmarks.peer._translate import choice

Say = Callable[[str], None]

ROOT = Path(__file__).resolve().parents[2]
LIMIT_S = 1800.0
"""How long loadtune may run on one workload before it is stopped and recorded as failed:
its baseline and six trials of 110 steps, on the slowest workload, with room to spare."""
SEEDED = (
    "loadtune seeds torch with 0 before every profile (its own, fixed); which config it "
    "picks still rests on one timed run of each"
)
LOG_LINES = 20
"""loadtune's own progress lines kept in the record (its last ones)."""


def installed() -> bool:
    """Whether loadtune can be imported here (the ``bench-peer`` extra)."""
    import importlib.util

    return importlib.util.find_spec("loadtune") is not None


def _run_child(config: Path, answer: Path, log: Path, limit: float) -> int | None:
    """``python -m benchmarks.peer._child CONFIG ANSWER`` in a session of its own, its
    output in ``log``; whatever is left of the session after it (DataLoader workers of a
    trial) is killed. Returns the exit code, None when it ran past ``limit`` seconds."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "benchmarks.peer._child", str(config), str(answer)]
    with log.open("w") as out:
        child = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code: int | None = child.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            code = None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    return code


def _tail(log: Path, lines: int = LOG_LINES) -> list[str]:
    text = log.read_text(errors="replace") if log.exists() else ""
    return text.strip().splitlines()[-lines:]


def run_peer(
    config: Path, *, user_batch: int, device: str, say: Say, limit: float = LIMIT_S
) -> dict[str, Any]:
    """loadtune on ``config`` with its own defaults, once (one run is what a user gets).

    Returns the record (JSON types): loadtune's answer, the settings the checker measures
    for its choice (:func:`benchmarks.peer._translate.choice`; the default loader where it
    failed, since its user keeps that), the notes on what those settings leave out,
    ``wall_s`` (the ``tune`` call, by the child's clock; the whole process where the child
    wrote no answer) and ``process_s`` (the process, Python and torch starting included).
    """
    say(f"the peer: loadtune on {config.name}, its own defaults")
    with tempfile.TemporaryDirectory(prefix="autotune-peer-") as folder:
        answer_path, log = Path(folder) / "answer.json", Path(folder) / "output.log"
        began = time.perf_counter()
        code = _run_child(config, answer_path, log, limit)
        process_s = time.perf_counter() - began
        lines = _tail(log)
        if answer_path.exists():
            answer: dict[str, Any] = json.loads(answer_path.read_text())
        else:
            ended = f"ran past {limit:.0f} s" if code is None else f"exited with {code}"
            answer = {"error": f"the loadtune process {ended}: {' / '.join(lines[-3:])}"}
    picked = choice(answer, user_batch, device)
    ranks = config_ranks(config)
    if ranks > 1:  # loadtune has no notion of DDP: it tuned one training process
        picked = dataclasses.replace(
            picked,
            notes=(
                *picked.notes,
                f"loadtune tuned one training process; the checker trains {ranks} DDP ranks, "
                "each with these settings",
            ),
        )
    record = {
        "tool": "loadtune",
        "version": answer.get("version"),
        "wall_s": answer.get("wall_s", process_s),
        "process_s": process_s,
        "seeded": SEEDED,
        **picked.to_dict(),
        "error": answer.get("error"),
        "answer": answer,
        "log": lines,
    }
    outcome = "changed" if picked.changed else "no change"
    say(
        f"the peer chose {picked.settings.describe()} ({outcome}) in {record['wall_s']:.1f} s"
        + (f"; {record['error']}" if record["error"] else "")
    )
    return record
