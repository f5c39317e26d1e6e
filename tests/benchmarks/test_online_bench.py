"""The online comparison (python -m benchmarks online): the grid, the rotation, the
targets and tables on made-up figures, the command line, and one real epoch of each
kind of loader in a new process on a tiny config."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from conftest import sessions_alive
from torch.utils.data import TensorDataset

from autotune import Machine, Settings, SpaceError
from benchmarks import _cli
from benchmarks.common import _checker
from benchmarks.common._workloads import find
from benchmarks.online import _check as _online
from benchmarks.online._check import (
    OnlineOptions,
    grid_configs,
    judge,
    markdown,
    rotated,
    run_workload,
)
from benchmarks.online._epoch import EpochView, measure_epoch

CPU2 = Machine(cpus=2, cpu_model="x", memory_bytes=2**30, shm_bytes=None, accelerator="cpu")
DEFAULT = Settings(batch_size=32)
FAST = Settings(
    batch_size=32, num_workers=8, prefetch_factor=4, persistent_workers=True, worker_threads=1
)


def test_the_default_grid_is_what_the_online_loader_may_reach_on_two_cpus() -> None:
    configs = grid_configs({}, CPU2, 32)
    assert len(configs) == 1 + 5 * 3
    assert {c.num_workers for c in configs} == {0, 1, 2, 4, 8, 16}
    assert {c.prefetch_factor for c in configs if c.num_workers} == {2, 4, 8}
    # One epoch is timed: persistent workers would change nothing in it.
    assert {c.persistent_workers for c in configs} == {False}
    # The training knobs stay as the online loader leaves them.
    assert {(c.batch_size, c.amp, c.echo, c.threads, c.pin_memory) for c in configs} == {
        (32, "off", 1, None, False)
    }


def test_a_grid_narrows_the_default_and_takes_only_loader_knobs() -> None:
    narrow = {"num_workers": [0, 4], "prefetch_factor": 2, "persistent_workers": False}
    assert grid_configs(narrow, CPU2, 16) == [
        Settings(batch_size=16),
        Settings(batch_size=16, num_workers=4, prefetch_factor=2, worker_threads=1),
    ]
    with pytest.raises(ValueError, match=r"the grid has \['batch_size'\]"):
        grid_configs({"batch_size": [16, 32]}, CPU2, 16)
    with pytest.raises(SpaceError, match="pin_memory"):
        grid_configs({"pin_memory": [False, True]}, CPU2, 16)


def test_each_loader_leads_one_round_in_turn() -> None:
    labels = ["default", "static", "online"]
    orders = [rotated(labels, r) for r in range(3)]
    assert orders[0] == labels and orders[1] == ["static", "online", "default"]
    assert sorted(order[0] for order in orders) == sorted(labels)
    assert rotated(labels, 3) == labels


@pytest.mark.parametrize(
    ("online", "passed"),
    [
        ([10.5, 10.4, 11.0], [True, True]),  # 1.05 x static: on the bound
        ([10.6, 10.6, 10.6], [False, True]),  # past 1.05 x static, still below the default
        ([12.3, 12.1, 11.0], [False, False]),  # slower than the default too
    ],
)
def test_the_targets_are_judged_on_the_medians(online: list[float], passed: list[bool]) -> None:
    seconds = {"default": [12.0, 12.2, 11.8], "static": [10.0, 9.0, 13.0], "online": online}
    targets = judge(seconds)
    assert [t["against"] for t in targets] == ["static", "default"]
    assert [t["bound"] for t in targets] == [1.05, 1.0]
    assert [t["passed"] for t in targets] == passed
    assert targets[0]["ratio"] == pytest.approx(sorted(online)[1] / 10.0)


def fake_epoch(seconds: float, online: bool = False) -> dict[str, Any]:
    epoch: dict[str, Any] = {"seconds": seconds, "batches": 64, "samples": 2048}
    if online:
        epoch |= {
            "choice": FAST.to_dict(),
            "describe": FAST.describe(),
            "tuning": False,
            "log": ["online: settled on ..."],
        }
    return epoch


def run_faked(
    monkeypatch: pytest.MonkeyPatch, rates: list[list[float]], epochs: dict[str, float]
) -> tuple[dict[str, Any], list[str]]:
    """run_workload on io-bound with a two-config grid and made-up figures; returns its
    section and the order the epochs were measured in."""
    grid = {"num_workers": [0, 8], "prefetch_factor": 4, "persistent_workers": True}
    order: list[str] = []

    def interleaved(config: Path, settings: list[Settings], **options: Any) -> list[list[float]]:
        assert settings == [DEFAULT, FAST] and options["rounds"] == 3
        return rates

    def epoch(config: Path, settings: Settings, **options: Any) -> dict[str, Any]:
        label = "online" if options["online"] else "static" if settings == FAST else "default"
        assert options["items"] == 8192 and options["device"] == "cpu"
        order.append(label)
        return fake_epoch(epochs[label], options["online"])

    monkeypatch.setattr(_online, "measure_interleaved", interleaved)
    monkeypatch.setattr(_online, "measure_epoch", epoch)
    options = OnlineOptions(rounds=3, grid=grid, epoch_scale=0.5)
    section = run_workload(find(["io-bound"])[0], options, CPU2, lambda line: None)
    json.dumps(section)  # JSON types only
    return section, order


def test_the_fastest_grid_config_is_timed_beside_the_default_and_the_online_loader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rates = [[90.0, 91.0, 89.0], [1300.0, 1350.0, 1400.0]]
    epochs = {"default": 23.0, "static": 2.0, "online": 2.2}
    section, order = run_faked(monkeypatch, rates, epochs)

    first, second, third = order[:3], order[3:6], order[6:]
    assert first == ["default", "static", "online"]
    assert second == ["static", "online", "default"] and third == ["online", "default", "static"]
    assert section["epoch_items"] == 8192 and section["grid"]["best"] == 1
    assert section["loaders"]["static"]["describe"] == FAST.describe()
    static, default = section["targets"]
    assert static["ratio"] == pytest.approx(1.1) and not static["passed"]
    assert default["ratio"] == pytest.approx(2.2 / 23) and default["passed"]
    table = markdown(section)
    assert (
        "| best static | workers=8 prefetch=4 persistent=yes batch=32 worker_threads=1 | 2.00 "
        "| 2.00-2.00 "
        "| 1.100 | <= 1.05 | FAIL |" in table
    )
    assert (
        "| default | workers=0 batch=32 | 23.00 | 23.00-23.00 | 0.096 | <= 1.00 | PASS |" in table
    )
    assert f"final choice: {FAST.describe()} (3 of 3 rounds)." in table
    assert f"Best static of 2 configs: {FAST.describe()}, 1,350" in table
    assert "Samples per epoch differ" not in table


def test_a_static_config_that_is_the_default_is_timed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rates = [[100.0, 100.0, 100.0], [50.0, 60.0, 70.0]]
    epochs = {"default": 20.0, "online": 19.0}
    section, order = run_faked(monkeypatch, rates, epochs)
    assert order == ["default", "online", "online", "default", "default", "online"]
    assert section["loaders"]["static"]["seconds"] == [20.0] * 3
    assert [t["passed"] for t in section["targets"]] == [True, True]


@pytest.mark.parametrize(
    "argv",
    [
        ["online", "--quick"],
        ["online", "--no-summary"],
        ["online", "agreement"],  # two suites
        ["online", "--trials", "3"],  # an agreement flag
        ["--grid", "{}"],  # a flag without a suite
        ["agreement", "--epoch-scale", "2"],
        ["online", "--epoch-scale", "0"],
        ["online", "--rounds", "0"],
        ["online", "--workloads", "tape-drive"],
        ["online", "--grid", "num_workers=4"],  # not JSON
        ["online", "--grid", "[0, 4]"],  # not an object
        ["online", "--grid", '{"batch_size": [16]}'],  # not a loader knob
        ["online", "--grid", '{"num_workers": [-1, 2]}'],  # out of range
        ["online", "--grid", "small"],  # a name only generalise knows
        ["online", "--seeds", "2"],  # a flag of generalise
    ],
)
def test_the_command_line_refuses_what_does_not_apply(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli.main(argv) == 2
    assert capsys.readouterr().err.startswith("python -m benchmarks: ")


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], OnlineOptions()),  # every default is the options'
        (
            ["--rounds", "2", "--seconds", "1", "--warmup", "0", "--epoch-scale", "0.5"],
            OnlineOptions(rounds=2, seconds=1.0, warmup=0.0, epoch_scale=0.5),
        ),
    ],
)
def test_the_command_line_takes_the_options_defaults_for_what_it_leaves_out(
    checks_run: list[Any], flags: list[str], expected: OnlineOptions
) -> None:
    assert _cli.main(["online", "--workloads", "io-bound", *flags]) == 0
    assert checks_run[0].header["options"] == dataclasses.asdict(expected)


def test_the_command_line_writes_json_and_markdown(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grids: list[list[Settings]] = []

    def interleaved(config: Path, settings: list[Settings], **options: Any) -> list[list[float]]:
        if config.name == "cpu_decode.py":
            raise RuntimeError("no JPEG today")
        assert options["rounds"] == 1 and options["seconds"] == 0.5
        grids.append(settings)
        return [[100.0 * (1 + s.num_workers)] for s in settings]

    def epoch(config: Path, settings: Settings, **options: Any) -> dict[str, Any]:
        assert options["items"] == 4096
        slow = settings.num_workers == 0 and not options["online"]
        return fake_epoch(20.0 if slow else 2.0, options["online"])

    monkeypatch.setattr(_online, "measure_interleaved", interleaved)
    monkeypatch.setattr(_online, "measure_epoch", epoch)
    out = tmp_path / "online.json"
    argv = ["online", "--workloads", "io-bound,cpu-decode", "--rounds", "1", "--out", str(out)]
    argv += ["--grid", '{"num_workers": [0, 2]}', "--epoch-scale", "0.25", "--seconds", "0.5"]
    assert _cli.main([*argv, "--keep-data"]) == 1  # a workload failed
    # 2 workers x prefetch 2, 4, 8, never persistent (the default grid no longer is).
    assert {s.num_workers for s in grids[0]} == {0, 2} and len(grids[0]) == 1 + 3

    results = json.loads(out.read_text())
    assert results["mode"] == "online" and results["targets"] == {"static": 1.05, "default": 1.0}
    assert results["options"]["grid"] == {"num_workers": [0, 2]}
    io_bound, cpu_decode = results["workloads"]
    assert [t["passed"] for t in io_bound["targets"]] == [True, True]
    assert cpu_decode == {"name": "cpu-decode", "error": "RuntimeError: no JPEG today"}
    written = out.with_suffix(".md").read_text()
    assert "| io-bound | PASS 1.000 | PASS 0.100 |" in written
    assert "| cpu-decode | FAILED | FAILED |" in written
    assert "### io-bound" in written and "FAILED: RuntimeError: no JPEG today" in written
    assert (
        "| best static | workers=2 prefetch=2 persistent=no batch=32 worker_threads=1 |"
        in capsys.readouterr().out
    )


def test_an_epoch_view_cuts_or_repeats_a_dataset() -> None:
    data = TensorDataset(torch.arange(5))
    assert [int(EpochView(data, 3)[i][0]) for i in range(3)] == [0, 1, 2]
    assert [int(EpochView(data, 12)[i][0]) for i in range(12)] == [0, 1, 2, 3, 4] * 2 + [0, 1]
    with pytest.raises(IndexError):
        EpochView(data, 3)[3]
    with pytest.raises(ValueError, match="at least one"):
        EpochView(data, 0)


TINY = textwrap.dedent(
    """
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset

    batch_size = 8

    def dataset():
        generator = torch.Generator().manual_seed(0)
        inputs = torch.randn(40, 8, generator=generator)
        return TensorDataset(inputs, torch.randint(0, 3, (40,), generator=generator))

    def model():
        return nn.Linear(8, 3)
    """
)


def test_an_epoch_of_each_loader_runs_in_a_new_process_and_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    config = tmp_path / "tiny.py"
    config.write_text(TINY)
    before = {c.pid for c in psutil.Process().children(recursive=True)}

    default = measure_epoch(config, Settings(batch_size=8))
    assert (default["batches"], default["samples"]) == (5, 40) and default["seconds"] > 0
    assert "choice" not in default
    # Persistent workers outlive the epoch in the child: they must not outlive the child.
    workers = Settings(batch_size=8, num_workers=1, prefetch_factor=2, persistent_workers=True)
    repeated = measure_epoch(config, workers, items=100)
    assert (repeated["batches"], repeated["samples"]) == (13, 100)
    online = measure_epoch(config, Settings(batch_size=8), online=True, items=24)
    assert (online["batches"], online["samples"]) == (3, 24)
    assert Settings.from_dict(online["choice"]).batch_size == 8
    assert online["describe"] == Settings.from_dict(online["choice"]).describe()
    assert isinstance(online["tuning"], bool)
    assert any(line.startswith("online: climbing from") for line in online["log"])

    # Each epoch was a fork of the checker's zygote, in a session of its own, and
    # nothing of those sessions is left; the zygote is the only process started here.
    zygote = _checker.zygote()
    assert len(zygote.sessions) >= 3 and sessions_alive(zygote.sessions) == []
    assert {c.pid for c in psutil.Process().children(recursive=True)} - before <= {zygote.pid}


def test_the_online_loaders_modules_are_imported_before_the_epochs_clock() -> None:
    # A new interpreter: in this one another test may have imported them already.
    script = (
        "import sys\n"
        "from autotune import Settings\n"
        "from autotune.workload._workload import load_config\n"
        "from benchmarks.online._epoch import _loader_factory\n"
        "workload = load_config('benchmarks/workloads/io_bound.py').workload\n"
        "assert 'autotune.inloop._online' not in sys.modules\n"
        "_loader_factory(workload, Settings(batch_size=8), True, 'cpu')\n"
        "assert 'autotune.inloop._online' in sys.modules\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
