"""Shared fixtures: a scratch working directory, quick search options, leak checks."""

from __future__ import annotations

import contextlib
import dataclasses
import getpass
import io
import math
import multiprocessing
import multiprocessing.util
import os
import re
import shutil
import signal
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

TESTS = Path(__file__).parent
# Probes unpickle test workloads by module name; make `workloads` importable everywhere.
sys.path.insert(0, str(TESTS))
CHILD_PYTHONPATH = os.pathsep.join([str(TESTS), str(TESTS.parent)])
"""PYTHONPATH for the processes the tests start themselves (a search, Ray's workers): the
tests' workloads, and this checkout's autotune. Without it, a process started outside
the checkout would import whichever autotune is installed, maybe another checkout's."""

SESSION_TAG = "AUTOTUNE_TEST_SESSION"
"""Set in the environment of every process this test session starts, however indirectly
(probes, workers, the CLI in a subprocess), so that one left behind is found even after
its parent died and it was adopted by init."""
os.environ[SESSION_TAG] = uuid.uuid4().hex
# A shell without job control starts background commands (`pytest &`, nohup) with SIGINT
# ignored, and Python then never raises KeyboardInterrupt; the Ctrl-C tests need Ctrl-C.
# A handled signal is reset to its default in exec'd children, so the CLI runs get it too.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
SHM = Path("/dev/shm")

_SCALEOUT_MODULE = re.compile(r"^pytestmark = \[?\s*pytest\.mark\.scaleout\b", re.MULTILINE)
"""A module marked ``scaleout`` as a whole (Ray Tune, clusters, HF, Lightning)."""


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave a wholly ``scaleout`` module unimported in a run of the suite without the
    tier (the plain `pytest`, whose ``-m`` is ``not scaleout``): importing Ray,
    transformers and Lightning only to deselect their tests costs each test process
    seconds. Any other marker expression collects it as usual."""
    if config.getoption("markexpr") != "not scaleout" or collection_path.suffix != ".py":
        return None
    if not collection_path.name.startswith("test_"):
        return None
    return bool(_SCALEOUT_MODULE.search(collection_path.read_text())) or None


QUICK = {
    "window_seconds": 0.1,
    "max_windows": 3,
    "warmup_seconds": 0.05,
    "trial_timeout": 20.0,
    "ceilings": False,
    "bounds": False,
    "rounds": 1,
    "finalists": 1,
}
"""Search options that keep a test search to a few seconds (one confirming round of one
finalist beside the default loader: the rounds and the finalists themselves are tested
with a stand-in backend, and by one real search of three finalists in two rounds)."""


def defaults_measured(finalist_probes: int, rounds: int, *, in_turns: bool = True) -> int:
    """How many times ``rounds`` confirming rounds that ran ``finalist_probes`` finalist
    probes in all measure the default loader: once in each round measured in turns in
    one process (the embedded backend's); first, last and after every two finalists in
    each round of probes of their own (Ray's)."""
    if in_turns:
        return rounds
    per_round = finalist_probes // rounds
    return rounds * (1 + math.ceil(per_round / 2))


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in a temporary directory, so studies/ lands there."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def write_config(workdir: Path) -> Callable[..., Path]:
    """Write a config file from source text; returns its path."""

    def write(source: str, name: str = "config.py") -> Path:
        path = workdir / name
        header = f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n"
        path.write_text(header + textwrap.dedent(source))
        return path

    return write


@pytest.fixture
def checks_run(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The checks ``python -m benchmarks`` hands to its runner, which runs none of them:
    what a mode made of its flags, without measuring."""
    from benchmarks.agreement import _cli as agreement
    from benchmarks.generalise import _cli as generalise
    from benchmarks.online import _cli as online

    checks: list[Any] = []

    def run_check(check: Any, *args: Any, **kwargs: Any) -> int:
        checks.append(check)
        return 0

    for suite in (agreement, generalise, online):
        monkeypatch.setattr(suite, "run_check", run_check)
    return checks


def _is_ray(process: psutil.Process) -> bool:
    """One of Ray's own processes (its servers, workers, monitors and agents)."""
    argv = process.cmdline()
    if process.name() in ("raylet", "gcs_server") or (argv and argv[0].startswith("ray::")):
        return True
    return any(arg.endswith(".py") and f"{os.sep}ray{os.sep}" in arg for arg in argv)


_FORKING_SERVERS = ("forkserver", "benchmarks.common._zygote")
"""Command lines of the long-lived helpers a test process keeps between tests that fork
what they run (the probes' fork server, the benchmark checker's zygote): their children
share the command line, and are no helpers."""
_SERVERS = (*_FORKING_SERVERS, "resource_tracker")


def _is_helper(process: psutil.Process) -> bool:
    """A long-lived helper that no helper started (what a fork server or the zygote forks,
    a probe or a measurement, shares its command line and is not one), or one of Ray's
    own processes (its servers and workers, in the Ray tests)."""
    if _is_ray(process):
        return True
    cmdline = " ".join(process.cmdline())
    if not any(server in cmdline for server in _SERVERS):
        return False
    parent = process.parent()
    parent_cmdline = "" if parent is None else " ".join(parent.cmdline())
    return not any(server in parent_cmdline for server in _FORKING_SERVERS)


def sessions_alive(sessions: list[int]) -> list[int]:
    """Processes still in one of ``sessions`` (by session id)."""
    alive = []
    for process in psutil.process_iter():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getsid(process.pid) in sessions:
                alive.append(process.pid)
    return alive


def session_processes() -> list[psutil.Process]:
    """Processes of this test session but this one and its helpers: its descendants, and
    orphans carrying its tag (a helper whose parent is gone is a leftover too)."""
    tag = os.environ[SESSION_TAG]
    descendants = {p.pid: p for p in psutil.Process().children(recursive=True)}
    orphans = {}
    for process in psutil.process_iter():
        try:
            ours = process.pid not in descendants and process.pid != os.getpid()
            if ours and process.environ().get(SESSION_TAG) == tag:
                orphans[process.pid] = process
        except psutil.Error:
            continue
    leftovers = []
    for process in descendants.values():
        with contextlib.suppress(psutil.Error):
            if not _is_helper(process):
                leftovers.append(process)
    for process in orphans.values():
        with contextlib.suppress(psutil.Error):
            if not _is_ray(process):
                leftovers.append(process)
    return leftovers


@pytest.fixture(autouse=True)
def no_leftover_processes() -> Iterator[None]:
    """Every test must leave no probe, DataLoader worker or search process behind."""
    yield
    # The checker's zygote, like the fork server, stays for the next test that measures
    # (it imports torch: seconds of CPU each time it starts); what it forked must be gone.
    leftovers = session_processes()
    if leftovers:
        # A fork server still importing its preloaded modules when its parent ended
        # notices only once it has: on a loaded machine, seconds later.
        _gone, alive = psutil.wait_procs(leftovers, timeout=30)
        described = []
        for process in alive:
            try:
                described.append(f"{process.pid} {' '.join(process.cmdline())[:120]}")
            except psutil.Error:
                continue
        assert not described, f"processes left behind: {described}"


@pytest.fixture(scope="session", autouse=True)
def private_tempdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A temp directory of this session's own (TMPDIR for every process it starts), so a
    test can tell that nothing was left in it. pytest's tmp_path stays where it was."""
    tmp_path_factory.getbasetemp()
    root = Path(tempfile.mkdtemp(prefix="autotune-tests-"))
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(root)
    tempfile.tempdir = None
    yield root
    if before is None:
        del os.environ["TMPDIR"]
    else:
        os.environ["TMPDIR"] = before
    tempfile.tempdir = None
    # After multiprocessing has removed its own directory in there, at exit.
    multiprocessing.util.Finalize(
        None, shutil.rmtree, args=(root,), kwargs={"ignore_errors": True}, exitpriority=-200
    )


def _expected_temp_entries() -> set[str]:
    """What may appear in the temp directory during a test without being a leftover:
    multiprocessing's directory of this process (its fork server's socket, removed at
    exit), and torch's compile cache directory, which `import torch._dynamo` (the first
    optimizer step does that) makes for every torch program of the user, to keep."""
    expected = {f"torchinductor_{getpass.getuser()}"}
    found = multiprocessing.current_process()._config.get("tempdir")  # type: ignore[attr-defined]
    if found:
        expected.add(os.path.basename(found))
    return expected


def _listing(path: Path) -> set[str]:
    try:
        return set(os.listdir(path))
    except OSError:
        return set()


_SHM_NAMES = ("torch_", "sem.mp-", "psm_", "pym-")
"""What torch (shared tensors), multiprocessing (semaphores, shared_memory, heap
arenas) name their files in /dev/shm; other programs on the machine use it too."""


def _ours(name: str) -> bool:
    """Whether a new file in /dev/shm is this session's. torch names its files after the
    process that made them: one whose maker is gone cannot be told from another
    program's leftover (another test session's, on a shared machine), so those are
    checked where /dev/shm is private, in tests/integration/test_faults_memory.py."""
    if not name.startswith(_SHM_NAMES):
        return False
    match = re.match(r"torch_(\d+)_", name)
    if match is None:
        return True
    try:
        tag = psutil.Process(int(match.group(1))).environ().get(SESSION_TAG)
    except psutil.Error:
        return False
    return tag == os.environ[SESSION_TAG]


def _of_this_session(pid: int) -> bool:
    """Whether process ``pid`` is this one or was started by this session (carries its
    tag); one that ended meanwhile counts as ours, as nothing else can be said of it."""
    if pid == os.getpid():
        return True
    try:
        return psutil.Process(pid).environ().get(SESSION_TAG) == os.environ[SESSION_TAG]
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def _held_by_others(names: set[str]) -> set[str]:
    """Those of ``names`` (files in /dev/shm) that live processes map, none of them this
    session's: a semaphore or shared memory of a neighbour (a test of another xdist
    process, running meanwhile), not a leftover of this test. A file nobody maps stays
    counted. Found in /proc/*/maps by inode: glibc maps a semaphore under the temporary
    name it made the file with, linked to its real name since."""
    inodes = {}
    for name in names:
        with contextlib.suppress(OSError):
            inodes[os.stat(SHM / name).st_ino] = name
    mappers: dict[str, set[int]] = {}
    for pid in psutil.pids() if inodes else ():
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        for line in maps.splitlines():
            fields = line.split()
            if len(fields) > 5 and fields[5].startswith("/dev/shm/") and fields[4].isdigit():
                name = inodes.get(int(fields[4]))
                if name is not None:
                    mappers.setdefault(name, set()).add(pid)
    return {name for name, pids in mappers.items() if not any(_of_this_session(p) for p in pids)}


@pytest.fixture(autouse=True)
def no_leftover_files(private_tempdir: Path, request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test must leave no temp file and no shared-memory file behind.

    The Ray tests excepted for temp files: a local Ray keeps its session directory
    (logs) by design, and ends its workers' children outright when it stops.
    """
    on_ray = Path(str(request.node.fspath)).name.startswith("test_ray")
    temp_before, shm_before = _listing(private_tempdir), _listing(SHM)
    yield
    for _ in range(20):  # helpers of a finished subprocess may still be on their way out
        temp = set() if on_ray else _listing(private_tempdir) - temp_before
        temp -= _expected_temp_entries()
        shm = {name for name in _listing(SHM) - shm_before if _ours(name)}
        shm -= _held_by_others(shm)
        if not temp and not shm:
            return
        time.sleep(0.25)
    assert not temp, f"temp files left behind in {private_tempdir}: {sorted(temp)}"
    assert not shm, f"shared memory left behind in {SHM}: {sorted(shm)}"


def quick(**overrides: object) -> dict[str, object]:
    """QUICK options with overrides."""
    return {**QUICK, **overrides}


@pytest.fixture(scope="session")
def saved_study(small_study: SmallStudy) -> Path:
    """The file of the shared small study; copy_of it to change it."""
    return small_study.path


def copy_of(study: Path, directory: Path) -> Path:
    """A copy of a study file, to change."""
    target = directory / "copy.db"
    shutil.copy(study, target)
    return target


os.environ.setdefault("PYTHONHASHSEED", "0")
# A local Ray otherwise turns token authentication on and writes a token under ~/.ray.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@dataclasses.dataclass(frozen=True)
class SmallStudy:
    """A real study of a tiny search with every ceiling measured, and its progress lines."""

    path: Path
    progress: str


@pytest.fixture(scope="session")
def small_study(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> SmallStudy:
    """One tiny real search (I/O-bound items, so workers help), shared by report and
    progress tests; read it, do not change it.

    One for the whole run, not one per test process: the first process to need it
    searches (about 10 s), under a lock the others wait on, and they read what it left
    (the study and its progress lines)."""
    import filelock
    import workloads

    import autotune

    base = tmp_path_factory.getbasetemp()
    shared = base if worker_id == "master" else base.parent  # every xdist worker's parent
    folder = shared / "small_study"
    progress = folder / "progress.txt"
    with filelock.FileLock(shared / "small_study.lock"):
        if not progress.exists():
            folder.mkdir(exist_ok=True)
            stream = io.StringIO()
            autotune.search(
                dataset=workloads.sleepy_dataset,
                model=workloads.linear_model,
                batch_size=8,
                name="small",
                space={"num_workers": [0, 1, 2], "threads": 1, "batch_size": [8, 16]},
                progress=autotune.LineProgress(stream),
                **quick(
                    trials=6, seed=0, study=str(folder / "small.db"), ceilings=True, finalists=3
                ),
            )
            progress.write_text(stream.getvalue())  # last: its presence says the study is whole
    return SmallStudy(path=folder / "small.db", progress=progress.read_text())


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """A PostgreSQL server on loopback for this test process (see tests/postgres.py);
    the tests that need one are skipped where none can start, except in CI."""
    import postgres

    try:
        server = postgres.Server()
    except (RuntimeError, OSError) as error:
        if os.environ.get(postgres.REQUIRE):
            raise
        pytest.skip(f"no PostgreSQL server could start here: {error}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: Any) -> str:
    """The URL of a new, empty database on the test PostgreSQL server."""
    return str(postgres_server.database())
