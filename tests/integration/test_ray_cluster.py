"""A search joining a Ray cluster by its address: a head and a worker node on this machine."""

from __future__ import annotations

import os

import optuna
import pytest
import workloads
from conftest import CHILD_PYTHONPATH, quick
from messages import Messages
from ray.cluster_utils import Cluster

import autotune
from autotune.study import Attr

pytestmark = pytest.mark.scaleout


def test_a_search_joins_a_cluster_by_address_and_runs_trials_on_every_node(workdir) -> None:
    env = {"PYTHONPATH": CHILD_PYTHONPATH}  # the tests' workloads unpickle on every node
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "include_dashboard": False,
            "env_vars": env,
            # Workers at this process's priority, as the docs tell a cluster's admin.
            "_system_config": {"worker_niceness": os.getpriority(os.PRIO_PROCESS, 0)},
        },
    )
    address = cluster.address
    try:
        worker = cluster.add_node(num_cpus=1, env_vars=env)
        cluster.wait_for_nodes()
        lines: list[str] = []
        autotune.search(
            dataset=workloads.sleepy_dataset,
            model=workloads.linear_model,
            batch_size=8,
            name="cluster",
            space={"num_workers": [0, 1], "threads": 1, "batch_size": [8, 16], "amp": "off"},
            progress=Messages(lines),
            backend="ray",
            address=address,
            # Two trials at once, each taking a whole node's CPU: one on each node.
            **quick(trials=2, seed=0, finalists=1),
        )
        expected = {cluster.head_node.node_id, worker.node_id}
    finally:
        cluster.shutdown()
    assert f"ray: the Ray cluster at {address}: 2 node(s), 2 CPUs, 0 GPUs" in lines
    study = optuna.load_study(study_name="cluster", storage="sqlite:///studies/cluster.db")
    probed = [t for t in study.trials if Attr.NODE in t.user_attrs]
    assert all(t.user_attrs[Attr.BACKEND] == "ray" for t in study.trials)
    assert {t.user_attrs[Attr.NODE]["node_id"] for t in probed} == expected
