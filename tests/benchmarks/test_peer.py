"""The peer, loadtune, as the benchmarks run it: its recommendation turned into the
settings the checker measures (made-up answers), the workload it is handed and the answer
read from it (a stand-in for loadtune), its run's record when it fails, and one real run
on a tiny config where loadtune is installed (the ``bench-peer`` extra)."""

from __future__ import annotations

import json
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from autotune import Settings
from benchmarks.peer import _child, _run
from benchmarks.peer._translate import choice, recommended, to_settings

BASELINE_KNOBS = {
    "num_workers": 0,
    "prefetch_factor": None,
    "persistent_workers": False,
    "pin_memory": False,
    "batch_size": None,
    "num_threads": None,
    "compile": False,
    "amp": False,
    "non_blocking": False,
}


def knobs(**changes: Any) -> dict[str, Any]:
    return {**BASELINE_KNOBS, **changes}


# --------------------------------------------------------------------- the translation
@pytest.mark.parametrize(
    ("given", "device", "expected", "notes"),
    [
        (knobs(), "cpu", Settings(batch_size=32), []),  # loadtune's baseline: the default
        (
            knobs(num_workers=4, prefetch_factor=4, persistent_workers=True, num_threads=0),
            "cpu",
            Settings(
                batch_size=32, num_workers=4, prefetch_factor=4, persistent_workers=True, threads=1
            ),
            [],
        ),
        (knobs(batch_size=64, amp=True), "cpu", Settings(batch_size=64, amp="bf16"), []),
        (knobs(amp=True), "cuda:0", Settings(batch_size=32, amp="fp16"), []),
        (knobs(amp=True), "mps", Settings(batch_size=32), ["amp: loadtune autocasts only"]),
        (knobs(compile=True), "cpu", Settings(batch_size=32), ["compile=True (torch.compile)"]),
        (
            knobs(num_workers=2, persistent_workers=True, pin_memory=True, non_blocking=True),
            "cuda",
            Settings(batch_size=32, num_workers=2, persistent_workers=True, pin_memory=True),
            [],
        ),
        (knobs(non_blocking=True), "cpu", Settings(batch_size=32), ["non_blocking=True: "]),
        (knobs(pin_memory=True), "cuda", Settings(batch_size=32, pin_memory=True), ["pin_memory "]),
        (knobs(channels_last=True), "cpu", Settings(batch_size=32), ["channels_last=True: a knob"]),
        ({"num_workers": 1}, "cpu", Settings(batch_size=32, num_workers=1), []),  # the rest left
    ],
)
def test_loadtunes_knobs_become_the_checkers_settings_and_the_rest_a_note(
    given: dict[str, Any], device: str, expected: Settings, notes: list[str]
) -> None:
    settings, said = to_settings(given, 32, device)
    assert settings == expected
    assert len(said) == len(notes) and all(
        s.startswith(n) for s, n in zip(said, notes, strict=True)
    )


def answer(best: float | None, baseline: float = 100.0, **changes: Any) -> dict[str, Any]:
    """loadtune's answer as the child writes it, its best trial (two workers) at ``best``."""
    return {
        "version": "0.3.0",
        "wall_s": 2.5,
        "baseline": {"knobs": knobs(), "throughput": baseline, "device": "cpu", "error": None},
        "trials": [],
        "best": None
        if best is None
        else {"knobs": knobs(num_workers=2, persistent_workers=True), "throughput": best},
        **changes,
    }


def test_the_user_keeps_the_baseline_unless_the_best_trial_beat_it() -> None:
    faster = choice(answer(best=101.0), 32, "cpu")
    assert faster.changed and faster.notes == ()
    assert faster.settings == Settings(batch_size=32, num_workers=2, persistent_workers=True)
    for slower in (answer(best=100.0), answer(best=None)):  # loadtune names it best still
        kept = choice(slower, 32, "cpu")
        assert kept.settings == Settings(batch_size=32) and not kept.changed
        assert kept.notes == ("no trial beat loadtune's baseline: no change",)
    failed = choice({"error": "ValueError: shuffle"}, 32, "cpu")
    assert failed.settings == Settings(batch_size=32) and not failed.changed
    assert failed.notes == ("loadtune failed, so a user keeps the default loader",)
    assert recommended(answer(best=150.0, error="its baseline failed")) == (knobs(), False)
    elsewhere = choice(answer(best=101.0), 32, "cuda:0")
    assert elsewhere.notes == ("loadtune measured on cpu, the checker trains on cuda:0",)


# --------------------------------------------------------------------- the child, on a stand-in
TINY = """\
import torch
from torch import nn

batch_size = 4


def dataset():
    return torch.utils.data.TensorDataset(torch.randn(64, 3), torch.randint(0, 2, (64,)))


def model():
    return nn.Linear(3, 2)
"""


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.py"
    path.write_text(textwrap.dedent(TINY))
    return path


def fake_loadtune(tune: Any) -> types.ModuleType:
    """A stand-in for the loadtune module: its ``Workload`` keeps what it is given."""
    module = types.ModuleType("loadtune")
    module.__dict__.update(__version__="0.0-fake", Workload=types.SimpleNamespace, tune=tune)
    return module


def fake_result(workload: Any) -> Any:
    """What ``loadtune.tune`` returns, after one step of the workload it was handed."""
    model = workload.make_model()
    optimizer = workload.make_optimizer(model)
    before = model.weight.detach().clone()
    batch = next(iter(torch.utils.data.DataLoader(workload.make_dataset(), batch_size=4)))
    loss = workload.train_step(model, optimizer, batch, torch.device("cpu"))
    assert loss.dim() == 0 and not torch.equal(model.weight, before)  # it trained

    def knobs_of(**changes: Any) -> Any:
        return types.SimpleNamespace(to_dict=lambda: knobs(**changes))

    profile = types.SimpleNamespace(
        knobs=knobs(),
        throughput=80.0,
        data_wait_frac=0.3,
        cpu_util_mean=50.0,
        device="cpu",
        error=None,
    )
    trial = types.SimpleNamespace(
        knobs=knobs_of(num_workers=2), reason="input-bound", throughput=120.0, result={}
    )
    return types.SimpleNamespace(
        baseline=profile, trials=[trial], best=trial, speedup=1.5, diagnosis="input-bound"
    )


def test_the_child_hands_loadtune_the_config_and_records_its_answer(tiny: Path) -> None:
    handed: list[Any] = []

    def tune(workload: Any) -> Any:
        handed.append(workload)
        return fake_result(workload)

    ticks = iter([10.0, 12.5])
    found = _child.tune_answer(str(tiny), fake_loadtune(tune), clock=ticks.__next__)
    json.dumps(found)  # JSON types only
    (workload,) = handed
    assert (workload.name, workload.default_batch_size, workload.collate_fn) == ("tiny", 4, None)
    assert found["wall_s"] == 2.5 and found["version"] == "0.0-fake" and "error" not in found
    assert found["best"] == {"knobs": knobs(num_workers=2), "throughput": 120.0}
    assert found["trials"][0]["reason"] == "input-bound" and found["speedup"] == 1.5
    assert found["baseline"]["knobs"] == knobs() and found["baseline"]["device"] == "cpu"

    def raising(workload: Any) -> Any:
        raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle option")

    failed = _child.tune_answer(str(tiny), fake_loadtune(raising))
    assert failed["error"].startswith("ValueError: DataLoader with IterableDataset")
    assert choice(failed, 4, "cpu").settings == Settings(batch_size=4)


def test_a_run_whose_process_wrote_no_answer_is_recorded_as_failed(
    tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crashed(config: Path, answer: Path, log: Path, limit: float) -> int:
        log.write_text("[loadtune] baseline run: workers=0 ...\nKilled\n")
        return -9

    monkeypatch.setattr(_run, "_run_child", crashed)
    said: list[str] = []
    record = _run.run_peer(tiny, user_batch=4, device="cpu", say=said.append)
    json.dumps(record)
    assert record["error"] == (
        "the loadtune process exited with -9: [loadtune] baseline run: workers=0 ... / Killed"
    )
    assert record["settings"] == Settings(batch_size=4).to_dict() and not record["changed"]
    assert record["wall_s"] == record["process_s"] and record["log"][-1] == "Killed"
    assert said[-1].startswith("the peer chose workers=0 batch=4 (no change) in ")
    # A config trained on DDP ranks: loadtune tuned one process, and the record says so.
    ddp = tiny.with_name("ddp.py")
    ddp.write_text(tiny.read_text() + 'search = {"ranks": 2}\n')
    notes = _run.run_peer(ddp, user_batch=4, device="cpu", say=said.append)["notes"]
    assert notes[-1] == (
        "loadtune tuned one training process; the checker trains 2 DDP ranks, each with these "
        "settings"
    )


def test_the_real_loadtune_runs_on_a_tiny_config(tiny: Path) -> None:
    pytest.importorskip("loadtune")
    record = _run.run_peer(tiny, user_batch=4, device="cpu", say=lambda line: None)
    assert record["error"] is None, record["log"]
    assert record["version"] == "0.3.0" and 0 < record["wall_s"] < record["process_s"]
    Settings.from_dict(record["settings"])  # settings the checker can measure
    assert record["answer"]["baseline"]["knobs"]["num_workers"] == 0
    assert record["log"][0] == "[loadtune] baseline run: workers=0 ..."
