"""A process that imports torch once and forks every measurement from there.

A measurement of the plain-loop checker ran in a new Python: about 8 s on 2 CPUs for 2 s
of training, most of it importing torch and the ``torch._dynamo`` the first optimizer
pulls in. The judge's precision is bought with rounds, so that start-up was most of its
cost. A zygote (``python -m benchmarks.common._zygote MODULE...``) imports those modules and
then waits; each measurement is a fork of it, in a session of its own, that imports
its measuring module and runs its ``_child_main(argv)``. The child is a new process
with nothing of an earlier measurement in it: the zygote has built no dataset, no model
and no loader, run no training step and started no thread pool.

The zygote is this suite's own: the probes' fork server (``multiprocessing``'s, with
autotune's probe in its preload list) is not used, so a checker's measurement imports
nothing of the probe.

The protocol is one JSON line each way, over the zygote's stdin and a private copy of
its stdout: ``{"module", "argv", "log", "cwd", "env"}`` in; ``{"pid"}`` when the child
has started (its session id too), ``{"returncode"}`` when it has ended. The zygote
ends when its stdin closes.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

PRELOAD = ("torch", "torch._dynamo", "benchmarks.common._checker")
"""What the zygote imports once: torch, what a first optimizer imports, the checker."""


ANSWER_S = 60.0
"""How long the zygote may take to say it started or reaped a measurement."""


class ZygoteError(RuntimeError):
    """The zygote did not answer, or ended."""


class Zygote:
    """The harness's side: starts the zygote and runs measurements in forks of it.

    Args:
        env: the zygote's environment (the children's, unless a request gives another).
        preload: modules it imports before the first measurement.
    """

    def __init__(self, env: Mapping[str, str], preload: Sequence[str] = PRELOAD) -> None:
        # What the zygote says (an import that failed) goes to a file, not a pipe nobody
        # reads: its tail ends the error when it does not answer.
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.common._zygote", *preload],
            env=dict(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._errors,
            # Unbuffered: a line read is all that is taken from the pipe, so the next
            # line waits there for select() to see (a buffer could swallow two at once).
            bufsize=0,
            start_new_session=True,  # a Ctrl-C at the terminal reaches the harness only
        )
        self.sessions: list[int] = []
        """The process (and session) id of every measurement it started, in order."""

    @property
    def pid(self) -> int:
        return self._process.pid

    def alive(self) -> bool:
        return self._process.poll() is None

    def run(
        self, module: str, argv: Sequence[str], log: Path, limit: float, env: Mapping[str, str]
    ) -> tuple[int, int | None]:
        """Run ``module._child_main(argv)`` in a fork, its output to ``log``, in the
        current directory and ``env``; kill it after ``limit`` seconds.

        Returns:
            The child's process id (its session id) and its exit code (None when it ran
            past ``limit``). What is left of its session is the caller's to stop.

        Raises:
            ZygoteError: the zygote did not start the child or did not say how it ended.
        """
        request = {
            "module": module,
            "argv": list(argv),
            "log": str(log),
            "cwd": os.getcwd(),
            "env": dict(env),
        }
        self._send(request)
        pid = int(self._answer("started the measurement")["pid"])
        self.sessions.append(pid)
        try:
            answer = self._receive(timeout=limit)
        except TimeoutError:
            _kill_session(pid)
            self._answer("reaped the measurement it was told to kill")
            return pid, None
        except BaseException:  # Ctrl-C: the measurement ends with the harness's wait
            _kill_session(pid)
            self.close()  # its answer would be read as the next one's
            raise
        return pid, int(answer["returncode"])

    def close(self) -> None:
        """End the zygote (it ends when its stdin closes)."""
        stdin = self._process.stdin
        if stdin is not None and not stdin.closed:
            with contextlib.suppress(OSError):
                stdin.close()
        try:
            self._process.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()
        self._errors.close()

    def _send(self, message: Mapping[str, Any]) -> None:
        stdin = self._process.stdin
        assert stdin is not None
        data = memoryview(json.dumps(message).encode() + b"\n")
        try:
            while data:  # unbuffered: a write may take part of it
                data = data[stdin.write(data) or 0 :]
        except OSError as error:
            raise ZygoteError(f"the zygote has ended ({error})") from error

    def _answer(self, what: str) -> dict[str, Any]:
        """The zygote's next line, which it sends at once."""
        try:
            return self._receive(timeout=ANSWER_S)
        except TimeoutError:
            raise ZygoteError(f"the zygote has not {what} in {ANSWER_S:.0f} s") from None

    def _receive(self, timeout: float) -> dict[str, Any]:
        stdout = self._process.stdout
        assert stdout is not None
        ready, _, _ = select.select([stdout], [], [], timeout)
        if not ready:
            raise TimeoutError
        line = stdout.readline()
        if not line:
            code = self._process.wait()
            self._errors.seek(0)
            said = self._errors.read().decode(errors="replace").strip().splitlines()[-20:]
            raise ZygoteError(f"the zygote ended with {code}:\n" + "\n".join(said))
        answer: dict[str, Any] = json.loads(line)
        return answer


def _kill_session(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


# --------------------------------------------------------------------- the zygote's side
def _serve(requests: IO[bytes], replies: int) -> None:
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child ends in os._exit, coverage cannot see it
            os.close(replies)
            requests.close()
            os._exit(_child(request))
        _reply(replies, {"pid": pid})
        _, status = os.waitpid(pid, 0)
        _reply(replies, {"returncode": os.waitstatus_to_exitcode(status)})


def _reply(fd: int, message: Mapping[str, Any]) -> None:
    os.write(fd, json.dumps(message).encode() + b"\n")


def _child(request: Mapping[str, Any]) -> int:  # pragma: no cover - runs in the fork
    """One measurement, in the fork: a session of its own (the harness kills it whole),
    its output to the log, the harness's directory and environment."""
    os.setsid()
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # read from TMPDIR again, the request's
    code = 1
    try:
        module = importlib.import_module(request["module"])
        code = int(module._child_main(request["argv"]))
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
    return code


def main(preload: Sequence[str]) -> int:
    """Import ``preload``, then serve requests until stdin closes."""
    replies = os.dup(1)  # the harness reads this; fd 1 is for what imports print
    os.dup2(2, 1)
    for name in preload:
        importlib.import_module(name)
    _serve(sys.stdin.buffer, replies)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
