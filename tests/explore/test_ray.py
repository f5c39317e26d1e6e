"""The Ray backend's pieces without a search: resources, failures, options, the local Ray."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import sys
import tempfile
import warnings
from pathlib import Path
from types import SimpleNamespace

import fake_nvml
import optuna
import psutil
import pytest
from messages import Messages
from optuna.trial import TrialState
from ray import exceptions
from ray.tune.search.optuna.optuna_search import _OptunaTrialSuggestCaptor

from autotune import ConfigError, MissingExtraError, SearchOptions
from autotune.cli import main
from autotune.explore import ExplorePlan, get_backend
from autotune.explore._ray import RaySession, trial_resources
from autotune.explore._ray_driver import StudyPruning, TrialBook, failure_of
from autotune.explore._ray_worker import (
    METRIC,
    NUMBER_KEY,
    TIME_ATTR,
    TrialSpec,
    match_niceness,
    on_this_node,
)
from autotune.explore._trials import fixed_trial, group_attrs
from autotune.machine import Machine, usable_cpus
from autotune.probe import Figures, ProbeRequest, Window, WorkloadSource
from autotune.progress import QuietProgress
from autotune.settings import Settings
from autotune.space import build_space
from autotune.study import Attr, locate, open_study

pytestmark = pytest.mark.scaleout

GPU_NODE = {"CPU": 64.0, "GPU": 8.0}
CPU_HEAD = {"CPU": 16.0}
SMALL_GPU_NODE = {"CPU": 48.0, "GPU": 4.0}


@pytest.mark.parametrize(
    ("nodes", "device", "concurrent", "ranks", "cpus", "gpus", "at_once", "share"),
    [
        # A DDP rank's share: the node's CPUs / its GPUs, one GPU each.
        ([GPU_NODE], "cuda", None, None, 8, 1, 8, 1 / 8),
        ([GPU_NODE], "cuda:1", 3, None, 8, 1, 3, 1 / 8),
        # A CPU-only head takes no GPU trial; the GPU nodes' share decides.
        ([CPU_HEAD, SMALL_GPU_NODE, SMALL_GPU_NODE], "cuda", None, None, 12, 1, 8, 12 / 48),
        # Fewer CPUs than GPUs still gives each trial a CPU, and every GPU a trial.
        ([{"CPU": 6.0, "GPU": 4.0}], "cuda", None, None, 1, 1, 4, 1 / 6),
        # CPU only: a whole node each, so one trial at a time on each node...
        ([{"CPU": 2.0}], "cpu", None, None, 2, 0, 1, 1.0),
        ([{"CPU": 1.0}, {"CPU": 1.0}], "cpu", None, None, 1, 0, 2, 1.0),
        # ...or a rank's share when tuning for several CPU ranks per node...
        ([{"CPU": 8.0}], "cpu", None, 2, 4, 0, 2, 1 / 2),
        # ...unless more at once are asked for: they share the node's CPUs.
        ([{"CPU": 8.0}], "cpu", 4, None, 2, 0, 4, 1 / 4),
    ],
)
def test_each_trial_asks_for_what_one_rank_would_have(
    nodes, device, concurrent, ranks, cpus, gpus, at_once, share
) -> None:
    resources = trial_resources(nodes, device, concurrent, ranks)
    assert (resources.cpus, resources.gpus, resources.at_once) == (cpus, gpus, at_once)
    assert resources.memory_share == pytest.approx(share)


def test_cpu_only_trials_run_one_at_a_time_and_say_why() -> None:
    note = trial_resources([{"CPU": 2.0}], "cpu", None).note
    assert "one at a time" in note and "corrupt each other's figures" in note
    note = trial_resources([{"CPU": 8.0}], "cpu", 4).note
    assert "4 trials share each node's 8 CPUs" in note and "disturb each other" in note


def test_trials_on_a_gpu_need_a_gpu_node() -> None:
    with pytest.raises(ConfigError, match="no node of the Ray cluster has a GPU"):
        trial_resources([CPU_HEAD], "cuda", None)


def test_ray_errors_are_read_with_their_reason() -> None:
    failure = failure_of(exceptions.ActorDiedError())
    assert failure.kind == "crash"
    assert failure.message.startswith("the Ray worker running the trial died: The actor died")

    failure = failure_of(exceptions.OutOfMemoryError("the node is low on memory"))
    assert failure.kind == "oom" and "memory monitor" in failure.message

    crashed = exceptions.RayTaskError("run_trial", "Traceback ...\nKeyError: 'x'", KeyError("x"))
    failure = failure_of(crashed.as_instanceof_cause())
    assert failure.kind == "error" and failure.message.startswith("the trial failed in Ray: ")
    assert failure.traceback


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"address": "auto"}, "address is for backend 'ray', but backend is 'optuna'"),
        ({"concurrent": 2}, "concurrent is for backend 'ray'"),
        ({"backend": "ray", "concurrent": 0}, "concurrent is 0; expected a whole number >= 1"),
        ({"backend": "dask"}, "backend is 'dask'; expected one of \\['optuna', 'ray'\\]"),
    ],
)
def test_ray_options_are_checked(options, message) -> None:
    with pytest.raises(ConfigError, match=message):
        SearchOptions(**options)


def test_without_ray_the_backend_says_what_to_install(monkeypatch, capsys, write_config) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as if not installed
    with pytest.raises(MissingExtraError, match=r"pip install 'autotune\[ray\]'"):
        get_backend("ray")
    config = write_config("from workloads import linear_model as model, sleepy_dataset as dataset")
    assert main(["search", str(config), "--backend", "ray"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].endswith("install it with: pip install 'autotune[ray]'")


def test_a_local_ray_listens_on_the_loopback_only_and_stops() -> None:
    before = os.environ.get("RAY_AUTH_MODE")
    session = RaySession(None)
    try:
        assert session.owned
        assert [n["Resources"]["CPU"] for n in session.nodes] == [usable_cpus()]
        listening = []
        for process in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):  # one of Ray's that ended meanwhile
                listening += [
                    (process.name(), connection.laddr)
                    for connection in process.net_connections(kind="inet")
                    if connection.status == psutil.CONN_LISTEN
                ]
        assert listening  # Ray's servers are up...
        for name, address in listening:  # ...and none is reachable from another machine
            assert address.ip in ("127.0.0.1", "::1", "::ffff:127.0.0.1"), (name, address)
        # Its workers run at this process's priority, not at Ray's niceness 15.
        import ray

        assert ray.get(ray.remote(_niceness).remote()) == _niceness()
    finally:
        session.close()
    import ray

    assert not ray.is_initialized()
    assert not os.path.exists(session.storage)
    assert os.environ.get("RAY_AUTH_MODE") == before


def _niceness() -> int:
    return os.getpriority(os.PRIO_PROCESS, 0)


def _match_in_a_child(target: int, queue: multiprocessing.Queue) -> None:
    os.nice(2)  # as Ray's workers start: at a niceness above the driver's
    queue.put((match_niceness(target), match_niceness(_niceness() + 1)))


def test_a_trial_probes_at_the_driver_s_niceness_where_it_may() -> None:
    queue: multiprocessing.Queue = multiprocessing.get_context("fork").Queue()
    child = multiprocessing.get_context("fork").Process(
        target=_match_in_a_child, args=(_niceness(), queue)
    )
    child.start()
    lowered, raised = queue.get(timeout=30)
    child.join()
    # Lowering a niceness needs privilege: without it the worker keeps the one it had.
    privileged = os.geteuid() == 0
    assert lowered == (_niceness() if privileged else _niceness() + 2)
    assert raised == lowered + 1  # raising one is always allowed


def test_a_trial_at_a_lower_priority_than_the_driver_is_said_once(tmp_path) -> None:
    progress = Messages()
    study = open_study(locate(tmp_path / "s.db", None, name="s"), create=True)
    book = TrialBook(_plan(study, progress), exploring=True, count=3, timeout=None)
    for tune_id, niceness in (("same", book.niceness), ("nice", 15), ("again", 15)):
        _propose(book, tune_id)
        book.reported(tune_id, {"figures": Figures().to_dict(), "node": {"niceness": niceness}})
    book.close()
    if book.niceness >= 15:
        assert progress.lines == []
        return
    (line,) = progress.lines
    assert line.startswith("ray: trial #1 ran at niceness 15, above this process's")
    assert f"RAY_worker_niceness={book.niceness}" in line


def _plan(study: optuna.Study, progress: QuietProgress | None = None) -> ExplorePlan:
    settings = Settings(batch_size=8)
    machine = Machine(cpus=2, cpu_model="t", memory_bytes=2**33, shm_bytes=2**30, accelerator="cpu")
    return ExplorePlan(
        study=study,
        space=build_space({"num_workers": 0, "threads": 1, "amp": "off"}, machine, batch_size=8),
        template=ProbeRequest(source=WorkloadSource(), settings=settings, device="cpu"),
        warm_starts=(),
        options=SearchOptions(seed=0, min_windows=1, reduction_factor=3),
        progress=progress or QuietProgress(),
    )


def _propose(book: TrialBook, tune_id: str) -> None:
    """A trial proposed through the book, as OptunaSearch asks, and started as ``tune_id``."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Heartbeat of storage.*")
        config = book.propose(_OptunaTrialSuggestCaptor(book.plan.study.ask()))
    book.attach(config[NUMBER_KEY], tune_id)


def test_a_trial_takes_its_node_s_gpu_memory_share_and_config_copy(monkeypatch, tmp_path) -> None:
    config = tmp_path / "config.py"
    config.write_text("batch_size = 8\n")
    template = ProbeRequest(
        source=WorkloadSource(config_path=str(config)),
        settings=Settings(batch_size=8),
        device="cuda:1",
    )
    a100s = fake_nvml.two_a100s()
    fake_nvml.install(monkeypatch, a100s)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # the GPU Ray gave this trial
    request = on_this_node(TrialSpec(template=template, config_text=None, memory_share=0.2))
    assert request.device == "cuda:0"  # the only GPU this trial sees...
    assert ("CUDA_VISIBLE_DEVICES", a100s[1].uuid) in request.env  # ...pinned by its UUID
    assert request.monitor_gpus == (a100s[1].uuid,)  # and its figures read through NVML
    expected = psutil.virtual_memory().available * 0.2
    assert request.memory_limit == pytest.approx(expected, rel=0.1)

    # The config travels by value: a node with the same file uses it, another gets a copy.
    def shipped(text: str) -> Path:
        spec = TrialSpec(template=template, config_text=text, memory_share=None)
        return Path(on_this_node(spec).source.config_path)

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "node"))
    assert shipped("batch_size = 8\n") == config
    copy = shipped("batch_size = 16\n")
    assert copy.parent.parent == tmp_path / "node" / "autotune-configs"
    assert copy.name == "config.py" and copy.read_text() == "batch_size = 16\n"


def test_a_study_s_storage_pickles(tmp_path) -> None:
    # Ray Tune pickles its searcher, which holds the study and its storage.
    study = open_study(locate(tmp_path / "s.db", None, name="s"), create=True)
    copy = pickle.loads(pickle.dumps(study._storage))
    assert copy.get_all_studies()[0].study_name == "s"


def test_a_resumed_search_prunes_against_the_trials_already_in_the_study(tmp_path) -> None:
    study = open_study(locate(tmp_path / "s.db", None, name="s"), create=True)
    for value in (100.0, 200.0, 300.0, 400.0, 500.0):  # an earlier search's first windows
        study.add_trial(
            optuna.trial.create_trial(
                state=TrialState.PRUNED,
                user_attrs={Attr.ROLE: "explore"},
                intermediate_values={1: value},
            )
        )
    book = TrialBook(_plan(study), exploring=True, count=2, timeout=None)
    scheduler = StudyPruning(book)
    decisions = {}
    for tune_id, value in (("slow", 350.0), ("fast", 450.0)):
        _propose(book, tune_id)
        result = {METRIC: value, TIME_ATTR: 1}  # Ray's report of the first window
        decisions[tune_id] = scheduler.on_trial_result(
            None, SimpleNamespace(trial_id=tune_id), result
        )
    book.close()
    # Alone, 350 would have passed the first rung; with the 5 in the study before it, the
    # best 2 of 6 go on. Each window is in the study as soon as Ray reports it.
    assert decisions == {"slow": "STOP", "fast": "CONTINUE"}
    assert [t.intermediate_values for t in study.trials[5:]] == [{1: 350.0}, {1: 450.0}]


@pytest.mark.parametrize(
    ("rates", "state"),
    [((1000, 1004, 1008), TrialState.COMPLETE), ((1000, 1100, 1200), TrialState.FAIL)],
)
def test_a_confirming_trial_is_complete_when_its_windows_ended_steady(
    tmp_path, rates, state
) -> None:
    study = open_study(locate(tmp_path / "s.db", None, name="s"), create=True)
    (attrs,) = group_attrs([Settings(batch_size=8)], ["baseline"], 1)[1]
    book = TrialBook(_plan(study), exploring=False, count=1, timeout=None, fixed=[attrs])
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Heartbeat of storage.*")
        config = book.propose(_OptunaTrialSuggestCaptor(fixed_trial(study, attrs)))
    book.attach(config[NUMBER_KEY], "t")
    book.started("t")
    shown = tuple(
        Window(index=i, seconds=1.0, samples=r, fresh=r, steps=1, wait_seconds=0.0)
        for i, r in enumerate(rates)
    )
    book.reported("t", {"figures": Figures(windows=shown).to_dict()})
    book.ended("t")
    book.close()
    # Three windows of nine: within a third of the tolerance they end the probe; 20%
    # apart, the probe stopped before its end, as when the search ends while it runs.
    assert study.trials[-1].state == state
