"""A study kept in PostgreSQL (a real server on loopback, tests/postgres.py): a search
writes it, another process shows it, and every wrong URL is one clear line with nothing
written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import sqlalchemy
from conftest import QUICK
from faults import one_error_line

import autotune
from autotune.cli import main

QUICK_FLAGS = [
    "--trials",
    "2",
    "--window-seconds",
    "0.1",
    "--max-windows",
    "3",
    "--rounds",
    "1",
    "--runoff-rounds",
    "0",
    "--budget",
    "20",
]


def autotune_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``autotune ARGS`` in a process of its own, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def tables(url: str) -> set[str]:
    engine = sqlalchemy.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        return set(sqlalchemy.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_a_search_into_postgresql_is_shown_from_another_process(
    postgres_url, workdir, config, capsys
) -> None:
    # A tiny workload: the test is of where the study goes and who can read it; the
    # quickstart itself is run by the examples' tests. The search runs here, the show in
    # a process of its own.
    assert main(["search", str(config), "--study", postgres_url, *QUICK_FLAGS]) == 0
    searched = capsys.readouterr()
    hidden = postgres_url.replace(":autotune-test@", ":***@")
    assert f"study: {hidden}" in searched.out  # the password is never printed
    assert "autotune-test" not in searched.out + searched.err
    assert not (workdir / "studies").exists()  # nothing went to a file

    shown = autotune_cli("show", postgres_url, "--json", cwd=workdir)
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["study"] == {"name": "config", "path": hidden}
    study = optuna.load_study(study_name="config", storage=postgres_url)
    saved = autotune.SearchResult.from_dict(study.user_attrs["autotune.result"])
    assert data["result"]["settings"] == saved.settings.to_dict()
    assert [t.number for t in study.trials if t.state == optuna.trial.TrialState.RUNNING] == []


def test_a_database_of_several_studies_names_them_when_none_is_given(
    postgres_url, workdir, capsys
) -> None:
    for name in ("first", "second"):
        optuna.create_study(storage=postgres_url, study_name=name)
    assert main(["show", postgres_url]) == 2
    error = one_error_line(capsys.readouterr().err)
    assert error.endswith("holds 2 studies ('first', 'second'); name one with --study-name NAME.")
    assert main(["show", postgres_url, "--study-name", "third"]) == 2
    assert "holds no study named 'third'" in one_error_line(capsys.readouterr().err)


@pytest.fixture
def config(write_config) -> Path:
    return write_config(
        "import workloads\n"
        "dataset = workloads.sleepy_dataset\n"
        "model = workloads.linear_model\n"
        f"search = {dict(QUICK, trials=1)!r}\n"
    )


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    return one_error_line(capsys.readouterr().err)


def test_an_unreachable_server_is_one_line_and_nothing_written(config, workdir, capsys) -> None:
    url = "postgresql://autotune:x@127.0.0.1:1/none"
    for argv in (["search", str(config), "--study", url], ["show", url]):
        error = refused(argv, capsys)
        assert error.startswith("postgresql://autotune:***@127.0.0.1:1/none: the database server")
        assert "cannot be reached" in error and error.endswith("Nothing was written.")
    assert not (workdir / "studies").exists()


def test_a_wrong_password_is_one_line_and_nothing_written(
    postgres_server, postgres_url, config, capsys
) -> None:
    wrong = postgres_url.replace(":autotune-test@", ":wrong@")
    for argv in (["search", str(config), "--study", wrong], ["show", wrong]):
        error = refused(argv, capsys)
        assert "the server refused the URL's user name or password" in error
        assert "wrong" not in error.split(": ", 1)[0]  # the password is hidden
    assert tables(postgres_url) == set()


def test_a_missing_database_and_an_empty_one_are_each_one_line(
    postgres_server, postgres_url, config, capsys
) -> None:
    missing = postgres_server.url("no_such_database")
    assert "the server has no such database; create it" in refused(["show", missing], capsys)
    assert "the server has no such database" in refused(
        ["search", str(config), "--study", missing], capsys
    )
    empty = refused(["show", postgres_url], capsys)
    assert empty.endswith(
        "holds no study (no Optuna tables); run `autotune search CONFIG "
        f"--study {postgres_url.replace(':autotune-test@', ':***@')}` to make one."
    )
    assert tables(postgres_url) == set()


def test_a_url_of_an_unknown_dialect_is_one_line(config, workdir, capsys) -> None:
    error = refused(["search", str(config), "--study", "oracle://u:p@host/db"], capsys)
    assert error.startswith("--study oracle://u:***@host/db: 'oracle' is not a database")
    assert not (workdir / "studies").exists()


def test_a_study_of_a_newer_autotune_in_postgresql_is_refused_untouched(
    postgres_url, config, capsys
) -> None:
    study = optuna.create_study(storage=postgres_url, study_name="config")
    study.set_user_attr("autotune", {"format": 99})
    for argv in (["show", postgres_url], ["search", str(config), "--study", postgres_url]):
        assert "written by a newer autotune (format 99" in refused(argv, capsys)
    assert optuna.load_study(study_name="config", storage=postgres_url).trials == []


def search_into(url: str, name: str, length: int, **options: object) -> str:
    """A quick search of the sleepy workload (``length`` items) into study ``name`` of the
    database at ``url``; its progress lines."""
    import functools
    import io

    import workloads

    stream = io.StringIO()
    autotune.search(
        dataset=functools.partial(workloads.SleepyDataset, length=length),
        model=workloads.linear_model,
        batch_size=8,
        space={"num_workers": [0, 1, 2], "threads": 1, "batch_size": [8, 16]},
        progress=autotune.LineProgress(stream),
        **{**QUICK, "trials": 2, "seed": 0, "study": url, "study_name": name, **options},
    )
    return stream.getvalue()


def test_a_new_study_starts_from_a_close_one_in_the_same_database(postgres_url, workdir):
    search_into(postgres_url, "first", 256)
    first = autotune.load(postgres_url, study_name="first")
    # Another dataset length: the same workload as far as the loader's settings go.
    lines = search_into(postgres_url, "second", 192)
    assert "warm start: the " in lines
    assert "finalist(s) of study 'first' in postgresql://autotune:***@" in lines
    second = optuna.load_study(study_name="second", storage=postgres_url)
    explored = [t for t in second.trials if t.user_attrs.get("autotune.role") == "explore"]
    tried = autotune.Settings.from_dict(explored[0].user_attrs["autotune.settings"])
    assert (tried.num_workers, tried.batch_size) == (
        first.settings.num_workers,
        first.settings.batch_size,
    )
    # A far workload (another model class) is passed over; the studies a database holds
    # beside the new one are said in one line. (An empty warm_from, which looks at none of
    # them, is tests/pipeline/test_starts.py's.)
    for name in ("first", "second"):
        study = optuna.load_study(study_name=name, storage=postgres_url)
        meta = study.user_attrs["autotune"]
        study.set_user_attr(
            "autotune", {**meta, "workload": {**meta["workload"], "model_type": "Net"}}
        )
    lines = search_into(postgres_url, "third", 192)
    assert "warm start: 2 other studies passed over, first study 'first' in " in lines
    assert "it tuned another model type ('Net', here 'Linear')" in lines
    assert "tried first" not in lines


def test_searches_that_start_together_on_an_empty_database_all_open_it(postgres_url) -> None:
    # Each opener makes Optuna's tables unless another did first; without a lock taken in
    # turn, the second CREATE of the same type fails on a duplicate key.
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    from autotune.study import locate, open_study

    openers = 4
    barrier = Barrier(openers)

    def open_at_once(name: str) -> str:
        barrier.wait()
        return open_study(locate(postgres_url, name), create=True).study_name

    with ThreadPoolExecutor(openers) as pool:
        names = list(pool.map(open_at_once, [f"s{i}" for i in range(openers)]))
    assert names == [f"s{i}" for i in range(openers)]
    assert {"studies", "trials", "version_info"} <= tables(postgres_url)
    assert len(optuna.get_all_study_names(storage=postgres_url)) == openers
