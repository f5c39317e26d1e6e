"""Faults in what the user hands over: the config file, the factories, the space.

Each is one line that names the file or piece, what was given and what was
expected; exit code 2 from the CLI, an AutotuneError from the API; and no trial
runs (no study is even created).
"""

from __future__ import annotations

import multiprocessing

import pytest
import workloads
from faults import DRIVERS, Case, drive, probe_request, search_file

import autotune
from autotune.probe import run_probe

GOOD = "from workloads import linear_model as model, sleepy_dataset as dataset\n"


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize(
    ("name", "source", "expected"),
    [
        ("missing.py", None, "config missing.py: no such file"),
        ("config.yaml", "dataset: imagenet\n", "config config.yaml: expected a Python file"),
        ("config.py", "dataset:\n  path: /data\n", "config.py, line 3: syntax error"),
        ("config.py", "x = (", "config.py, line 3: syntax error: '(' was never closed"),
        ("config.py", "import not_a_module_anywhere", "raised ModuleNotFoundError while loading"),
        ("config.py", "def model(): pass", "config.py defines no `dataset()`"),
        ("config.py", "from workloads import sleepy_dataset as dataset", "defines no `model()`"),
        ("config.py", "dataset = 3\ndef model(): pass", "`dataset` is int; expected a function"),
        ("config.py", GOOD + "batch_size = 'big'", "batch_size is 'big'; expected a positive"),
        ("config.py", GOOD + "search = {'trials': 0}", "trials is 0; expected a number > 0"),
    ],
)
def test_a_broken_config_file_is_one_line_naming_it(
    driver, name, source, expected, write_config, workdir, capsys
) -> None:
    if source is not None:
        write_config(source, name)
    outcome = search_file(driver, name, capsys)  # as typed, relative to the working directory
    assert outcome.code == 2
    assert expected in outcome.error
    assert name in outcome.error
    assert not (workdir / "studies").exists()  # refused before any trial


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize(
    ("pieces", "expected"),
    [
        (
            {"dataset": "not_a_dataset"},
            "dataset() returned int; expected a torch.utils.data.Dataset",
        ),
        ({"model": "not_a_model"}, "model() returned str; expected a torch.nn.Module"),
    ],
)
def test_a_factory_of_the_wrong_type_says_what_it_returned(
    driver, pieces, expected, workdir, capsys
) -> None:
    outcome = drive(driver, Case(**pieces), workdir, capsys)
    assert outcome.code == 2
    where = "config " if driver == "cli" else "the 'fault' workload: "
    assert outcome.error.startswith(where)
    assert outcome.error.endswith(expected) or expected + " (" in outcome.error


def test_the_probe_names_the_factory_of_the_wrong_type() -> None:
    result = run_probe(probe_request(workloads.not_a_dataset, mode="check"))
    assert result.failure is not None
    assert result.failure.piece == "dataset()"
    assert result.failure.message.startswith("dataset() returned int; expected")
    request = probe_request(workloads.SleepyDataset(), workloads.not_a_model, mode="check")
    result = run_probe(request)
    assert result.failure is not None
    assert result.failure.piece == "model()"
    assert result.failure.message == "model() returned str; expected a torch.nn.Module"


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize(
    ("space", "expected"),
    [
        ({"num_workers": -1}, "space['num_workers'] holds -1; num_workers must be an integer >= 0"),
        ({"num_workers": [0, 2, -3]}, "space['num_workers'] holds -3; num_workers must be"),
        (
            {"num_workers": 0, "prefetch_factor": 2},
            "sets prefetch_factor but fixes num_workers at 0; prefetch_factor only applies "
            "with workers",
        ),
        ({"batch_size": []}, "space['batch_size'] is empty; give at least one value"),
        ({"amp": "fp8"}, "allowed are"),
    ],
)
def test_a_bad_space_is_refused_before_any_trial(driver, space, expected, workdir, capsys) -> None:
    case = Case(space={"threads": 1, "batch_size": 8, **space})
    outcome = drive(driver, case, workdir, capsys)
    assert outcome.code == 2
    assert expected in outcome.error
    assert not outcome.study.exists()


def test_an_error_is_an_autotune_error_of_the_right_kind(workdir, write_config) -> None:
    with pytest.raises(autotune.ConfigError):
        autotune.search(workdir / "missing.py")
    with pytest.raises(autotune.SpaceError):
        autotune.search(**Case(space={"num_workers": -1}).api_kwargs())
    with pytest.raises(autotune.WorkloadError):
        autotune.search(**Case(model="not_a_model").api_kwargs())


def test_a_script_that_searches_without_a_main_guard_is_told_to_add_one(
    workdir, monkeypatch
) -> None:
    # What a probe process sees while it imports such a script to find its functions.
    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(autotune.ConfigError, match='call it under `if __name__ == "__main__":`'):
        autotune.search(**Case().api_kwargs())
    assert not (workdir / "studies").exists()
