"""The confirming stage with a stand-in backend that measures configs at set figures:
interleaved rounds, the default kept unless beaten, a true confirmed flag."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import optuna
import pytest
from conftest import QUICK

import autotune
from autotune import SearchResult, Settings
from autotune.decide._choose import Candidate
from autotune.decide._confirm import confirm, same_as_default
from autotune.explore import ExplorePlan
from autotune.explore._trials import fixed_trial, group_attrs
from autotune.machine._machine import detect_machine
from autotune.output._show import result_lines
from autotune.probe import Figures, ProbeRequest, Window, WorkloadSource
from autotune.progress._progress import QuietProgress
from autotune.space._space import build_space
from autotune.study._study import FAILURE, FIGURES, ROLE, SETTINGS
from autotune.workload._options import SearchOptions

DEFAULT = Settings(batch_size=32)
Rate = Callable[[Settings, int], float | None]
"""samples/s of a config in a round (numbered from 0); None: the probe fails."""


class SetFigures:
    """A backend whose every measurement is a trial with the figures ``rate`` says."""

    name = "stand-in"

    def __init__(self, rate: Rate) -> None:
        self.rate = rate
        self.rounds = 0
        self.orders: list[list[str]] = []

    def explore(self, plan: ExplorePlan) -> None:
        raise NotImplementedError

    def measure(self, plan: ExplorePlan, settings: list[Settings], roles: list[str]) -> str:
        group, attrs = group_attrs(settings, roles)
        self.orders.append([s.key() for s in settings])
        for config, trial_attrs in zip(settings, attrs, strict=True):
            trial = fixed_trial(plan.study, trial_attrs)
            rate = self.rate(config, self.rounds)
            if rate is None:
                trial.set_user_attr(FAILURE, {"kind": "error", "message": "broken"})
                plan.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                continue
            window = Window(
                index=0,
                seconds=1.0,
                samples=round(rate),
                fresh=round(rate),
                steps=1,
                wait_seconds=0.0,
            )
            trial.set_user_attr(FIGURES, Figures(windows=(window,)).to_dict())
            plan.study.tell(trial, rate)
        self.rounds += 1
        return group

    def close(self) -> None:
        pass


def workers(n: int) -> Settings:
    return Settings(batch_size=32, num_workers=n, prefetch_factor=2, persistent_workers=True)


EXPLORED = [
    Candidate(workers(4), 1000.0),
    Candidate(workers(2), 990.0),
    Candidate(workers(1), 985.0),
]


def figures(rate: float) -> Figures:
    window = Window(
        index=0, seconds=1.0, samples=round(rate), fresh=round(rate), steps=1, wait_seconds=0.0
    )
    return Figures(windows=(window,))


def explored_study() -> optuna.Study:
    """A study whose exploration measured EXPLORED."""
    study = optuna.create_study(direction="maximize")
    for candidate in EXPLORED:
        trial = fixed_trial(study, {ROLE: "explore", SETTINGS: candidate.settings.to_dict()})
        trial.set_user_attr(FIGURES, figures(candidate.samples_per_s).to_dict())
        study.tell(trial, candidate.samples_per_s)
    return study


def plan(**options: object) -> ExplorePlan:
    machine = detect_machine(None)
    space = build_space({"threads": None}, machine, 32)
    return ExplorePlan(
        study=explored_study(),
        space=space,
        template=ProbeRequest(
            source=WorkloadSource(config_path="x.py"), settings=DEFAULT, device="cpu"
        ),
        warm_starts=(),
        options=SearchOptions(**{"rounds": 3, **options}),  # type: ignore[arg-type]
        progress=QuietProgress(),
    )


def run(rate: Rate, **options: object) -> tuple[SetFigures, autotune.decide._confirm.Confirmed]:
    backend = SetFigures(rate)
    confirmed = confirm(backend, plan(**options), EXPLORED, DEFAULT, QuietProgress(), later=0)
    return backend, confirmed


def result_of(confirmed: autotune.decide._confirm.Confirmed) -> SearchResult:
    return SearchResult(
        settings=confirmed.winner.settings,
        figures=confirmed.winner.figures,
        device="cpu",
        machine=detect_machine(None),
        baseline=confirmed.baseline,
        finalists=confirmed.finalists,
        tolerance=0.03,
        confirmed=confirmed.confirmed,
        rounds=confirmed.rounds,
        noise=confirmed.noise,
        rates=confirmed.rates,
        speedup_rounds=confirmed.speedup_rounds,
        is_default=confirmed.is_default,
        user_batch_size=32,
    )


def test_rounds_interleave_every_finalist_and_the_default() -> None:
    backend, confirmed = run(lambda s, r: 500.0 + 100 * s.num_workers)
    assert backend.rounds == 3
    # A B C D, A B C D, A B C D: the same order each round, the default last.
    assert len({tuple(order) for order in backend.orders}) == 1
    assert backend.orders[0][-1] == DEFAULT.key()
    assert len(backend.orders[0]) == 4
    assert confirmed.confirmed and confirmed.rounds == 3


def test_every_finalist_slower_than_the_default_recommends_the_default() -> None:
    _, confirmed = run(lambda s, r: 1000.0 if s == DEFAULT else 600.0)
    assert confirmed.is_default and confirmed.confirmed
    assert confirmed.winner.settings == DEFAULT
    result = result_of(confirmed)
    assert result.speedup is None and result.speedup_text() is None
    lines = result_lines(result)
    assert any("the default DataLoader is the recommendation" in line for line in lines)
    assert not any(line.startswith("speedup over the default") for line in lines)


def test_the_default_stays_unless_beaten_beyond_the_round_noise() -> None:
    # Finalists 8% faster on average, but the rounds swing +-20%: within the noise.
    swing = (0.8, 1.0, 1.2)
    _, noisy = run(lambda s, r: (1000.0 if s == DEFAULT else 1080.0) * swing[r])
    assert noisy.noise == pytest.approx(0.2)
    assert noisy.is_default
    _, steady = run(lambda s, r: 1000.0 if s == DEFAULT else 1080.0)
    assert not steady.is_default and steady.noise == 0.0


def test_a_winner_gets_its_median_and_a_speedup_interval() -> None:
    def rate(s: Settings, r: int) -> float:
        if s == DEFAULT:
            return 500.0
        return (1500.0, 1300.0, 1400.0)[r] if s.num_workers == 4 else 700.0

    _, confirmed = run(rate)
    result = result_of(confirmed)
    assert result.settings == workers(4)
    assert result.samples_per_s == 1400.0
    assert result.interval == (1300.0, 1500.0)
    assert result.speedup == pytest.approx(2.8)
    assert result.speedup_text() == "2.80x (2.60-3.00, 3 rounds)"
    assert any(
        line == "speedup over the default: 2.80x (2.60-3.00, 3 rounds)"
        for line in result_lines(result)
    )


def test_confirmed_is_false_when_every_confirming_probe_fails() -> None:
    _, confirmed = run(lambda s, r: None)
    assert not confirmed.confirmed
    assert confirmed.finalists == ()
    result = result_of(confirmed)
    assert result.caveat is not None and "not confirmed" in result.caveat
    assert any("not confirmed" in line for line in result_lines(result))


def test_confirmed_is_true_when_the_rounds_measured_the_winner() -> None:
    _, confirmed = run(lambda s, r: 400.0 if s == DEFAULT else 900.0 + s.num_workers)
    assert confirmed.confirmed
    assert result_of(confirmed).caveat is None


def test_a_finalist_that_fails_a_round_is_not_chosen() -> None:
    def rate(s: Settings, r: int) -> float | None:
        if s == DEFAULT:
            return 100.0
        if s.num_workers == 1:
            return None if r == 1 else 5000.0  # the fastest, but broken in round 2
        return 900.0

    _, confirmed = run(rate)
    assert confirmed.winner.settings.num_workers != 1
    assert all(m.settings.num_workers != 1 for m in confirmed.finalists)


def test_rounds_is_a_search_option() -> None:
    assert SearchOptions().rounds == 3
    with pytest.raises(autotune.ConfigError, match="rounds is 0"):
        SearchOptions(rounds=0)
    assert QUICK["rounds"] >= 2


def test_the_confirmed_flag_and_intervals_survive_the_study() -> None:
    _, confirmed = run(lambda s, r: 400.0 if s == DEFAULT else 900.0 + 10 * r)
    result = result_of(confirmed)
    again = SearchResult.from_dict(result.to_dict())
    assert dataclasses.replace(again, collate_fn=None) == result
    assert again.speedup_interval == result.speedup_interval


def test_a_finalist_that_is_the_default_in_effect_is_not_measured_twice() -> None:
    assert same_as_default(Settings(batch_size=32, threads=2), DEFAULT, default_threads=2)
    assert same_as_default(DEFAULT, DEFAULT, default_threads=2)
    assert not same_as_default(Settings(batch_size=32, threads=1), DEFAULT, default_threads=2)
    assert not same_as_default(Settings(batch_size=32, threads=2), DEFAULT, default_threads=None)
    assert not same_as_default(workers(2), DEFAULT, default_threads=2)


def test_the_default_in_effect_among_the_finalists_is_left_to_the_default_loader() -> None:
    twin = Settings(batch_size=32, threads=2)
    explored = [Candidate(twin, 1010.0), *EXPLORED]
    backend = SetFigures(lambda s, r: 1000.0 if s in (DEFAULT, twin) else 600.0)
    confirmed = confirm(
        backend, plan(), explored, DEFAULT, QuietProgress(), later=0, default_threads=2
    )
    assert all(twin.key() not in order for order in backend.orders)
    assert confirmed.is_default
