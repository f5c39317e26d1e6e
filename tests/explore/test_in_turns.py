"""Trials measured in turns by the embedded backend: a confirming round and the warm
starts each in one probe process, every config still a trial of its own; a process that
fails as a whole has its configs measured again alone."""

from __future__ import annotations

import dataclasses

import optuna
import pytest
from test_confirm import DEFAULT, plan

from autotune.explore import _in_turns, _objective
from autotune.explore._embedded import EmbeddedBackend
from autotune.explore._in_turns import GROUP, PASSES
from autotune.probe import Failure, Figures, ProbeRequest, ProbeResult, Window
from autotune.settings import Settings
from autotune.study import Attr, records

ONE = Settings(batch_size=32, num_workers=1, prefetch_factor=2, persistent_workers=True)
TWO = Settings(batch_size=32, num_workers=2, prefetch_factor=2, persistent_workers=True)


def figures(rate: float, windows: int) -> Figures:
    """``windows`` windows of one second at ``rate`` samples/s."""
    return Figures(
        windows=tuple(
            Window(
                index=i, seconds=1.0, samples=int(rate), fresh=int(rate), steps=1, wait_seconds=0
            )
            for i in range(windows)
        )
    )


RATES = {DEFAULT.key(): 1000.0, ONE.key(): 1500.0, TWO.key(): 1400.0}


HUNG = Failure(kind="timeout", message="no first batch within 60 s: a worker hangs")


class Probes:
    """Stands in for the probe processes: a probe in turns reads each config at its rate
    of :data:`RATES` (or fails as a whole with ``whole``); a probe of its own too."""

    def __init__(self, whole: Failure | None = None) -> None:
        self.whole = whole
        self.own: int | None = None
        """The config (by position) whose own failure the whole process's is."""
        self.hang_in_workers = False
        self.rates = dict(RATES)
        self.in_turns: list[ProbeRequest] = []
        self.alone: list[Settings] = []

    def turns(self, request: ProbeRequest) -> ProbeResult:
        assert request.turns and request.settings == request.turns[0]
        self.in_turns.append(request)
        if self.whole is not None:
            parts = [ProbeResult(figures=Figures(), failure=self.whole)] * len(request.turns)
            if self.own is not None:  # a copy: its own
                parts[self.own] = ProbeResult(figures=Figures(), failure=dataclasses.replace(HUNG))
            return ProbeResult(figures=Figures(), failure=self.whole, turns=tuple(parts))
        return ProbeResult(
            figures=Figures(),
            turns=tuple(
                ProbeResult(figures=figures(self.rate(s), request.max_windows))
                for s in request.turns
            ),
        )

    def one(self, request: ProbeRequest, *, on_window: object = None) -> ProbeResult:
        assert not request.turns
        self.alone.append(request.settings)
        if self.hang_in_workers and request.settings.num_workers:
            return ProbeResult(figures=Figures(), failure=HUNG)
        return ProbeResult(figures=figures(self.rate(request.settings), 3))

    def rate(self, settings: Settings) -> float:
        """samples/s of ``settings``: its rate, or 900 for a config the test did not name."""
        return self.rates.get(settings.key(), 900.0)


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> Probes:
    found = Probes()
    monkeypatch.setattr(_in_turns, "run_probe", found.turns)
    monkeypatch.setattr(_objective, "run_probe", found.one)
    return found


def test_a_confirming_round_is_one_probe_of_every_config_each_a_trial(probes: Probes) -> None:
    stand_in = plan(study=optuna.create_study(direction="maximize"))
    order = [DEFAULT, ONE, TWO]
    groups = EmbeddedBackend().measure(stand_in, order, ["baseline", "confirm", "confirm"], 2)
    assert len(groups) == 2 and len(probes.in_turns) == 2 and not probes.alone
    first, second = probes.in_turns
    assert first.turns == (DEFAULT, ONE, TWO) and first.max_windows == PASSES
    assert second.turns == (TWO, ONE, DEFAULT)  # every other round in reverse
    trials = records(stand_in.study)
    assert [t.role for t in trials[:3]] == ["baseline", "confirm", "confirm"]
    assert {t.settings.key(): t.value for t in trials[:3]} == RATES
    assert all(t.state == "COMPLETE" and len(t.figures.windows) == PASSES for t in trials)


def test_a_round_whose_process_failed_as_a_whole_measures_each_config_alone(
    probes: Probes,
) -> None:
    probes.whole = Failure(kind="timeout", message="no progress for 60 s")
    stand_in = plan(study=optuna.create_study(direction="maximize"))
    EmbeddedBackend().measure(stand_in, [DEFAULT, ONE], ["baseline", "confirm"], 1)
    assert len(probes.in_turns) == 1 and probes.alone == [DEFAULT, ONE]
    trials = records(stand_in.study)
    assert [(t.state, t.value) for t in trials] == [("COMPLETE", 1000.0), ("COMPLETE", 1500.0)]


def test_the_warm_starts_are_explored_in_turns_in_groups_then_the_sampler_goes_on(
    probes: Probes,
) -> None:
    many = [
        Settings(
            batch_size=32,
            num_workers=workers,
            prefetch_factor=2,
            persistent_workers=True,
            worker_threads=1,
        )
        for workers in range(1, 9)
    ]
    probes.rates.update({s.key(): 1000.0 + 10 * s.num_workers for s in many})
    stand_in = plan(study=optuna.create_study(direction="maximize"), trials=len(many) + 1)
    stand_in.warm_starts = tuple(many)
    assert all(stand_in.space.contains(s) for s in many)
    EmbeddedBackend().explore(stand_in)
    # Two processes of at most GROUP configs, each measured to the second rung.
    assert [len(r.turns) for r in probes.in_turns] == [GROUP, len(many) - GROUP]
    assert all(r.max_windows == 3 for r in probes.in_turns)
    warm = records(stand_in.study)[: len(many)]
    assert [t.settings for t in warm] == many
    assert all(t.role == "explore" and t.state == "COMPLETE" for t in warm)
    trial = stand_in.study.trials[0]
    assert sorted(trial.intermediate_values) == [1, 2, 3]  # the pruner's rungs read them
    assert trial.user_attrs[Attr.ROLE] == "explore"
    # The budget's last trial, proposed by the sampler, runs in a probe of its own.
    assert len(probes.alone) == 1


def test_a_hang_in_a_configs_turn_fails_it_and_a_proven_hang_rules_out_the_rest(
    probes: Probes,
) -> None:
    # Every config with workers hangs in them. The first to start hangs the round's
    # process; the others are measured alone until a second hang proves the pattern,
    # and the configs with as many workers are not run at all.
    probes.whole, probes.own, probes.hang_in_workers = HUNG, 1, True
    three = Settings(batch_size=32, num_workers=3, prefetch_factor=2, persistent_workers=True)
    stand_in = plan(study=optuna.create_study(direction="maximize"))
    order = [DEFAULT, ONE, TWO, three]
    EmbeddedBackend().measure(stand_in, order, ["baseline", "confirm", "confirm", "confirm"], 1)
    assert probes.alone == [DEFAULT, TWO]  # the default, then one more hang: enough
    trials = records(stand_in.study)
    assert [(t.state, t.failure and t.failure.kind) for t in trials] == [
        ("COMPLETE", None),
        ("FAIL", "timeout"),
        ("FAIL", "timeout"),
        ("FAIL", "infeasible"),
    ]
