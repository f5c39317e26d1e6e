"""A confirming probe ends once its windows agree: the rule, the loaders it spares (those
that start workers every epoch), and which probes each backend lets end so."""

from __future__ import annotations

import optuna
import pytest

from autotune.explore import ExplorePlan, _objective, get_backend
from autotune.explore._backend import STEADY_SHARE
from autotune.machine import Machine
from autotune.probe import (
    Figures,
    ProbeRequest,
    ProbeResult,
    Window,
    WorkloadSource,
    ends_steady,
    steady_share,
)
from autotune.probe._steady import STEADY_FROM
from autotune.progress import QuietProgress
from autotune.settings import Settings
from autotune.space import build_space
from autotune.workload import SearchOptions

MACHINE = Machine(cpus=2, cpu_model="t", memory_bytes=2**33, shm_bytes=2**30, accelerator="cpu")


def windows(*rates: float) -> tuple[Window, ...]:
    """Windows of one second each, reading ``rates`` samples/s."""
    return tuple(
        Window(index=i, seconds=1.0, samples=int(r), fresh=int(r), steps=1, wait_seconds=0.0)
        for i, r in enumerate(rates)
    )


def test_windows_end_once_enough_of_them_agree_within_the_share() -> None:
    assert STEADY_FROM == 3
    assert not ends_steady(windows(1000, 1000), 0.01)  # too few to tell
    assert ends_steady(windows(1000, 1005, 1010), 0.01)
    assert not ends_steady(windows(1000, 1005, 1020), 0.01)  # 2% apart
    assert ends_steady(windows(900, 1000, 1005, 1010), 0.01) is False  # every window counts
    assert not ends_steady(windows(1000, 1000, 1000), None)  # no share: every window runs
    assert not ends_steady(windows(0, 0, 0), 0.01)  # nothing trained: nothing to agree on


@pytest.mark.parametrize(
    ("settings", "mode", "steady", "share"),
    [
        (Settings(batch_size=8), "train", 0.01, 0.01),
        (Settings(batch_size=8, num_workers=2, persistent_workers=True), "train", 0.01, 0.01),
        # Workers started anew every epoch: a few windows inside one epoch miss that cost.
        (Settings(batch_size=8, num_workers=2, persistent_workers=False), "train", 0.01, None),
        (Settings(batch_size=8), "compute", 0.01, None),  # not a comparison of loaders
        (Settings(batch_size=8), "train", None, None),
    ],
)
def test_which_probes_may_end_steady(settings, mode, steady, share) -> None:
    request = ProbeRequest(
        source=WorkloadSource(), settings=settings, device="cpu", mode=mode, steady=steady
    )
    assert steady_share(request) == share


def _plan() -> ExplorePlan:
    return ExplorePlan(
        study=optuna.create_study(direction="maximize"),
        space=build_space({"threads": 1, "amp": "off"}, MACHINE, batch_size=8),
        template=ProbeRequest(
            source=WorkloadSource(), settings=Settings(batch_size=8), device="cpu"
        ),
        warm_starts=(Settings(batch_size=8),),
        options=SearchOptions(seed=0, trials=2, tolerance=0.06),
        progress=QuietProgress(),
    )


def test_only_the_configs_measured_again_may_end_steady(monkeypatch) -> None:
    asked: list[ProbeRequest] = []

    def probe(request: ProbeRequest, on_window=None) -> ProbeResult:
        asked.append(request)
        return ProbeResult(figures=Figures(windows=windows(1000, 1000, 1000)))

    monkeypatch.setattr(_objective, "run_probe", probe)
    plan, backend = _plan(), get_backend("optuna")
    try:
        backend.explore(plan)
        explored = len(asked)
        assert explored >= 1 and all(r.steady is None for r in asked)
        backend.measure(plan, [Settings(batch_size=8)], ["baseline"], 1)
    finally:
        backend.close()
    (measured,) = asked[explored:]
    assert STEADY_SHARE == 1 / 3 and measured.steady == pytest.approx(0.06 / 3)
    assert plan.study.trials[-1].state == optuna.trial.TrialState.COMPLETE
