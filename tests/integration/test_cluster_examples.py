"""The cluster examples write one study in PostgreSQL (a real server on loopback,
tests/postgres.py): the Slurm job array's body run as two array tasks at once on this
machine, and the Ray example with two trials at once on a local Ray."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import pytest
import sqlalchemy
import sqlalchemy.exc
from conftest import CHILD_PYTHONPATH, QUICK
from faults import finished_numbers
from optuna.trial import TrialState

from autotune.study import Attr

pytestmark = pytest.mark.scaleout

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
QUICK_FLAGS = "--window-seconds 0.1 --max-windows 3 --rounds 1"


def environment(**extra: str) -> dict[str, str]:
    """This environment, with this checkout's autotune and the tests' workloads importable,
    and ``autotune`` on PATH (the venv's)."""
    paths = [CHILD_PYTHONPATH, *filter(None, [os.environ.get("PYTHONPATH")])]
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "PATH": path, **extra}


def without(name: str, **extra: str) -> dict[str, str]:
    """:func:`environment` without the variable ``name``."""
    return {k: v for k, v in environment(**extra).items() if k != name}


def array_task(task: int, url: str, config: Path, cwd: Path) -> subprocess.Popen[str]:
    """One task of examples/slurm_array.sh, as Slurm would start it, without Slurm."""
    env = environment(
        AUTOTUNE_STUDY_URL=url,
        CONFIG=str(config),
        TRIALS="2",
        SLURM_ARRAY_TASK_ID=str(task),
        SLURM_ARRAY_JOB_ID="4242",
        AUTOTUNE_FLAGS=QUICK_FLAGS,
    )
    return subprocess.Popen(
        ["bash", str(EXAMPLES / "slurm_array.sh")],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, to end with its search
    )


def made(engine: sqlalchemy.Engine, name: str) -> bool:
    """Whether the study ``name`` exists with its workload recorded. Read with SQL, not
    Optuna, which would make its tables in a database that has none yet."""
    query = sqlalchemy.text(
        "SELECT count(*) FROM studies JOIN study_user_attributes USING (study_id) "
        "WHERE study_name = :name AND key = :key"
    )
    try:
        with engine.connect() as connection:
            return bool(connection.execute(query, {"name": name, "key": Attr.META}).scalar())
    except sqlalchemy.exc.ProgrammingError:  # no tables yet
        return False


@pytest.fixture
def config(write_config) -> Path:
    return write_config(
        "import workloads\n"
        "dataset = workloads.sleepy_dataset\n"
        "model = workloads.linear_model\n"
        f"search = {dict(QUICK)!r}\n",
        name="array_job.py",
    )


def test_two_slurm_array_tasks_write_one_study(postgres_url, config, workdir) -> None:
    # Two tasks at once, as an array's tasks run. The second starts once the first has
    # made the study: two searches that create the tables of an empty PostgreSQL database
    # at the same instant can collide there (pg_type's unique index), which this test
    # does not set out to check.
    first = array_task(0, postgres_url, config, workdir)
    tasks = [first]
    engine = sqlalchemy.create_engine(
        postgres_url.replace("postgresql://", "postgresql+psycopg://")
    )
    try:
        deadline = time.monotonic() + 120
        while not made(engine, "array_job"):
            assert first.poll() is None, first.communicate()[1]
            assert time.monotonic() < deadline, "the first task made no study"
            time.sleep(0.2)
        second = array_task(1, postgres_url, config, workdir)
        tasks.append(second)
        runs = [task.communicate(timeout=300) for task in tasks]
    finally:
        engine.dispose()
        for task in tasks:  # a task left running by a failed assertion
            if task.poll() is None:
                os.killpg(task.pid, signal.SIGKILL)
                task.communicate()
    for task, (out, err) in zip((first, second), runs, strict=True):
        assert task.returncode == 0, err[-3000:]
        assert out.startswith("best: workers=")
        assert "autotune-test" not in out + err  # the password is never printed
    assert "task 1 of job 4242" in runs[1][1]

    study = optuna.load_study(study_name="array_job", storage=postgres_url)
    trials = study.get_trials(deepcopy=False)
    assert sorted(t.number for t in trials) == list(range(len(trials)))
    assert len({t._trial_id for t in trials}) == len(trials)
    assert [t.number for t in trials if t.state == TrialState.RUNNING] == []
    # Each task wrote its own trials, and every finished trial is one task's.
    owners = {t.user_attrs[Attr.OWNER]["pid"] for t in trials if Attr.OWNER in t.user_attrs}
    assert len(owners) == 2
    reported = [finished_numbers(err) for _, err in runs]
    assert reported[0] and reported[1] and not reported[0] & reported[1]
    assert reported[0] | reported[1] == {t.number for t in trials if t.state.is_finished()}

    shown = subprocess.run(
        [sys.executable, "-m", "autotune", "show", postgres_url],
        cwd=workdir,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shown.returncode == 0, shown.stderr
    hidden = postgres_url.replace(":autotune-test@", ":***@")
    ran = [t for t in trials if t.state != TrialState.WAITING]  # WAITING: queued, not run
    assert shown.stdout.startswith(f"study 'array_job' in {hidden}: {len(ran)} trials")
    assert "\nbest: workers=" in shown.stdout


def test_the_slurm_script_asks_for_the_study_url(workdir) -> None:
    env = without("AUTOTUNE_STUDY_URL")
    done = subprocess.run(
        ["bash", str(EXAMPLES / "slurm_array.sh")],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "AUTOTUNE_STUDY_URL: set it to the study database" in done.stderr
    assert not (workdir / "studies").exists()


def test_the_ray_example_writes_one_study_from_two_trials_at_once(postgres_url, workdir) -> None:
    options = {**QUICK, "trials": 2, "seed": 0}
    # Ray keeps its session folder (logs, sockets) in TMPDIR: one of this test's own, with
    # a short path (Ray's socket paths must fit in 107 bytes), removed at the end.
    temp = tempfile.mkdtemp(prefix="at-ray-", dir="/tmp")
    try:
        done = subprocess.run(
            [sys.executable, str(EXAMPLES / "ray_cluster.py")]
            + [f"{name}={value!r}" for name, value in options.items()],
            cwd=workdir,
            env=without("RAY_ADDRESS", AUTOTUNE_STUDY_URL=postgres_url, TMPDIR=temp),
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("best: workers=")
    assert "ray: a local Ray" in done.stderr
    assert "as concurrent=2 asks" in done.stderr
    assert "autotune-test" not in done.stdout + done.stderr
    assert not (workdir / "studies").exists()  # nothing went to a file

    study = optuna.load_study(study_name="ray_cluster", storage=postgres_url)
    # A config queued for a trial that the budget did not reach stays WAITING.
    ran = [t for t in study.get_trials(deepcopy=False) if t.state != TrialState.WAITING]
    assert ran and all(t.state.is_finished() for t in ran)
    assert all(t.user_attrs[Attr.BACKEND] == "ray" for t in ran)
    assert finished_numbers(done.stderr) == {t.number for t in ran}


def test_the_ray_example_asks_for_the_study_url(workdir) -> None:
    env = without("AUTOTUNE_STUDY_URL")
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "ray_cluster.py")],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "set AUTOTUNE_STUDY_URL to the study's database" in done.stderr
