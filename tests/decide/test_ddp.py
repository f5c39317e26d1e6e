"""Several ranks: parallel trials on disjoint CPU shares, the DDP probe (2 gloo ranks on this
CPU machine, for real), the DDP keywords, and the emitted ``ddp`` section."""

from __future__ import annotations

import dataclasses
import itertools
import json
import pickle
import signal
import subprocess
import sys
import threading
import time

import optuna
import pytest
import torch
import workloads
from conftest import quick
from torch import nn

import autotune
from autotune import SearchResult, StudyError
from autotune.cli import main
from autotune.decide import Confirmed
from autotune.decide._ddp import (
    DdpMeasurement,
    DdpResult,
    DdpSetup,
    _try_larger_batch,
    after_ddp,
    buffer_keyword,
    keep_default_unless_faster,
    knob_grid,
    rank_threads,
    run_ddp_stage,
)
from autotune.machine import detect_machine
from autotune.machine._gpus import Discovery
from autotune.probe import (
    Figures,
    Measurement,
    ProbeRequest,
    ProbeResult,
    Window,
    WorkloadSource,
    _ddp,
    run_probe,
)
from autotune.probe._build import EpochLoader, rank_sampler
from autotune.probe._child import _stream
from autotune.probe._measure import Warmth
from autotune.probe._placement import PLACEMENT, Placement
from autotune.progress._progress import QuietProgress
from autotune.result._launch import ddp_code, lr_note, torchrun_line
from autotune.settings._settings import Settings
from autotune.study import locate
from autotune.study._storage import open_storage
from autotune.workload._options import SearchOptions
from autotune.workload._workload import Workload

TWO_CPU_RANKS = Placement.plan(
    device="cpu", gpus=None, ranks=2, discovery=Discovery(gpus=()), cpus=[0, 1], usable=2
)
ONE_RANK = Placement.plan(
    device="cpu", gpus=None, ranks=1, discovery=Discovery(gpus=()), cpus=[0, 1], usable=2
)


def template(dataset, model=workloads.linear_model, batch_size=8, **fields) -> ProbeRequest:
    workload = Workload(dataset=dataset, model=model, batch_size=batch_size)
    options = {"window_seconds": 0.15, "max_windows": 3, "warmup_seconds": 0.05}
    return ProbeRequest(
        source=WorkloadSource(pickled=pickle.dumps(workload)),
        settings=fields.pop("settings", Settings(batch_size=batch_size)),
        device="cpu",
        stall_timeout=20.0,
        **{**options, **fields},
    )


def test_a_ddp_probe_trains_every_rank_on_its_own_cpus() -> None:
    settings = Settings(batch_size=8, num_workers=1, prefetch_factor=2, threads=1)
    request = TWO_CPU_RANKS.ddp_request(
        template(workloads.SleepyDataset(delay=0.001), settings=settings),
        {"gradient_as_bucket_view": True},
    )
    result = run_probe(request)
    assert result.ok, result.failure
    ranks = result.info["ranks"]
    assert [r["cpus"] for r in ranks] == [[0], [1]]
    assert [r["torch_threads"] for r in ranks] == [1, 1]
    assert result.info["backend"] == "gloo"
    windows = result.figures.windows
    assert len(windows) == 3
    for window in windows:  # both ranks trained every step of the window
        assert window.samples == 2 * window.steps * 8
    assert result.figures.startup_s is not None
    assert result.figures.monitor is not None and result.figures.monitor.cores == (0, 1)


def test_the_ranks_warm_through_their_workers_queue_and_window_in_whole_turns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = Settings(batch_size=8, num_workers=3, prefetch_factor=2, threads=1)
    request = TWO_CPU_RANKS.ddp_request(
        template(workloads.SleepyDataset(), settings=settings, window_seconds=0.5), {}
    )
    # Both ranks report 1 s since the warm-up began and no halt.
    monkeypatch.setattr(_ddp, "_gather", lambda values, group: [[1.0, 0.0], [1.0, 0.0]])
    pace = _ddp.AgreedPace(request, 0, None, threading.Event(), None, torch.device("cpu"))
    assert pace.warmed(6, 0.0) is Warmth.COLD  # 3 workers x 2 batches queued at the start
    assert pace.warm_round() == 2
    assert pace.warmed(7, 0.0) is Warmth.WARM
    # 7 batches a second, windows of 0.5 s: 4 batches, rounded up to 2 turns of 3.
    assert pace.per_window == 6
    assert _ddp._aim(0.5, 10, 1.0) == 5 and _ddp._aim(0.5, 10, 1.0, 4) == 8
    assert _ddp._aim(0.5, 3, 0.0) == 3 and _ddp._aim(0.5, 3, 0.0, 4) == 4


def test_a_probe_of_one_rank_of_two_loads_that_ranks_half_of_each_epoch() -> None:
    # Under DDP each rank's epoch is its part of the dataset: a worker start per epoch
    # costs each sample twice what one process over the whole dataset shows.
    first, second = (
        slot.apply(template(workloads.SleepyDataset())) for slot in TWO_CPU_RANKS.slots()
    )
    assert (first.shard, second.shard) == ((2, 0), (2, 1))
    assert ONE_RANK.slots()[0].apply(first).shard is None
    workload = Workload(
        dataset=workloads.SleepyDataset(length=64), model=workloads.linear_model, batch_size=8
    )
    dataset = workload.make_dataset()
    halves = [list(rank_sampler(dataset, (2, rank), 0)) for rank in (0, 1)]
    assert sorted(halves[0] + halves[1]) == list(range(64))
    assert rank_sampler(dataset, None, 0) is None
    assert rank_sampler(workloads.stream_dataset(), (2, 0), 0) is None
    for request, per_epoch in ((first, 4), (dataclasses.replace(first, shard=None), 8)):
        stream = _stream(request, workload, dataset, lambda event: None)
        sizes = [stream.next()[1] for _ in range(per_epoch)]
        assert sizes == [8] * per_epoch and stream.epochs == 0
        stream.next()
        assert stream.epochs == 1
    # A new epoch draws its part in a new order, as set_epoch does under DDP.
    sampler = rank_sampler(dataset, (2, 0), 0)
    loader = EpochLoader([], sampler)
    iter(loader)
    before = list(sampler)
    iter(loader)
    assert list(sampler) != before


def test_a_rank_out_of_memory_fails_the_ddp_probe_as_out_of_memory() -> None:
    # The stand-in model raises torch.OutOfMemoryError above batch 8, as CUDA would.
    request = TWO_CPU_RANKS.ddp_request(
        template(workloads.SleepyDataset(), model=workloads.oom_model, batch_size=16), {}
    )
    result = run_probe(request)
    assert result.failure is not None
    assert result.failure.kind == "oom"
    assert result.failure.message.startswith(("rank 0: ", "rank 1: "))
    assert "out of memory" in result.failure.message
    assert result.figures.wall_s < 15  # the other rank, stuck in an all-reduce, is ended


class PartlyUsed(nn.Module):
    """A model with a layer that gets no gradient: DDP needs find_unused_parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(workloads.FEATURES, workloads.CLASSES)
        self.unused = nn.Linear(workloads.FEATURES, workloads.CLASSES)

    def forward(self, inputs):
        return self.used(inputs)


def ddp_stage(winner, finalists, dataset, model=workloads.linear_model, batch_sizes=(), **options):
    """The DDP stage on 2 CPU ranks, quietly, for a user's batch of 8."""
    setup = DdpSetup(
        placement=TWO_CPU_RANKS,
        template=template(dataset, model=model),
        info={"buffers": 0, "gradient_bytes": 1000},
        user_batch_size=8,
        batch_sizes=batch_sizes,
    )
    return run_ddp_stage(
        setup,
        winner=winner,
        finalists=finalists,
        options=SearchOptions(ddp_knobs=False, **options),
        progress=QuietProgress(),
    )


def test_unused_parameters_are_found_and_the_probe_runs_again() -> None:
    single = Figures(
        windows=(Window(index=0, seconds=1, samples=400, fresh=400, steps=50, wait_seconds=0),)
    )
    winner = Measurement(settings=Settings(batch_size=8, threads=1), figures=single)
    chosen, ddp = ddp_stage(winner, [winner], workloads.SleepyDataset(), model=PartlyUsed)
    assert chosen == winner
    first, second = ddp.measurements
    assert first.failure is not None and "find_unused_parameters" in first.failure.message
    assert second.failure is None and second.kwargs["find_unused_parameters"] is True
    assert ddp.kwargs["find_unused_parameters"] is True
    assert ddp.samples_per_s and ddp.samples_per_s > 0
    assert ddp.scaling_efficiency == pytest.approx(ddp.samples_per_s / (2 * 400))


def test_with_ddp_finalists_the_ddp_figures_choose() -> None:
    one_rank = figures(100)
    cheap = Measurement(settings=Settings(batch_size=8, threads=1), figures=one_rank)
    workers = Settings(batch_size=8, num_workers=4, prefetch_factor=2, threads=1)
    fast = Measurement(settings=workers, figures=one_rank)
    # Equally fast on one rank; as DDP, workers waiting on I/O win.
    chosen, ddp = ddp_stage(
        cheap, [cheap, fast], workloads.SleepyDataset(delay=0.03), ddp_finalists=True
    )
    assert [m.role for m in ddp.measurements] == ["winner", "finalist"]
    slow, quick_ = (m.samples_per_s for m in ddp.measurements)
    # About 4x alone (four workers sleep side by side); beside a loaded suite's other
    # tests, on one CPU a rank, 1.2x was read: the DDP figures choose either way.
    assert quick_ > 1.1 * slow
    assert chosen == fast and ddp.settings == workers
    assert ddp.figures == ddp.measurements[1].figures


def batch_stage(model):
    """The DDP stage on 2 CPU ranks for a winner at batch 8 of a space of 4, 8 and 16:
    the winner, the config it returns and its ``ddp`` section."""
    winner = Measurement(settings=Settings(batch_size=8, threads=1), figures=figures(100))
    chosen, ddp = ddp_stage(
        winner, [winner], workloads.SleepyDataset(), model=model, batch_sizes=(4, 8, 16)
    )
    return winner, chosen, ddp


def test_a_step_cost_the_batch_does_not_grow_makes_ddp_take_the_larger_batch() -> None:
    # Every step costs 30 ms whatever the batch, as a gradient all-reduce or a kernel
    # launch does: one rank's probes saw the winner's batch of 8; as DDP, 16 trains
    # about twice as fast, so it is taken, and one rank is measured again at it. Where the
    # first pair reads apart by less than its noise (a loaded machine), both are
    # measured again, and the second pair decides.
    winner, chosen, ddp = batch_stage(workloads.steady_model)
    pair = [("winner", 8), ("batch", 16)]
    assert [(m.role, m.settings.batch_size) for m in ddp.measurements] in (pair, pair * 2)
    small, large = (m.samples_per_s for m in ddp.measurements[-2:])
    assert large > 1.3 * small
    assert chosen.settings == Settings(batch_size=16, threads=1) == ddp.settings
    assert chosen.figures != winner.figures and chosen.samples_per_s > 0
    assert ddp.single_samples_per_s == chosen.samples_per_s
    assert ddp.figures == ddp.measurements[-1].figures
    assert ddp.batch_gain == pytest.approx(large / small)
    # Dropped with the larger batch: the rounds measured the batch of 8. Its speedup over
    # the default is the rounds' times the gain as DDP, and is what the result states.
    kept = Confirmed(
        winner=winner, finalists=(), rates=(90.0, 100.0), speedup_rounds=(1.2, 1.25, 1.3)
    )
    confirmed, picked, ddp = after_ddp(kept, chosen, ddp)
    assert confirmed.rates == () and confirmed.speedup_rounds == ()
    assert ddp.speedup == pytest.approx(1.25 * ddp.batch_gain)
    assert DdpResult.from_dict(ddp.to_dict()).speedup == ddp.speedup
    result = SearchResult(
        settings=picked.settings,
        figures=picked.figures,
        device="cpu",
        machine=detect_machine(None),
        ddp=ddp,
        **{
            **confirmed.confirmation(),
            "baseline": Measurement(settings=Settings(batch_size=8), figures=figures(10_000.0)),
        },
    )
    assert result.speedup == ddp.speedup  # not this one rank's probe over the default's
    assert result.speedup_text() == (
        f"{ddp.speedup:.2f}x (one rank's rounds times the larger batch's gain as DDP)"
    )
    # The default kept by the rounds, then beaten by its larger batch as DDP: the gain.
    default = dataclasses.replace(kept, speedup_rounds=(), is_default=True)
    _, _, from_default = after_ddp(default, chosen, dataclasses.replace(ddp, speedup=None))
    assert from_default.speedup == pytest.approx(ddp.batch_gain)


def test_a_larger_batch_that_fails_as_ddp_leaves_the_winner() -> None:
    winner, chosen, ddp = batch_stage(workloads.BigBatchOOM)
    assert [m.role for m in ddp.measurements] == ["winner", "batch"]
    assert ddp.measurements[1].failure is not None
    assert ddp.measurements[1].failure.kind == "oom"
    assert chosen == winner and ddp.settings == winner.settings
    assert ddp.figures == ddp.measurements[0].figures


class ScriptedProbes:
    """DDP probes that read the figures given, in order, and keep what they were asked."""

    def __init__(self, *rates: float, spread: float = 0.0) -> None:
        self.rates = list(rates)
        self.spread = spread
        self.asked: list[tuple[int, str]] = []
        self.progress = QuietProgress()

    def __call__(self, settings, kwargs, role):
        self.asked.append((settings.batch_size, role))
        return DdpMeasurement(
            settings=settings,
            kwargs=kwargs,
            figures=figures(self.rates.pop(0), spread=self.spread),
            role=role,
        )


@pytest.mark.parametrize(
    ("rates", "spread", "asked", "taken"),
    [
        ((130.0,), 0.0, [(16, "batch")], True),  # beyond the noise at once
        ((101.0,), 0.3, [(16, "batch")], False),  # within the tolerance: not read again
        # Faster by more than the tolerance, within the noise: a second round decides.
        ((108.0, 100.0, 115.0), 0.3, [(16, "batch"), (8, "winner"), (16, "batch")], True),
        ((108.0, 100.0, 101.0), 0.3, [(16, "batch"), (8, "winner"), (16, "batch")], False),
    ],
)
def test_a_larger_batch_is_taken_beyond_the_noise_or_when_a_second_round_agrees(
    monkeypatch, rates, spread, asked, taken
) -> None:
    alone = figures(60.0)
    monkeypatch.setattr(
        autotune.decide._ddp, "run_probe", lambda request: ProbeResult(figures=alone)
    )
    winner = Measurement(settings=Settings(batch_size=8, threads=1), figures=figures(50.0))
    first = DdpMeasurement(
        settings=winner.settings, kwargs={}, figures=figures(100.0, spread=spread), role="winner"
    )
    probes = ScriptedProbes(*rates, spread=spread)
    larger = Settings(batch_size=16, threads=1)
    picked, measured, gain = _try_larger_batch(
        probes, winner, first, larger, {}, TWO_CPU_RANKS, template(workloads.SleepyDataset()), 0.03
    )
    assert probes.asked == asked
    if taken:
        assert picked == Measurement(settings=larger, figures=alone)
        assert measured.settings == larger
        assert measured.samples_per_s == pytest.approx(rates[-1], rel=0.01)
        assert gain == pytest.approx(rates[-1] / 100.0, rel=0.01)
    else:
        assert picked == winner and measured.settings == winner.settings
        assert gain is None


def test_a_winner_without_threads_comes_back_with_the_threads_its_ranks_trained_on() -> None:
    # The default loader leaves torch's threads unset; each rank's probe, pinned to its one
    # CPU, trained on one. Launched without torchrun's OMP_NUM_THREADS, an unset rank would
    # take both CPUs beside the other rank's: the result says what was measured.
    default = Measurement(settings=Settings(batch_size=8), figures=figures(100))
    chosen, ddp = ddp_stage(default, [default], workloads.SleepyDataset())
    assert [m.settings.threads for m in ddp.measurements] == [None]
    assert chosen == default and ddp.settings == Settings(batch_size=8, threads=1)
    assert "torch.set_num_threads(1)" in ddp.to_code()
    assert rank_threads(Settings(batch_size=8), ONE_RANK).threads is None
    # The default kept stays the default, its rounds with it, under the spelled settings.
    kept = Confirmed(winner=default, finalists=(), rates=(90.0, 100.0), is_default=True)
    confirmed, winner, after = after_ddp(kept, chosen, ddp)
    assert confirmed == kept and winner.settings == ddp.settings and after == ddp
    assert winner.figures == default.figures
    # Another finalist picked by the DDP figures: the rounds measured the first one.
    other = Measurement(settings=Settings(batch_size=8, num_workers=1), figures=figures(90))
    confirmed, winner, _ = after_ddp(kept, other, dataclasses.replace(ddp, settings=other.settings))
    assert confirmed.rates == () and not confirmed.is_default and winner == other


@pytest.fixture(scope="module")
def ddp_search(tmp_path_factory):
    """One search for 2 CPU ranks (1 CPU each), DDP keywords tuned."""
    study = tmp_path_factory.mktemp("ddp") / "ranks.db"
    result = autotune.search(
        dataset=workloads.sleepy_dataset,
        model=workloads.linear_model,
        batch_size=8,
        name="ranks",
        space={"num_workers": [0, 1, 2], "batch_size": [8, 16]},
        **quick(trials=6, seed=0, ranks=2, study=str(study)),
    )
    return result, study


def test_parallel_trials_run_on_disjoint_cpu_sets(ddp_search) -> None:
    _result, path = ddp_search
    study = optuna.load_study(study_name="ranks", storage=f"sqlite:///{path}")
    probed = [
        t
        for t in study.trials
        if "autotune.figures" in t.user_attrs and "autotune.duplicate_of" not in t.user_attrs
    ]
    trials = [t for t in probed if PLACEMENT in t.user_attrs]
    assert trials == probed  # every trial that ran a probe ran in a slot
    assert len(trials) >= 4
    for trial in trials:  # each trial saw exactly its rank's share: 1 of the 2 CPUs
        placement = trial.user_attrs[PLACEMENT]
        assert placement["cpus_seen"] == placement["cpus"]
        assert len(placement["cpus"]) == 1
    # When each held its slot: a trial's own start and end also span waiting for a
    # free slot and being told its value, so two trials can overlap in those while
    # one slot served them one after the other.
    held = {t.number: t.user_attrs[PLACEMENT]["held"] for t in trials}
    overlapping = [
        (a, b)
        for a, b in itertools.combinations(trials, 2)
        if held[a.number][0] < held[b.number][1] and held[b.number][0] < held[a.number][1]
    ]
    assert overlapping, "no two probes ran at the same time"
    for a, b in overlapping:
        cpus_a = set(a.user_attrs[PLACEMENT]["cpus_seen"])
        assert cpus_a.isdisjoint(b.user_attrs[PLACEMENT]["cpus_seen"])


def test_the_search_emits_a_ddp_section_with_a_torchrun_line(ddp_search) -> None:
    result, _path = ddp_search
    ddp = result.ddp
    assert ddp is not None
    section = result.to_dict()["ddp"]
    per_rank = result.settings.batch_size
    assert section["world_size"] == 2 and section["backend"] == "gloo"
    assert section["per_rank_batch_size"] == per_rank
    assert section["global_batch_size"] == 2 * per_rank
    assert section["dataloader"] == result.settings.dataloader_kwargs()
    assert section["cpus_per_rank"] == 1
    # Each rank pinned to the CPU its probes ran on.
    first, second = (str(cpus[0]) for cpus in section["cpu_sets"])
    assert section["torchrun"] == (
        "OMP_NUM_THREADS=1 MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=67108864 "
        "torchrun --standalone --nproc-per-node=2 --no-python sh -c "
        f'\'set -- {first} {second}; shift "$LOCAL_RANK"; '
        'exec taskset -c "$1" python train.py\''
    )
    assert set(section["ddp_kwargs"]) == {
        "bucket_cap_mb",
        "gradient_as_bucket_view",
        "static_graph",
    }
    assert section["samples_per_s"] > 0 and section["scaling_efficiency"] > 0
    assert section["single_samples_per_s"] == result.samples_per_s
    # The winner as DDP, at the larger batch when it had 8, then one probe per DDP
    # keyword that matters for this tiny model.
    roles = [m["role"] for m in section["measurements"]]
    first = section["measurements"][0]["settings"]["batch_size"]
    larger = [["batch"], ["batch", "winner", "batch"]] if first == 8 else [[]]
    assert roles[:1] == ["winner"] and roles[-2:] == ["knob", "knob"]
    assert roles[1:-2] in larger
    assert any("bucket_cap_mb: left out" in n for n in section["notes"])
    # The user trains with batch 8: a global batch of 16 or 32 changes the learning rate.
    assert section["lr_note"].startswith(f"the global batch is {2 * per_rank} (2 ranks x")
    code = result.to_code()
    compile(code, "<ddp code>", "exec")
    assert "DistributedSampler(dataset)" in code and 'init_process_group("gloo")' in code


def test_the_ddp_section_is_exported_and_loaded_back(ddp_search, tmp_path, capsys) -> None:
    result, path = ddp_search
    assert main(["export", str(path), "-o", str(tmp_path / "settings.json")]) == 0
    exported = json.loads((tmp_path / "settings.json").read_text())
    assert exported["ddp"]["torchrun"] == result.ddp.torchrun()
    loaded = autotune.load(tmp_path / "settings.json")
    assert loaded.ddp == result.ddp
    assert main(["show", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "DDP: 2 ranks (gloo)" in shown and "launch: OMP_NUM_THREADS=1 MALLOC_" in shown
    assert result.search_time is not None and (result.search_time.seconds("ddp") or 0) > 0


def test_a_study_of_one_rank_is_not_continued_with_two(ddp_search) -> None:
    _result, path = ddp_search
    with pytest.raises(StudyError, match=r"measured with 2 rank\(s\) of 1 CPU\(s\)"):
        autotune.search(
            dataset=workloads.sleepy_dataset,
            model=workloads.linear_model,
            batch_size=8,
            **quick(trials=1, ranks=1, study=str(path)),
        )


def test_the_cli_refuses_a_gpu_that_is_not_there(write_config, capsys) -> None:
    config = write_config(
        """
        import workloads
        dataset = workloads.sleepy_dataset
        model = workloads.linear_model
        """
    )
    if autotune.machine._gpus.discover().gpus:
        pytest.skip("this machine has GPUs")
    assert main(["search", str(config), "--gpus", "0"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("autotune: error: config ")
    assert "GPU 0 is not visible: no GPU is visible" in error
    assert len(error.splitlines()) == 1


def test_ctrl_c_stops_trials_running_in_parallel_and_keeps_them(write_config, workdir) -> None:
    config = write_config(
        """
        import workloads
        dataset = workloads.sleepy_dataset
        model = workloads.linear_model
        space = {"num_workers": [0, 1], "batch_size": 8}
        search = {"window_seconds": 0.2, "max_windows": 100, "min_windows": 100,
                  "warmup_seconds": 0.05,
                  "trials": 4, "ceilings": False, "bounds": False}
        """
    )
    command = [sys.executable, "-m", "autotune", "search", str(config), "--ranks", "2"]
    log = workdir / "stderr.txt"
    with log.open("w") as stderr:
        process = subprocess.Popen(command, stderr=stderr, cwd=workdir)
        storage = "sqlite:///studies/config.db"
        deadline = time.monotonic() + 120
        running: list[optuna.trial.FrozenTrial] = []
        while len(running) < 2:  # until two trials (20 s of windows each) are measuring
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
            assert process.poll() is None, log.read_text()
            try:
                # Opened as the search opens it, under the study directory's lock: a plain
                # load_study could create the tables while the search does, and fail it
                # ("table trial_values already exists").
                opened = open_storage(
                    locate(workdir / "studies" / "config.db", None), must_exist=True
                )
                trials = optuna.load_study(study_name="config", storage=opened).trials
            except Exception:  # the study is not created yet
                continue
            running = [t for t in trials if t.state.name == "RUNNING" and t.intermediate_values]
        interrupted_at = time.monotonic()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130, log.read_text()
    assert time.monotonic() - interrupted_at < 15, log.read_text()  # not the 20 s of windows
    study = optuna.load_study(study_name="config", storage=storage)
    failures = [t.user_attrs.get("autotune.failure") or {} for t in study.trials]
    assert [f.get("kind") for f in failures].count("interrupted") == 2, log.read_text()
    assert all(t.state != optuna.trial.TrialState.RUNNING for t in study.trials)


# --------------------------------------------------------------------- pure rules
def test_ddp_knobs_are_tuned_only_where_they_matter() -> None:
    grid, notes = knob_grid({"gradient_bytes": 4 * 2**10, "buffers": 0})
    assert [k for k, _ in grid] == ["gradient_as_bucket_view", "static_graph"]
    assert notes == [
        "bucket_cap_mb: left out: the gradients (4 KiB) fit in one bucket of any size tried.",
        f"{buffer_keyword()}: left out: the model has no buffers.",
    ]
    grid, notes = knob_grid({"gradient_bytes": 100 * 2**20, "buffers": 2048})
    assert dict(grid) == {
        "gradient_as_bucket_view": (True,),
        "static_graph": (True,),
        "bucket_cap_mb": (5, 100),
        buffer_keyword(): (False,),
    }
    assert notes == []


def figures(rate: float, spread: float = 0.0, windows: int = 4) -> Figures:
    rates = [rate * (1 + spread * (-1) ** i) for i in range(windows)]
    return Figures(
        windows=tuple(
            Window(index=i, seconds=1.0, samples=int(r), fresh=int(r), steps=1, wait_seconds=0)
            for i, r in enumerate(rates)
        )
    )


@pytest.mark.parametrize(
    ("tried", "expected"),
    [
        ([(True, figures(1020))], False),  # within the tolerance: the default stays
        ([(True, figures(1100))], True),  # clearly faster, steady windows
        ([(True, figures(1100, spread=0.3))], False),  # faster, but within its noise
        ([(True, None)], False),  # failed
        ([(5, figures(1100)), (100, figures(1200))], 100),  # the fastest of the faster
    ],
)
def test_a_ddp_keyword_keeps_its_default_unless_clearly_faster(tried, expected) -> None:
    default = 25 if isinstance(expected, int) and not isinstance(expected, bool) else False
    assert keep_default_unless_faster(default, figures(1000), tried, 0.03) == expected


def test_the_learning_rate_note_follows_the_linear_scaling_rule() -> None:
    assert lr_note(user_batch_size=64, per_rank_batch_size=32, world_size=2) is None
    note = lr_note(user_batch_size=32, per_rank_batch_size=32, world_size=8)
    assert note == (
        "the global batch is 256 (8 ranks x 32), 8x the 32 you train with: by the linear "
        "scaling rule, multiply the learning rate by 8 (with a few epochs of warm-up when it "
        "grows), or keep the global batch at 32 with a per-rank batch of 4 (not measured)."
    )


def test_the_launch_line_and_code_for_gpus() -> None:
    line = torchrun_line(world_size=2, device_type="cuda", visible="2,3", threads=8)
    assert line == (
        "CUDA_VISIBLE_DEVICES=2,3 OMP_NUM_THREADS=8 "
        "MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=67108864 "
        "torchrun --standalone --nproc-per-node=2 train.py"
    )
    settings = Settings(
        batch_size=64, num_workers=6, prefetch_factor=4, pin_memory=True, amp="fp16"
    )
    code = ddp_code(
        settings=settings,
        kwargs={"static_graph": True},
        backend="nccl",
        device_type="cuda",
        world_size=2,
        launch=line,
    )
    compile(code, "<ddp code>", "exec")
    assert "torch.cuda.set_device(local_rank)" in code
    assert "device_ids=[local_rank]," in code and "static_graph=True," in code
    assert "batch_size=64,  # per rank; the global batch is 128" in code
    assert 'GradScaler("cuda")' in code
    assert "autotune.fix_allocator()" in code


def test_a_ddp_result_reads_back_what_it_wrote() -> None:
    ddp = DdpResult(
        world_size=4,
        backend="nccl",
        device_type="cuda",
        settings=Settings(batch_size=32, num_workers=4, prefetch_factor=2),
        kwargs={"bucket_cap_mb": 100},
        rank_cpus=8,
        user_batch_size=32,
        visible="0,1,2,3",
        figures=figures(4000),
        single_samples_per_s=1100.0,
        allocator="fixed",
    )
    data = json.loads(json.dumps(ddp.to_dict()))
    assert DdpResult.from_dict(data) == ddp
    assert data["scaling_efficiency"] == pytest.approx(4000 / 4400)
    assert data["global_batch_size"] == 128
    assert data["torchrun"].startswith("CUDA_VISIBLE_DEVICES=0,1,2,3 OMP_NUM_THREADS=8 MALLOC_")
