"""The plain-loop checker: independent of the probe, a new process per measurement with
nothing left behind, and the default step a config without ``step`` or ``loss`` gets."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
import torch.nn.functional as F
from conftest import sessions_alive
from torch import nn

from autotune.settings._settings import Settings
from autotune.workload._workload import Workload
from benchmarks.common import _checker
from benchmarks.common._checker import (
    CheckerError,
    batch_samples,
    default_forward,
    default_loss,
    make_train_step,
    measure_interleaved,
    median,
    spread,
)
from benchmarks.common._zygote import Zygote, ZygoteError

ROOT = Path(__file__).resolve().parents[2]

TINY = textwrap.dedent(
    """
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset

    batch_size = 16

    def dataset():
        generator = torch.Generator().manual_seed(0)
        inputs = torch.randn(256, 8, generator=generator)
        return TensorDataset(inputs, torch.randint(0, 3, (256,), generator=generator))

    def model():
        return nn.Linear(8, 3)
    """
)


def test_the_checker_imports_nothing_of_the_probe_or_the_search() -> None:
    code = (
        "import benchmarks.common._checker, sys; "
        "print(sorted(m for m in sys.modules if m.startswith('autotune')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded: list[str] = eval(done.stdout)
    assert "autotune.workload._workload" in loaded and "autotune.settings._settings" in loaded
    forbidden = ("autotune.probe", "autotune.explore", "autotune.pipeline", "autotune.decide")
    assert [m for m in loaded if m.startswith(forbidden)] == []


def test_interleaved_rounds_measure_in_new_processes_and_leave_nothing_behind(
    tmp_path: Path,
) -> None:
    config = tmp_path / "tiny.py"
    config.write_text(TINY)
    settings = [
        Settings(batch_size=16),
        # Persistent workers go on prefetching after the loop: they must not outlive it.
        Settings(batch_size=16, num_workers=1, prefetch_factor=2, persistent_workers=True),
    ]
    said: list[str] = []
    _checker.close_zygote()  # one an earlier test in this process started
    # Children from before (the probes' fork server of an earlier test in this process).
    before = {c.pid for c in psutil.Process().children(recursive=True)}
    rates = measure_interleaved(
        config, settings, rounds=2, seconds=0.2, warmup=0.1, say=said.append
    )
    assert len(rates) == 2 and all(len(per_round) == 2 for per_round in rates)
    assert all(rate > 0 for per_round in rates for rate in per_round)
    # A B, then B A: the order turns every other round.
    described = [s.describe() for s in settings]
    assert [line.split(": ")[1] for line in said] == described + described[::-1]
    # Every measurement was a fork of the zygote, in a session of its own, and nothing
    # of those sessions is left; the zygote is the only process started here.
    zygote = _checker.zygote()
    assert len(zygote.sessions) == 4 and len(set(zygote.sessions)) == 4
    assert zygote.pid not in zygote.sessions
    assert sessions_alive(zygote.sessions) == []
    assert {c.pid for c in psutil.Process().children(recursive=True)} - before == {zygote.pid}
    _checker.close_zygote()
    assert {c.pid for c in psutil.Process().children(recursive=True)} <= before


def test_a_measurement_past_its_limit_is_killed_with_its_workers(tmp_path: Path) -> None:
    config = tmp_path / "hangs.py"
    config.write_text(
        TINY.replace("return nn.Linear(8, 3)", "return Slow()")
        + textwrap.dedent(
            """
            import time
            class Slow(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.linear = nn.Linear(8, 3)
                def forward(self, x):
                    time.sleep(600)
            """
        )
    )
    plan = _checker.Plan(
        config=str(config),
        settings=Settings(batch_size=16, num_workers=1, persistent_workers=True).to_dict(),
        seconds=0.1,
        warmup=0.0,
    )
    with pytest.raises(CheckerError, match="exited with None"):
        _checker.run_measurement("benchmarks.common._checker", vars(plan), limit=4.0, what="hangs")
    assert sessions_alive(_checker.zygote().sessions[-1:]) == []
    # The zygote reaped it and serves the next measurement.
    tiny = tmp_path / "tiny.py"
    tiny.write_text(TINY)
    assert _checker.measure(tiny, Settings(batch_size=16), seconds=0.1, warmup=0.0) > 0


def test_a_zygote_that_ended_is_started_again(tmp_path: Path) -> None:
    config = tmp_path / "tiny.py"
    config.write_text(TINY)
    assert _checker.measure(config, Settings(batch_size=16), seconds=0.1, warmup=0.0) > 0
    first = _checker.zygote()
    os.kill(first.pid, signal.SIGKILL)
    first._process.wait()
    assert _checker.measure(config, Settings(batch_size=16), seconds=0.1, warmup=0.0) > 0
    assert _checker.zygote().pid != first.pid


def test_a_measurement_runs_in_the_callers_directory_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The zygote started elsewhere, before the change: each fork takes the caller's now.
    _checker.zygote()
    config = tmp_path / "where.py"
    config.write_text(
        TINY.replace(
            "def dataset():",
            "import os\n"
            "from pathlib import Path\n"
            "def dataset():\n"
            "    assert os.environ['CHECKER_TEST'] == 'here', 'not the environment'\n"
            "    assert Path.cwd() == Path(os.environ['CHECKER_DIR']), 'not the directory'",
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CHECKER_TEST", "here")
    monkeypatch.setenv("CHECKER_DIR", str(tmp_path))
    assert _checker.measure(config, Settings(batch_size=16), seconds=0.1, warmup=0.0) > 0


def test_a_failing_measurement_says_why(tmp_path: Path) -> None:
    config = tmp_path / "broken.py"
    config.write_text(TINY.replace("return nn.Linear(8, 3)", "raise ValueError('no model today')"))
    with pytest.raises(CheckerError, match="no model today"):
        _checker.measure(config, Settings(batch_size=16), seconds=0.1, warmup=0.0)


def test_rounds_are_summarised_by_median_and_half_range() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0 and median([]) == 0.0
    assert spread([90.0, 100.0, 110.0]) == pytest.approx(0.1)
    assert spread([100.0]) == 0.0 and spread([0.0, 0.0]) == 0.0


def test_default_loss_pairs_outputs_with_targets() -> None:
    logits = torch.randn(4, 3)
    labels = torch.tensor([0, 2, 1, 0])
    assert torch.equal(
        default_loss(logits, (torch.zeros(4, 8), labels)), F.cross_entropy(logits, labels)
    )
    values = torch.randn(4, 2)
    targets = torch.randn(4, 2)
    assert torch.equal(
        default_loss(values, [torch.zeros(4, 8), targets]), F.mse_loss(values, targets)
    )
    assert torch.equal(default_loss(values, torch.zeros(4, 8)), values.mean())
    with pytest.raises(TypeError, match="cannot pair"):
        default_loss(torch.randn(4, 3), (torch.zeros(4, 8), torch.randn(4, 5)))


def test_dict_batches_train_on_the_models_own_loss() -> None:
    loss = torch.tensor(1.5)
    batch = {"input_ids": torch.zeros(2, 5), "labels": torch.zeros(2)}
    assert default_loss(types.SimpleNamespace(loss=loss), batch) is loss
    assert default_loss({"loss": loss}, batch) is loss
    with pytest.raises(TypeError, match="dict batch"):
        default_loss(torch.randn(2, 3), batch)

    class Keywords(nn.Module):
        def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> Any:
            return types.SimpleNamespace(loss=(input_ids.sum() + labels.sum()))

    assert default_forward(Keywords(), batch).loss.item() == 0.0


def test_samples_are_the_first_dimension_of_the_first_tensor() -> None:
    assert batch_samples(torch.zeros(7, 3)) == 7
    assert batch_samples((torch.zeros(5, 2), torch.zeros(5))) == 5
    assert batch_samples({"meta": "x", "input_ids": torch.zeros(6, 9)}) == 6
    assert batch_samples(["no tensor"]) is None


def test_the_train_step_steps_the_optimizer_under_bf16_autocast() -> None:
    model = nn.Linear(8, 3)
    before = model.weight.detach().clone()
    workload = Workload(dataset=lambda: None, model=lambda: model)
    train = make_train_step(workload, model, torch.device("cpu"), "bf16")
    train((torch.randn(4, 8), torch.tensor([0, 1, 2, 0])))
    assert not torch.equal(model.weight, before)


class FakeClock:
    """``time.perf_counter`` for the checker's timed loop: loaders and steps move it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 0.0
        monkeypatch.setattr(_checker.time, "perf_counter", lambda: self.now)

    def train(self, batch: Any) -> None:
        """A step that trains for 0.1 s."""
        self.now += 0.1

    def timed(self, batches: Any, plan: _checker.Plan, **pace: int) -> float:
        """samples/s of ``timed_loop`` over ``batches`` (4 samples each), from time 0."""
        self.now = 0.0
        return _checker.timed_loop(
            batches,
            self.train,
            plan,
            device=torch.device("cpu"),
            non_blocking=False,
            default_n=4,
            **pace,
        )


def test_the_warm_up_trains_on_the_batches_the_workers_queued_before_timing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 16 batches wait in the queue when the first arrives (the workers all started at
    # once), then the loader makes one a second; a step trains for 0.1 s. A warm-up by
    # the clock alone (0.5 s) would time the backlog at 10 steps a second.
    clock = FakeClock(monkeypatch)

    def loader() -> Any:
        for _ in range(1 + 16):
            yield torch.zeros(4, 1)
        while True:
            clock.now += 1.0
            yield torch.zeros(4, 1)

    plan = _checker.Plan(config="x", settings={}, seconds=1.5, warmup=0.5, steps=4)
    assert clock.timed(loader(), plan, queued=0) == pytest.approx(4 * 4 / 0.4)  # the backlog
    assert clock.timed(loader(), plan, queued=16) == pytest.approx(4 * 4 / 4.4)  # the loader


def test_the_timed_part_runs_from_the_end_of_a_gap_to_the_end_of_a_gap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 4 workers that share few CPUs, 2 batches ahead each: 8 batches come at once every
    # 2 s, and a step trains for 0.1 s, so the loop trains for 0.8 s and then waits 1.2 s:
    # 8 * 4 samples / 2 s = 16 samples/s. Timed from where the warm-up ends (a batch
    # into a burst) for a whole turn of the workers (4 steps), it would read the burst
    # alone: 40 samples/s.
    clock = FakeClock(monkeypatch)

    def loader() -> Any:
        burst = 0
        while True:
            burst += 1
            clock.now = max(clock.now, 2.0 * burst)
            for _ in range(8):
                yield torch.zeros(4, 1)

    plan = _checker.Plan(config="x", settings={}, seconds=0.35, warmup=0.5)
    assert clock.timed(loader(), plan, queued=8) == pytest.approx(16.0)
    plan = _checker.Plan(config="x", settings={}, seconds=2.5, warmup=0.5)
    assert clock.timed(loader(), plan, queued=8) == pytest.approx(16.0)


def test_a_burst_that_comes_as_the_warm_up_ends_is_timed_with_the_gap_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 8 batches wait at start-up and the next 8 are ready as the warm-up trains the
    # last of them, so the warm-up waits for none; then 8 come every 2.2 s. A step trains
    # for 0.1 s: 8 * 4 samples / 2.2 s = 14.5 samples/s. 0.5 s of the second burst alone
    # would read 40.
    clock = FakeClock(monkeypatch)

    def loader() -> Any:
        for ready in itertools.chain([0.0, 0.8], itertools.count(3.0, 2.2)):
            clock.now = max(clock.now, ready)
            for _ in range(8):
                yield torch.zeros(4, 1)

    plan = _checker.Plan(config="x", settings={}, seconds=0.5, warmup=0.5)
    assert clock.timed(loader(), plan, queued=8) == pytest.approx(8 * 4 / 2.2)


def test_a_gap_that_does_not_come_again_costs_time_not_truth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One gap of 1 s in the warm-up, then batches always ready: the training sets the
    # pace (a step, 0.1 s, 4 samples: 40 samples/s). The timed part waits for a gap to
    # end on for DRY_LIMIT_S past its seconds, then reads its whole span.
    clock = FakeClock(monkeypatch)
    monkeypatch.setattr(_checker, "DRY_LIMIT_S", 2.0)

    def loader() -> Any:
        for _ in range(3):
            yield torch.zeros(4, 1)
        clock.now += 1.0
        while True:
            yield torch.zeros(4, 1)

    plan = _checker.Plan(config="x", settings={}, seconds=1.0, warmup=0.5)
    assert clock.timed(loader(), plan, queued=2) == pytest.approx(40.0)
    assert clock.now == pytest.approx(1.4 + 1.0 + 2.0, abs=0.15)  # warm-up ends at 1.4 s


def test_a_zygote_that_cannot_start_says_why(tmp_path: Path) -> None:
    zygote = Zygote(dict(os.environ, PYTHONPATH=str(ROOT)), preload=["no_such_module_here"])
    try:
        with pytest.raises(ZygoteError, match="No module named 'no_such_module_here'"):
            zygote.run("benchmarks.common._checker", [], tmp_path / "log", 10.0, dict(os.environ))
        assert not zygote.alive()
    finally:
        zygote.close()
