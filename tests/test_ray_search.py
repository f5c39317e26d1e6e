"""Searches on Ray Tune (a local Ray of 2 CPUs, one for the module): the study they write."""

from __future__ import annotations

from collections.abc import Iterator

import optuna
import pytest
import ray
import workloads
from conftest import CHILD_PYTHONPATH, quick
from optuna.trial import TrialState

import autotune
from autotune import WorkloadError
from autotune.cli import main
from autotune.study._study import BACKEND, FIGURES, NODE, records

CONFIG = """
from workloads import linear_model, sleepy_dataset
dataset = sleepy_dataset
model = linear_model
batch_size = 8
search = {"window_seconds": 0.1, "max_windows": 9, "warmup_seconds": 0.05, "ceilings": False,
          "trials": 8, "seed": 0, "finalists": 1, "rounds": 1}
space = {"num_workers": [0, 1, 2], "threads": 1, "batch_size": [8, 16], "amp": "off"}
"""


@pytest.fixture(scope="module")
def local_ray() -> Iterator[str]:
    """A local Ray of 2 CPUs; the searches use it rather than start their own."""
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        runtime_env={"env_vars": {"PYTHONPATH": CHILD_PYTHONPATH}},  # tests' workloads unpickle
    )
    yield ray.get_runtime_context().get_node_id()
    ray.shutdown()


def study(path: str) -> optuna.Study:
    return optuna.load_study(study_name=None, storage=f"sqlite:///{path}")


def test_a_ray_search_writes_the_study_the_embedded_one_would(
    local_ray, capsys, write_config
) -> None:
    config = str(write_config(CONFIG))
    assert main(["search", config, "--backend", "ray", "--study", "studies/ray.db"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("best: workers=")
    assert "ray: the Ray session this process had already started: 1 node(s), 2 CPUs" in err
    assert "trials run one at a time" in err

    on_ray = study("studies/ray.db")
    # A config the search queued for a next trial that the budget did not reach stays
    # WAITING, for a resumed search to run; the confirming round never runs it.
    ran = [t for t in on_ray.trials if t.state != TrialState.WAITING]
    explored = [t for t in ran if t.user_attrs["autotune.role"] == "explore"]
    assert len(explored) == 8
    assert sorted(t.user_attrs["autotune.role"] for t in ran if t not in explored) == [
        "baseline",
        "confirm",
    ]
    assert {t.user_attrs["autotune.role"] for t in ran} == {
        "explore",
        "confirm",
        "baseline",
    }
    assert all(t.user_attrs[BACKEND] == "ray" for t in ran)
    assert all(t.state != TrialState.RUNNING for t in ran)
    probed = [t for t in ran if "autotune.duplicate_of" not in t.user_attrs]
    pruned = [t for t in probed if t.state == TrialState.PRUNED]
    assert pruned, "ASHA stopped no trial"
    for trial in probed:
        assert trial.user_attrs[NODE]["node_id"] == local_ray
        figures = trial.user_attrs[FIGURES]
        windows = len(figures["windows"])
        # Every window's figures are kept, and reported as the intermediate values.
        assert sorted(trial.intermediate_values) == list(range(1, windows + 1))
        assert figures["startup_s"] > 0 and figures["peak_memory_bytes"] > 0
        assert (windows < 9) == (trial.state == TrialState.PRUNED)
        if trial.state == TrialState.PRUNED:
            assert trial.value == trial.intermediate_values[windows]

    # The embedded backend on the same config: the same proposals first (same sampler),
    # a result of the same shape, and trials told apart only by the backend attribute.
    assert main(["search", config, "--study", "studies/optuna.db"]) == 0
    capsys.readouterr()
    embedded = study("studies/optuna.db")
    first = [r.settings for r in records(on_ray) if r.role == "explore"][:6]
    assert first == [r.settings for r in records(embedded) if r.role == "explore"][:6]
    ray_result = on_ray.user_attrs["autotune.result"]
    embedded_result = embedded.user_attrs["autotune.result"]
    assert ray_result.keys() == embedded_result.keys()
    assert ray_result["settings"].keys() == embedded_result["settings"].keys()
    for ray_trial, embedded_trial in zip(on_ray.trials[:6], embedded.trials[:6], strict=True):
        assert ray_trial.user_attrs.keys() - {NODE} == embedded_trial.user_attrs.keys()
        assert embedded_trial.user_attrs[BACKEND] == "optuna"

    # Resuming on Ray adds to the study.
    args = ["search", config, "--backend", "ray", "--study", "studies/ray.db", "--resume"]
    assert main([*args, "--trials", "3"]) == 0
    capsys.readouterr()
    explored = [r for r in records(study("studies/ray.db")) if r.role == "explore"]
    assert len(explored) == 11


def test_failures_on_ray_are_recorded_with_their_reason(local_ray, workdir) -> None:
    # The user's code fails in every config: the search stops with that one error.
    with pytest.raises(WorkloadError, match=r"every config failed the same way.*corrupt record"):
        autotune.search(
            dataset=workloads.FailingAfterDataset(after=8),
            model=workloads.linear_model,
            batch_size=4,
            name="failing",
            space={"num_workers": 0, "batch_size": [4, 8, 16, 32], "threads": [1, 2]},
            backend="ray",
            **quick(trials=10),
        )
    failed = records(study("studies/failing.db"))
    assert 3 <= len(failed) < 10
    for record in failed:
        assert record.state == "FAIL" and record.backend == "ray"
        assert record.failure.kind == "error" and "dataset" in record.failure.piece
        assert "corrupt record" in record.failure.message

    # The Ray worker running a trial dies (as on a lost node): recorded, not dropped.
    with pytest.raises(WorkloadError, match="no config finished a probe"):
        autotune.search(
            dataset=workloads.RayWorkerKillingDataset(),
            model=workloads.linear_model,
            batch_size=4,
            name="dying",
            space={"num_workers": 0, "batch_size": 4, "threads": 1},
            backend="ray",
            **quick(trials=1),
        )
    (dead,) = records(study("studies/dying.db"))
    assert dead.state == "FAIL" and dead.failure.kind == "crash"
    assert dead.failure.message.startswith("the Ray worker running the trial died")
