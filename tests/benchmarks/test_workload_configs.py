"""The benchmark suite: every workload config loads and takes a training step (the
default run's through a probe, for a few steps), so none of them rots; and the suite's
decision rules and reports on made-up figures."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import IterableDataset, default_collate

from autotune import Settings
from autotune.machine._machine import detect_machine
from autotune.probe import ProbeRequest, WorkloadSource, run_probe
from autotune.probe._train import Trainer
from autotune.space._space import build_space
from autotune.workload._workload import load_config
from benchmarks import _cli, _page
from benchmarks.common._verdicts import judge, shared_cpu_limit
from benchmarks.common._workloads import WORKLOADS, WORKLOADS_DIR, find, full_profile, quick_profile
from benchmarks.suite import _report
from benchmarks.suite._compare import Entry, interleave, median, spread
from benchmarks.suite._strategies import greedy_workers, loader_configs, with_workers

# Every config file there (a leading underscore marks a helper module the configs share).
CONFIGS = sorted(p for p in WORKLOADS_DIR.glob("*.py") if not p.name.startswith("_"))
# Those of the default run, trained through a probe; every config takes a step in-process.
DEFAULT_RUN_CONFIGS = sorted(
    {w.config for w in WORKLOADS} | {r.config for w in WORKLOADS for r in w.references}
)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The workloads' files for this test session, removed afterwards."""
    return tmp_path_factory.mktemp("bench-data")


@pytest.mark.parametrize("config", DEFAULT_RUN_CONFIGS, ids=lambda p: p.stem)
def test_workload_config_trains_a_few_steps(config: Path, data_dir: Path) -> None:
    workload = load_config(config).workload
    settings = Settings(
        batch_size=workload.batch_size, num_workers=1, prefetch_factor=2, persistent_workers=True
    )
    request = ProbeRequest(
        source=WorkloadSource(config_path=str(config)),
        settings=settings,
        device="cpu",
        window_seconds=0.1,
        max_windows=2,
        warmup_seconds=0.0,
        stall_timeout=120.0,
        env=(("AUTOTUNE_BENCH_DATA", str(data_dir)),),
    )
    result = run_probe(request)
    assert result.ok, result.failure
    assert len(result.figures.windows) == 2
    assert all(w.samples >= workload.batch_size for w in result.figures.windows)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_workload_config_loads_yields_an_item_and_steps_in_process(
    config: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cheaper than a probe: the config loads, its dataset gives an item, its model builds,
    and one training step runs on a batch of two items, all in this process."""
    monkeypatch.setenv("AUTOTUNE_BENCH_DATA", str(data_dir))
    workload = load_config(config).workload
    data = workload.make_dataset()
    item = next(iter(data)) if isinstance(data, IterableDataset) else data[0]
    net = workload.make_model()
    assert isinstance(net, nn.Module)
    batch = (workload.collate_fn or default_collate)([item, item])
    Trainer(workload, net, torch.device("cpu"), "off").step(batch)


def test_every_workload_is_a_config_of_the_suite() -> None:
    configs = {w.config for w in WORKLOADS} | {r.config for w in WORKLOADS for r in w.references}
    assert configs == set(CONFIGS)
    # The default run (no --workloads) is the four it always was; the rest run when named.
    assert [w.name for w in find([])] == [
        "io-bound",
        "cpu-decode",
        "hdf5-chunked",
        "compute-bound",
    ]
    assert [w.name for w in find([], every=True)] == [w.name for w in WORKLOADS]
    assert [w.name for w in find(["hf-style-text"])] == ["hf-style-text"]
    assert len(WORKLOADS) >= 12 and len({w.name for w in WORKLOADS}) == len(WORKLOADS)
    assert find(["all"]) == list(WORKLOADS)
    assert [w.name for w in find(["tiny-model", "io-bound"])] == ["io-bound", "tiny-model"]


@pytest.mark.parametrize("bf16", [False, True], ids=["no-bf16", "bf16"])
@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.name)
def test_grids_are_valid_spaces_and_quick_ones_are_small(workload: Any, bf16: bool) -> None:
    # The grids follow the machine (CPUs, native bf16): this one is the 2-CPU CI machine,
    # with and without bf16, whatever machine the test runs on.
    machine = dataclasses.replace(detect_machine("cpu"), cpus=2, cpu_bf16=bf16)
    loaded = load_config(workload.config)
    sizes = {}
    for profile in (quick_profile(), full_profile()):
        grid = workload.grid(profile, machine)
        space = build_space({**loaded.space, **grid}, machine, loaded.workload.batch_size)
        configs = list(space.configs())
        assert len(configs) == space.size() == len({c.key() for c in configs})
        assert all(space.contains(c) for c in configs)
        assert 0 in space.num_workers.values()
        sizes[profile.name] = space.size()
    # A quick grid fits a 15-minute run; a full one is big enough for brute force to cost
    # (at least three times the quick one: a machine without bf16 halves the AMP knob).
    assert sizes["quick"] <= 24 and 3 * sizes["quick"] <= sizes["full"]


def test_full_runs_search_with_autotunes_own_measuring_and_quick_ones_halve_it() -> None:
    assert full_profile().search_options() == {}
    assert quick_profile().search_options() == {"window_seconds": 0.25, "warmup_seconds": 0.25}


def test_greedy_sweep_stops_at_the_first_step_that_does_not_pay() -> None:
    curve = {0: 100.0, 1: 180.0, 2: 185.0, 4: 400.0}
    seen = []

    def measure(settings: Settings) -> float:
        seen.append(settings.num_workers)
        return curve[settings.num_workers]

    chosen, steps = greedy_workers(measure, Settings(batch_size=8), [4, 0, 2, 1], min_gain=0.03)
    # 2 workers gain under 3% over 1, so 4 (the real best) is never tried.
    assert seen == [0, 1, 2]
    assert chosen == with_workers(Settings(batch_size=8), 1)
    assert chosen.prefetch_factor == 2 and not chosen.persistent_workers
    assert steps == [(0, 100.0), (1, 180.0), (2, 185.0)]


def test_loader_configs_cover_workers_prefetch_and_batch_once() -> None:
    machine = detect_machine("cpu")
    space = build_space(
        {"num_workers": [0, 2], "prefetch_factor": [2, 4], "threads": [1, 2]}, machine, 16
    )
    configs = loader_configs(space, [16, 32])
    assert len(configs) == 2 * (1 + 2)
    assert {c.threads for c in configs} == {None}
    assert all(c.persistent_workers == (c.num_workers > 0) for c in configs)


def test_interleaving_measures_a_b_c_c_b_a_and_shares_equal_configs() -> None:
    harness: Any = type("FakeHarness", (), {"config": Path("w.py")})()
    a, b = Settings(batch_size=8), Settings(batch_size=8, num_workers=2, prefetch_factor=2)
    entries = [
        Entry(label="defaults", settings=a, mode="train", harness=harness),
        Entry(label="autotune", settings=b, mode="train", harness=harness),
        Entry(label="oracle", settings=b, mode="train", harness=harness),
        Entry(label="data ceiling", settings=b, mode="data", harness=harness),
    ]
    order = []

    def measure(entry: Entry, round_number: int) -> float:
        order.append((entry.label, round_number))
        return float(len(order))

    figures = interleave(entries, 2, measure)
    assert order == [
        ("defaults", 1), ("autotune", 1), ("data ceiling", 1),
        ("data ceiling", 2), ("autotune", 2), ("defaults", 2),
    ]  # fmt: skip
    assert figures[entries[2].key()] == figures[entries[1].key()] == [2.0, 5.0]
    assert figures[entries[0].key()] == [1.0, 6.0]
    assert median([3.0, 1.0, 2.0]) == 2.0 and spread([90.0, 100.0, 110.0]) == pytest.approx(0.2)


MEDIANS = {
    "defaults": 100.0,
    "rule of thumb": 150.0,
    "greedy sweep": 180.0,
    "loader-only": 160.0,
    "autotune": 198.0,
    "oracle": 200.0,
}
SEARCH = {name: 0.0 for name in MEDIANS} | {"autotune": 60.0, "oracle": 600.0}


def test_verdicts_on_a_workload_that_meets_every_target() -> None:
    verdicts = judge(MEDIANS, SEARCH, ceiling=210.0, must_beat_baselines=True)
    assert [v.target for v in verdicts] == [
        "autotune >= 0.97 x oracle",
        "search time <= 0.15 x grid",
        "autotune >= 0.90 x ceiling",
        "autotune >= 0.98 x defaults",
        "clearly above every baseline",
    ]
    assert all(v.passed for v in verdicts), [v.line() for v in verdicts]
    assert verdicts[0].figure == pytest.approx(0.99)
    assert verdicts[1].figure == pytest.approx(0.1)


def test_verdicts_fail_with_the_figure_that_missed() -> None:
    slow = MEDIANS | {"autotune": 150.0}
    verdicts = {
        v.target: v
        for v in judge(slow, SEARCH | {"autotune": 120.0}, 300.0, must_beat_baselines=True)
    }
    assert not verdicts["autotune >= 0.97 x oracle"].passed
    assert verdicts["search time <= 0.15 x grid"].figure == pytest.approx(0.2)
    assert not verdicts["autotune >= 0.90 x ceiling"].passed
    assert verdicts["autotune >= 0.98 x defaults"].passed
    beaten = verdicts["clearly above every baseline"]
    assert not beaten.passed and "greedy sweep" in beaten.detail


def test_a_baseline_already_at_the_oracle_explains_a_tie() -> None:
    tie = MEDIANS | {"greedy sweep": 199.0}
    verdict = judge(tie, SEARCH, 210.0, must_beat_baselines=True)[-1]
    assert verdict.passed
    assert "greedy sweep is already within 3% of the oracle" in verdict.detail


def _probe(describe: str, samples_per_s: float, cpu_busy: float | None) -> dict[str, Any]:
    return {"describe": describe, "samples_per_s": samples_per_s, "cpu_busy": cpu_busy}


def test_loader_and_model_on_the_same_cpus_add_up_their_cheapest_cpu_time() -> None:
    compute = [_probe("threads=2", 3200.0, 1.0), _probe("threads=1", 2000.0, 0.5)]
    data = [
        _probe("workers=4", 800.0, 1.0),  # 1.25 ms of the CPUs a sample
        _probe("workers=0", 500.0, 0.5),  # 1.0 ms: cheaper, though slower
        _probe("failed", 0.0, None),
    ]
    shared = shared_cpu_limit(compute, data)
    assert shared is not None
    assert shared.load_config == "workers=0" and shared.load_cost == pytest.approx(1e-3)
    assert shared.train_config == "threads=1" and shared.train_cost == pytest.approx(2.5e-4)
    assert shared.samples_per_s == pytest.approx(800.0)  # 1 / 1.25 ms
    # A loader that waits on storage (10% busy) takes little from training.
    waiting = shared_cpu_limit(compute, [_probe("workers=16", 1000.0, 0.1)])
    assert waiting is not None and waiting.samples_per_s == pytest.approx(1 / (1e-4 + 2.5e-4))
    assert shared_cpu_limit(compute, [_probe("workers=0", 500.0, None)]) is None


def test_the_ceiling_verdict_quotes_the_shared_cpu_limit_below_the_ceiling() -> None:
    # 200 of a 210 ceiling, but only 180 can be had with loader and model sharing the CPUs.
    verdict = judge(MEDIANS, SEARCH, 210.0, must_beat_baselines=False, shared=180.0)[2]
    assert verdict.passed  # the target itself is judged against min(compute, data)
    assert "of the 180 samples/s loader and model can share the CPUs for" in verdict.detail
    assert "autotune reaches 1.100, the oracle 1.111" in verdict.detail
    # Above the ceiling it says nothing new, and is not quoted.
    above = judge(MEDIANS, SEARCH, 210.0, must_beat_baselines=False, shared=400.0)[2]
    assert "share" not in above.detail


def _section(name: str) -> dict[str, Any]:
    rows = [
        {
            "strategy": strategy,
            "describe": "workers=0 batch=32",
            "samples_per_s": value,
            "vs_oracle": value / MEDIANS["oracle"],
            "vs_defaults": value / MEDIANS["defaults"],
            "of_ceiling": value / 210.0,
            "search_s": SEARCH[strategy],
            "search_vs_oracle": SEARCH[strategy] / SEARCH["oracle"],
            "round_spread": 0.05,
        }
        for strategy, value in MEDIANS.items()
    ]
    ceiling = {"describe": "workers=0 batch=32", "samples_per_s": 210.0, "rounds": [200.0, 210.0]}
    return {
        "name": name,
        "summary": "made-up figures",
        "batch_size": 32,
        "device": "cpu",
        "grid": {"size": 12},
        "strategies": rows,
        "ceilings": {
            "compute": ceiling,
            "data": ceiling | {"samples_per_s": 400.0},
            "min": 210.0,
            "shared_cpu": {
                "samples_per_s": 150.0,
                "load_cost": 0.004,
                "load_config": "workers=0 batch=32",
                "train_cost": 0.0025,
                "train_config": "workers=0 batch=32 threads=1",
            },
        },
        "references": [],
        "verdicts": [v.to_dict() for v in judge(MEDIANS, SEARCH, 210.0, must_beat_baselines=True)],
    }


def test_reports_show_every_strategy_and_verdict(tmp_path: Path) -> None:
    section = _section("io-bound")
    table = _report.text_table(section)
    assert all(name in table for name in MEDIANS)
    assert "PASS  autotune >= 0.97 x oracle: 0.990" in table
    assert "cheapest loading measured kept all the CPUs busy 4.00 ms per sample" in table
    assert "cheapest training 2.50 ms (workers=0 batch=32 threads=1)" in table
    assert "side by side on the same CPUs, about 150 samples/s" in table
    results = {
        "date": "2026-01-02",
        "host": "box",
        "mode": "quick",
        "machine": detect_machine("cpu").to_dict(),
        "versions": {"torch": "x", "autotune": "y"},
        "commit": None,
        "dirty": False,
        "seed": 0,
        "profile": {"rounds": 3, "window_seconds": 0.25},
        "wall_s": 60.0,
        "workloads": [
            {**section, "note": "measured while a test run shared the CPUs"},
            {"name": "cpu-decode", "error": "RuntimeError: broken"},
        ],
        "notes": ["two runs merged"],
    }
    json_path, md_path = _report.write(results, tmp_path / "results")
    assert json_path.name == "2026-01-02-box.json"
    assert json.loads(json_path.read_text())["workloads"][0]["name"] == "io-bound"
    document = md_path.read_text()
    assert document.startswith("# Benchmark results: 2026-01-02, box (quick mode)")
    assert "(2026-01-02-box.json)" in document
    assert "| io-bound | PASS 0.990 |" in document and "FAILED: RuntimeError: broken" in document
    assert "side by side on the same CPUs, about 150 samples/s" in document
    assert "> two runs merged" in document
    assert "> measured while a test run shared the CPUs" in document
    # The results page sums the run up from the files: its targets, its misses, a link.
    page = _page.write(tmp_path / "results", tmp_path / "RESULTS.md").read_text()
    assert "[2026-01-02-box.md](results/2026-01-02-box.md): io-bound, cpu-decode" in page
    assert "| io-bound | PASS 0.990 |" in page and "| cpu-decode | error |" in page


def test_cli_refuses_an_unknown_workload(capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli.main(["suite", "--workloads", "io-bound,tape-drive"]) == 2
    assert "unknown workloads ['tape-drive']" in capsys.readouterr().err
