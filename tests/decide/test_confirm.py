"""The confirming stage with a stand-in backend that measures configs at set figures:
interleaved rounds, the default kept unless beaten, a true confirmed flag."""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections import Counter
from collections.abc import Callable

import optuna
import pytest

import autotune
from autotune import SearchResult, Settings
from autotune.decide._choose import Candidate
from autotune.decide._confirm import (
    confirm,
    explored_candidates,
    fastest_in_full,
    most_confirmed,
    most_in_runoff,
    persistent_twins,
    same_as_default,
    without_workers,
)
from autotune.decide._rounds import RUNOFF, interleaved
from autotune.explore import Bounds, ExplorePlan, compute_key
from autotune.explore._trials import fixed_trial, group_attrs
from autotune.machine import detect_machine
from autotune.output import result_lines
from autotune.probe import Figures, ProbeRequest, Window, WorkloadSource
from autotune.progress import QuietProgress
from autotune.result._predict import prediction_interval
from autotune.space import Space, build_space
from autotune.study import Attr, records
from autotune.workload import SearchOptions

DEFAULT = Settings(batch_size=32)
COMPLETE, FAIL, PRUNED = (
    optuna.trial.TrialState.COMPLETE,
    optuna.trial.TrialState.FAIL,
    optuna.trial.TrialState.PRUNED,
)


@dataclasses.dataclass(frozen=True)
class Odd:
    """A probe with figures that must not count: its trial told ``state``, with a failure
    recorded or not."""

    rate: float
    state: optuna.trial.TrialState
    failure: bool


Rate = Callable[[Settings, int], float | Odd | None]
"""samples/s of a config in a round (numbered from 0); None: the probe fails."""


class SetFigures:
    """A backend whose every measurement is a trial with the figures ``rate`` says; each
    config of a round in a probe of its own, or with ``turns`` all in one in turns."""

    name = "stand-in"

    def __init__(self, rate: Rate, *, turns: bool = False) -> None:
        self.rate = rate
        self.turns = turns
        self.rounds = 0
        self.orders: list[list[str]] = []
        self.study: optuna.Study | None = None

    def explore(self, plan: ExplorePlan) -> None:
        raise NotImplementedError

    def measure(
        self,
        plan: ExplorePlan,
        settings: list[Settings],
        roles: list[str],
        rounds: int,
        *,
        first: int = 1,
    ) -> list[str]:
        return [self.measure_round(plan, settings, roles, n) for n in range(first, first + rounds)]

    def measure_round(
        self, plan: ExplorePlan, settings: list[Settings], roles: list[str], number: int
    ) -> str:
        self.study = plan.study
        group, attrs = group_attrs(settings, roles, number)
        configs = [Settings.from_dict(a[Attr.SETTINGS]) for a in attrs]  # in the round's order
        self.orders.append([c.key() for c in configs])
        for config, trial_attrs in zip(configs, attrs, strict=True):
            trial = fixed_trial(plan.study, trial_attrs)
            rate = self.rate(config, self.rounds)
            if rate is None:
                trial.set_user_attr(Attr.FAILURE, {"kind": "error", "message": "broken"})
                plan.study.tell(trial, state=FAIL)
                continue
            odd = rate if isinstance(rate, Odd) else Odd(rate, COMPLETE, failure=False)
            trial.set_user_attr(Attr.FIGURES, figures(odd.rate).to_dict())
            if odd.failure:
                trial.set_user_attr(Attr.FAILURE, {"kind": "error", "message": "broken"})
            if odd.state == COMPLETE:
                plan.study.tell(trial, odd.rate)
            else:
                plan.study.tell(trial, state=odd.state)
        self.rounds += 1
        return group

    def in_turns(self, plan: ExplorePlan) -> bool:
        return self.turns

    def close(self) -> None:
        pass


class Recorded(QuietProgress):
    """A progress that keeps what it is told."""

    def __init__(self) -> None:
        self.phases: list[tuple[str, str]] = []
        self.plans: list[tuple[str, int, float | None, int]] = []
        self.messages: list[str] = []
        self.lines: list[str] = []  # phases (by name) and messages, in the order told

    def phase(self, name: str, detail: str) -> None:
        self.phases.append((name, detail))
        self.lines.append(name)

    def plan(self, stage: str, trials: int, timeout: float | None, *, later: int = 0) -> None:
        self.plans.append((stage, trials, timeout, later))

    def message(self, text: str) -> None:
        self.messages.append(text)
        self.lines.append(text)


def workers(n: int) -> Settings:
    return Settings(
        batch_size=32, num_workers=n, prefetch_factor=2, persistent_workers=True, worker_threads=1
    )


def finalists_in(order: list[str]) -> list[str]:
    """The configs a confirming round measured beside the default loader, in order (the
    default first, last and after every two)."""
    configs = [key for key in order if key != DEFAULT.key()]
    layout = interleaved([Settings.from_dict(json.loads(k)) for k in configs], DEFAULT)
    assert order == [c.key() for c in layout]
    return configs


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


def explored_study(
    explored: list[Candidate] = EXPLORED, *, pruned: frozenset[str] = frozenset()
) -> optuna.Study:
    """A study whose exploration measured ``explored``, each config in full except those
    whose keys are in ``pruned`` (pruned after one window at their figure)."""
    study = optuna.create_study(direction="maximize")
    for candidate in explored:
        trial = fixed_trial(
            study, {Attr.ROLE: "explore", Attr.SETTINGS: candidate.settings.to_dict()}
        )
        trial.set_user_attr(Attr.FIGURES, figures(candidate.samples_per_s).to_dict())
        if candidate.settings.key() in pruned:
            trial.report(candidate.samples_per_s, 0)
            study.tell(trial, state=PRUNED)
        else:
            study.tell(trial, candidate.samples_per_s)
    return study


def plan(
    *,
    bounds: Bounds | None = None,
    space: Space | None = None,
    study: optuna.Study | None = None,
    **options: object,
) -> ExplorePlan:
    machine = detect_machine(None)
    return ExplorePlan(
        study=study or explored_study(),
        space=space or build_space({"threads": None}, machine, 32),
        template=ProbeRequest(
            source=WorkloadSource(config_path="x.py"), settings=DEFAULT, device="cpu"
        ),
        warm_starts=(),
        options=SearchOptions(**{"rounds": 3, **options}),  # type: ignore[arg-type]
        progress=QuietProgress(),
        bounds=bounds,
    )


def run(
    rate: Rate,
    *,
    explored: list[Candidate] = EXPLORED,
    progress: QuietProgress | None = None,
    later: int = 0,
    **plan_args: object,
) -> tuple[SetFigures, autotune.decide._confirm.Confirmed]:
    backend = SetFigures(rate)
    plan_args.setdefault("study", explored_study(explored))  # exploration measured them
    confirmed = confirm(
        backend,
        plan(**plan_args),  # type: ignore[arg-type]
        explored,
        DEFAULT,
        progress or QuietProgress(),
        later=later,
    )
    return backend, confirmed


def result_of(confirmed: autotune.decide._confirm.Confirmed) -> SearchResult:
    return SearchResult(
        settings=confirmed.winner.settings,
        figures=confirmed.winner.figures,
        device="cpu",
        machine=detect_machine(None),
        tolerance=0.03,
        user_batch_size=32,
        **confirmed.confirmation(),
    )


def test_rounds_interleave_every_finalist_and_the_default() -> None:
    # The finalists swing together, round by round, so two rounds settle nothing.
    swing = (1.0, 1.25, 1.1)
    backend, confirmed = run(
        lambda s, r: 500.0 * (1.0 if s == DEFAULT else (1 + 0.2 * s.num_workers) * swing[r])
    )
    assert backend.rounds == 3
    # D A B D C D, then in turning order: the default first, last and after every two
    # finalists, and the order turns every other round.
    first = backend.orders[0]
    assert backend.orders == [first, first[::-1], first]
    assert len(first) == 6 and len(set(finalists_in(first))) == 3
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
    # The winner is the default: named so once, its figures not printed a second time.
    assert lines[0].startswith("best: the default DataLoader, workers=0 batch=32")
    assert not any(line.startswith("default DataLoader (num_workers=0") for line in lines)


def test_the_default_stays_unless_beaten_beyond_the_round_noise() -> None:
    # Finalists 8% faster on average, but beside the default they swing +-20%.
    swing = (1.2, 1.0, 0.8)
    noisy_backend, noisy = run(lambda s, r: 1000.0 if s == DEFAULT else 1080.0 * swing[r])
    assert noisy_backend.rounds == 3 and noisy.rounds == 3
    assert noisy.noise == pytest.approx(0.2, abs=1e-3)
    assert noisy.is_default
    _, steady = run(lambda s, r: 1000.0 if s == DEFAULT else 1080.0)
    assert not steady.is_default and steady.noise == 0.0
    # The whole machine swinging +-20% moves the default too: no noise, the finalist wins.
    _, drifting = run(lambda s, r: (1000.0 if s == DEFAULT else 1080.0) * swing[r])
    assert not drifting.is_default and drifting.noise == pytest.approx(0.0)
    # Each finalist swinging on its own is noise, and the default stays.
    own = {1: (1.2, 1.0, 0.8), 2: (0.8, 1.0, 1.2), 4: (1.0, 1.2, 0.8)}
    _, apart = run(lambda s, r: 1000.0 if s == DEFAULT else 1080.0 * own[s.num_workers][r])
    assert apart.noise > 0.15 and apart.is_default


def test_a_winner_gets_its_median_and_a_speedup_interval() -> None:
    def rate(s: Settings, r: int) -> float:
        if s == DEFAULT:
            return 500.0
        # Round 2 low enough that two rounds leave the leader's next round open.
        return (1500.0, 800.0, 1400.0)[r] if s.num_workers == 4 else 700.0

    _, confirmed = run(rate)
    result = result_of(confirmed)
    assert result.settings == workers(4)
    assert result.samples_per_s == 1400.0
    # 95% prediction intervals of the rounds (Student's t on their logarithms), wider
    # than the rounds' range 800-1,500 and 1.6-3.0. The samples/s one takes its spread
    # pooled over the 4 configs of the rounds (8 degrees of freedom; the other three
    # read the same in every round), the speedup's over the 3 finalists' speedups (6).
    assert confirmed.rates_spread is not None and confirmed.rates_spread.degrees == 8
    assert result.interval == pytest.approx((751.2, 1881.2), abs=0.1)
    assert result.rate_text() == "1,400 samples/s (95% prediction 751-1,881, 3 rounds)"
    assert prediction_interval(result.rates) == pytest.approx((214.4, 6591.9), abs=0.1)
    assert result.speedup == pytest.approx(2.8)
    assert confirmed.speedup_spread is not None and confirmed.speedup_spread.degrees == 6
    assert result.speedup_interval == pytest.approx((1.355, 4.172), abs=0.001)
    assert prediction_interval(result.speedup_rounds) == pytest.approx((0.429, 13.184), abs=0.001)
    assert result.speedup_text() == "2.80x (95% prediction 1.35-4.17, 3 rounds)"
    assert any(
        line == "speedup over the default: 2.80x (95% prediction 1.35-4.17, 3 rounds)"
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


def test_runoff_rounds_is_a_search_option_and_zero_turns_it_off() -> None:
    assert SearchOptions().runoff_rounds == 3
    assert SearchOptions(runoff_rounds=0).runoff_rounds == 0
    for wrong in (-1, True, 1.5, "3"):
        with pytest.raises(autotune.ConfigError, match=r"runoff_rounds is .*expected a whole"):
            SearchOptions(runoff_rounds=wrong)  # type: ignore[arg-type]


def _close_race(s: Settings, r: int) -> float | None:
    """1 worker ahead in the three rounds, 4 workers ahead in the three after (the runoff);
    the swings make the noise between rounds (9.5%) wider than the tolerance (3%)."""
    if s == DEFAULT:
        return 500.0
    if s.num_workers == 1:
        return (1000.0, 1300.0, 1100.0, 900.0, 900.0, 900.0)[r]
    if s.num_workers == 4:
        return (1050.0, 1200.0, 1000.0, 1150.0, 1150.0, 1150.0)[r]
    return 600.0  # 2 workers: beats the default, far from the others


def test_a_runoff_decides_between_the_finalists_the_rounds_left_within_the_noise() -> None:
    progress = Recorded()
    backend, confirmed = run(_close_race, progress=progress)
    # Three rounds: 1 worker at 2.2x the default, 4 workers at 2.1x (outside the 3%
    # tolerance, inside the 9.5% noise); three more rounds of those two put 4 workers
    # ahead, 2.3x against 1.9x over all six.
    assert confirmed.noise == pytest.approx(0.0952, abs=1e-4)
    assert confirmed.winner.settings == workers(4)
    assert confirmed.rounds == 6 and backend.rounds == 6
    assert len(confirmed.rates) == 6 and len(confirmed.speedup_rounds) == 6
    assert confirmed.speedup_rounds == pytest.approx((2.1, 2.4, 2.0, 2.3, 2.3, 2.3))
    # The runoff measures the two beside the default, fastest first, its order turning
    # on from the third round's (as given): reversed, then as given, then reversed.
    d, one, four = DEFAULT.key(), workers(1).key(), workers(4).key()
    assert backend.orders[3:] == [[d, four, one, d], [d, one, four, d], [d, four, one, d]]
    assert (
        "runoff",
        "2 finalists within the noise (10%) of each other: 3 more interleaved "
        "round(s) between them and the default",
    ) in progress.phases
    assert ("runoff", 12, None, 0) in progress.plans
    # Every trial of the runoff is recorded with its role: the default as the baseline.
    assert backend.study is not None
    roles = Counter(
        (r.role, r.settings == DEFAULT) for r in records(backend.study) if r.role != "explore"
    )
    assert roles == {("baseline", True): 9 + 6, ("confirm", False): 9 + 6}
    # The finalists keep their figures: the two of the runoff from six rounds, the rest
    # from three; the default's from all six.
    by_workers = {m.settings.num_workers: m.samples_per_s for m in confirmed.finalists}
    assert by_workers == {1: 900.0, 2: 600.0, 4: 1150.0}
    assert confirmed.baseline is not None and confirmed.baseline.samples_per_s == 500.0
    assert confirmed.confirmed and not confirmed.is_default


def test_a_runoff_between_equal_costs_goes_to_the_faster_beside_the_default() -> None:
    bf16, fp16 = Settings(batch_size=32, amp="bf16"), Settings(batch_size=32, amp="fp16")
    base = (100.0, 200.0, 300.0) * 2  # the machine's speed moves from round to round
    speedups = {
        bf16.key(): (1.66, 1.44, 1.52, 1.60, 1.47, 1.52),  # median 1.52
        fp16.key(): (1.56, 1.44, 1.50, 1.50, 1.50, 1.48),  # median 1.50
    }

    def rate(s: Settings, r: int) -> float:
        return base[r] if s == DEFAULT else base[r] * speedups[s.key()][r]

    explored = [Candidate(bf16, 155.0), Candidate(fp16, 150.0)]
    _, confirmed = run(rate, explored=explored)
    assert confirmed.rounds == 6  # the first rounds' noise left them to a runoff
    assert confirmed.noise == pytest.approx(0.056, abs=1e-3)
    # fp16's samples/s over the six rounds have the higher median (294 against 291), while
    # bf16 ran the faster beside the default; the two cost the same and trail each other
    # by under the tolerance, so the figure beside the default decides.
    medians = {s.amp: statistics.median(rate(s, r) for r in range(6)) for s in (bf16, fp16)}
    assert medians == {"bf16": 291.0, "fp16": 294.0}
    assert confirmed.winner.settings == bf16


def test_without_a_runoff_the_first_rounds_choose() -> None:
    backend, confirmed = run(_close_race, runoff_rounds=0)
    assert confirmed.winner.settings == workers(1)
    assert confirmed.rounds == 3 and backend.rounds == 3


def test_a_runoff_whose_every_probe_fails_leaves_the_first_verdict() -> None:
    def rate(s: Settings, r: int) -> float | None:
        return None if r >= 3 and s != DEFAULT else _close_race(s, r)

    progress = Recorded()
    backend, confirmed = run(rate, progress=progress)
    assert backend.rounds == 6
    assert confirmed.winner.settings == workers(1)
    assert confirmed.rounds == 3 and len(confirmed.speedup_rounds) == 3
    assert "no finalist of the runoff was measured in every round of it" in progress.messages


def test_the_confirmed_flag_and_intervals_survive_the_study() -> None:
    _, confirmed = run(lambda s, r: 400.0 if s == DEFAULT else 900.0 + 10 * r)
    result = result_of(confirmed)
    assert result.rates_spread is not None
    again = SearchResult.from_dict(result.to_dict())
    assert dataclasses.replace(again, collate_fn=None) == result
    assert again.speedup_interval == result.speedup_interval
    assert again.interval == result.interval
    # A result written before the pooled spread was kept: the chosen config's own rounds.
    old = {k: v for k, v in result.to_dict().items() if k != "rates_spread"}
    assert SearchResult.from_dict(old).interval == prediction_interval(result.rates)


def test_rounds_that_happen_to_agree_still_get_the_spread_the_others_show() -> None:
    # The winner reads 1,400 in all three rounds; the other configs swing by 10%.
    def rate(s: Settings, r: int) -> float:
        if s.num_workers == 4:
            return 1400.0
        return (1.0, 1.1, 0.9)[r] * (500.0 if s == DEFAULT else 700.0)

    _, confirmed = run(rate)
    result = result_of(confirmed)
    assert result.settings == workers(4)
    assert prediction_interval(result.rates) == pytest.approx((1400.0, 1400.0))
    low, high = result.interval or (0.0, 0.0)
    assert low < 1400.0 * 0.9 and high > 1400.0 * 1.1


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


def wide(n: int) -> Settings:
    """``n`` workers at batch size 64: without workers, not the default loader (32)."""
    return Settings(
        batch_size=64, num_workers=n, prefetch_factor=2, persistent_workers=True, worker_threads=1
    )


def ceiling_at(rate: float, settings: Settings) -> Bounds:
    """Bounds with one compute ceiling: ``rate`` for ``settings``'s batch size, AMP, threads."""
    return Bounds(ceilings={compute_key(settings): rate})


def test_the_rounds_are_announced_and_recorded_by_role() -> None:
    progress = Recorded()
    backend, _ = run(
        # Every finalist beats the default in every round, none settles the choice.
        lambda s, r: 1000.0 if s == DEFAULT else 1000.0 + 100 * s.num_workers * (1, 1.3, 1.15)[r],
        progress=progress,
        later=5,
    )
    ((name, detail),) = progress.phases
    assert name == "confirm"
    assert "3 finalist(s)" in detail and "3 interleaved round(s)" in detail
    # 3 rounds of 3 finalists and the default beside each, 5 probes to come after them.
    assert progress.plans == [("confirm", 18, None, 5)]
    assert backend.study is not None
    roles = Counter(record.role for record in records(backend.study))
    assert roles == {"explore": 3, "confirm": 9, "baseline": 9}
    # Every measurement of the default loader is its baseline, and only those.
    confirming = [r for r in records(backend.study) if r.role != "explore"]
    assert all((r.settings == DEFAULT) == (r.role == "baseline") for r in confirming)


def test_every_finalist_is_measured_in_its_own_slot_and_any_can_win() -> None:
    def rate(s: Settings, r: int) -> float:
        return 500.0 if s == DEFAULT else 2000.0 if s == workers(2) else 1000.0

    backend, confirmed = run(rate)
    # Fastest and cheapest alternately: 4 workers, 1, then 2.
    assert finalists_in(backend.orders[0]) == [
        w.key() for w in (workers(4), workers(1), workers(2))
    ]
    assert confirmed.winner.settings == workers(2)
    assert [m.settings for m in confirmed.finalists] == [workers(4), workers(1), workers(2)]
    assert [m.samples_per_s for m in confirmed.finalists] == [1000.0, 1000.0, 2000.0]


@pytest.mark.parametrize(
    "odd",
    [Odd(5000.0, COMPLETE, failure=True), Odd(5000.0, FAIL, failure=False)],
    ids=["complete-with-a-failure", "failed-without-one"],
)
def test_a_round_counts_only_a_complete_probe_without_a_failure(odd: Odd) -> None:
    def rate(s: Settings, r: int) -> float | Odd:
        if s == DEFAULT:
            return 100.0
        if s.num_workers == 1:
            return odd if r == 1 else 5000.0  # the fastest, but not cleanly measured in round 2
        return 900.0

    _, confirmed = run(rate)
    assert confirmed.winner.settings == workers(2)
    assert [m.settings for m in confirmed.finalists] == [workers(4), workers(2)]


def test_without_a_complete_finalist_the_choice_falls_back_to_exploration() -> None:
    def rate(s: Settings, r: int) -> float | None:
        if s == DEFAULT:
            return None if r == 1 else 400.0 + r  # the default fails round 2 only
        return None  # every finalist fails every round

    progress = Recorded()
    _, confirmed = run(rate, progress=progress)
    assert confirmed.confirmed is False
    assert confirmed.rounds == 3 and confirmed.finalists == ()
    # The cheapest explored config within the tolerance, with its exploration figures.
    assert confirmed.winner.settings == workers(1)
    assert confirmed.winner.samples_per_s == 985.0
    # The default's median round of those it measured (the lower middle of 400 and 402).
    assert confirmed.baseline is not None and confirmed.baseline.samples_per_s == 400.0
    assert any("choosing from exploration figures" in m for m in progress.messages)


def test_falling_back_needs_a_measured_trial_of_the_explored_pick() -> None:
    stray = [Candidate(wide(4), 1000.0)]  # measured in no trial of the study
    with pytest.raises(ValueError, match="no measured trial of workers=4"):
        run(lambda s, r: None, explored=stray, study=explored_study())


def test_a_default_that_fails_a_round_gives_no_baseline_and_no_speedup() -> None:
    def rate(s: Settings, r: int) -> float | None:
        if s == DEFAULT:
            return None if r == 1 else 500.0
        return 900.0 + s.num_workers

    _, confirmed = run(rate)
    assert confirmed.confirmed and not confirmed.is_default
    assert confirmed.winner.settings == workers(1)  # the cheapest within the band
    assert confirmed.baseline is None and confirmed.speedup_rounds == ()


def test_with_nothing_explored_the_default_is_measured_and_kept() -> None:
    backend, confirmed = run(lambda s, r: 500.0, explored=[])
    # Two rounds give the default its spread; no finalist is left for a third.
    assert backend.orders == [[DEFAULT.key()]] * 2
    assert confirmed.is_default and confirmed.confirmed
    assert confirmed.winner.settings == DEFAULT


def test_a_leader_at_its_ceiling_is_confirmed_beside_its_loader_without_workers() -> None:
    # The leader trains within the finalist band (2 x 3%) of its compute ceiling, the
    # second finalist just below that band.
    explored = [Candidate(wide(4), 1000.0), Candidate(wide(2), 945.0)]
    progress = Recorded()
    backend, _ = run(
        lambda s, r: 1000.0,
        explored=explored,
        bounds=ceiling_at(1010.0, wide(4)),
        progress=progress,
    )
    lighter = Settings(batch_size=64)
    assert finalists_in(backend.orders[0]) == [c.key() for c in (wide(4), wide(2), lighter)]
    assert any(
        m.startswith(wide(4).describe())
        and "its loader without workers is confirmed beside it" in m
        for m in progress.messages
    )
    # Below the band, no loader without workers joins.
    backend, _ = run(lambda s, r: 1000.0, explored=explored, bounds=ceiling_at(1100.0, wide(4)))
    assert finalists_in(backend.orders[0]) == [c.key() for c in (wide(4), wide(2))]


def test_the_loader_without_workers_joins_a_leader_within_the_band_of_its_ceiling() -> None:
    space = plan().space
    bounds = ceiling_at(2000.0, wide(4))
    lighter = Settings(batch_size=64)
    # The band is twice the tolerance: at 25%, half the ceiling, which counts as in it.
    assert without_workers(Candidate(wide(4), 1000.0), bounds, space, 0.25) == lighter
    assert without_workers(Candidate(wide(4), 999.0), bounds, space, 0.25) is None
    # No ceiling measured for its batch size, AMP and threads, or none at all.
    other = ceiling_at(2000.0, workers(4))
    assert without_workers(Candidate(wide(4), 1000.0), other, space, 0.25) is None
    assert without_workers(Candidate(wide(4), 1000.0), None, space, 0.25) is None
    # One worker is workers too; a leader without any has nothing to drop.
    assert without_workers(Candidate(wide(1), 1990.0), bounds, space, 0.03) == lighter
    assert without_workers(Candidate(lighter, 1990.0), bounds, space, 0.03) is None
    # A space without num_workers=0 holds no such config.
    no_zero = build_space({"threads": None, "num_workers": [2, 4]}, detect_machine(None), 32)
    assert without_workers(Candidate(wide(4), 1990.0), bounds, no_zero, 0.03) is None


def test_exploration_candidates_are_the_measured_configs_of_the_space() -> None:
    study = explored_study()

    def trial(settings: Settings, role: str = "explore") -> optuna.Trial:
        return fixed_trial(study, {Attr.ROLE: role, Attr.SETTINGS: settings.to_dict()})

    pruned = trial(workers(3))  # pruned: its last reported window counts
    pruned.report(950.0, 0)
    study.tell(pruned, state=PRUNED)
    crashed = trial(workers(5))  # reported a window, then failed
    crashed.report(5000.0, 0)
    crashed.set_user_attr(Attr.FAILURE, {"kind": "crash", "message": "killed"})
    study.tell(crashed, state=PRUNED)
    study.tell(trial(workers(6), role="confirm"), 5000.0)  # not exploration
    study.tell(trial(Settings(batch_size=1000)), 5000.0)  # outside the space
    study.tell(trial(workers(7)), state=FAIL)
    candidates = explored_candidates(study, plan().space)
    assert candidates == [*EXPLORED, Candidate(workers(3), 950.0)]


def test_the_default_loader_is_measured_once_a_round_not_again_as_a_finalist() -> None:
    # The leader (4 workers at the user's batch size) trains at its compute ceiling:
    # without workers it is the default loader, which every round measures anyway.
    backend, confirmed = run(lambda s, r: 1000.0, bounds=ceiling_at(1010.0, workers(4)))
    assert finalists_in(backend.orders[0]) == [
        c.key() for c in (workers(4), workers(1), workers(2))
    ]
    assert confirmed.is_default
    # Exploration measured the default loader near the best: not a finalist too.
    explored = [Candidate(workers(4), 1000.0), Candidate(DEFAULT, 995.0)]
    backend, confirmed = run(lambda s, r: 1000.0, explored=explored)
    assert finalists_in(backend.orders[0]) == [workers(4).key()]
    assert confirmed.is_default


def test_the_loader_without_workers_is_left_out_when_it_is_the_default_in_effect() -> None:
    # The leader at its ceiling, without workers, is the default loader with torch's own
    # 2 threads spelled out: the default loader already measures it every round.
    leader = Settings(batch_size=32, num_workers=4, prefetch_factor=2, threads=2, worker_threads=1)
    twin = Settings(batch_size=32, threads=2)
    space = build_space({"threads": [1, 2]}, detect_machine(None), 32)
    explored = [Candidate(leader, 1000.0), Candidate(workers(2), 900.0)]
    for default_threads, joins in ((2, False), (1, True)):
        backend = SetFigures(lambda s, r: 1000.0)
        plan_ = plan(bounds=ceiling_at(1010.0, leader), space=space)
        confirm(
            backend, plan_, explored, DEFAULT, QuietProgress(), later=0,
            default_threads=default_threads,
        )  # fmt: skip
        assert (twin.key() in backend.orders[0]) is joins


def fresh(n: int) -> Settings:
    """``n`` workers started anew every epoch: :func:`workers` is its persistent twin."""
    return Settings(batch_size=32, num_workers=n, prefetch_factor=2, worker_threads=1)


def test_the_fastest_finalists_are_confirmed_beside_their_persistent_twins() -> None:
    explored = [
        Candidate(fresh(4), 1000.0),
        Candidate(fresh(2), 995.0),
        Candidate(fresh(1), 990.0),
        Candidate(workers(3), 985.0),  # persistent already
    ]
    progress = Recorded()
    # Exploration never measured a persistent 4: it is the fastest by 20% in every round.
    backend, confirmed = run(
        lambda s, r: 1200.0 if s == workers(4) else 1000.0, explored=explored, progress=progress
    )
    order = backend.orders[0]
    assert workers(4).key() in order and workers(2).key() in order
    assert workers(1).key() not in order  # two twins at most, of the fastest
    assert len(finalists_in(order)) == 6  # the four explored, two twins
    assert confirmed.winner.settings == workers(4)
    assert sum("the persistent twin of a finalist" in m for m in progress.messages) == 2
    # Said under the confirming phase, whose count of finalists includes them.
    assert progress.lines[0] == "confirm"
    assert sum("the persistent twin of a finalist" in m for m in progress.lines[1:3]) == 2


def test_persistent_twins_need_workers_a_fresh_start_and_room_in_the_space() -> None:
    space = plan().space
    ranked = [Candidate(fresh(1), 900.0), Candidate(fresh(4), 1000.0), Candidate(fresh(2), 950.0)]
    assert persistent_twins(ranked, space) == [workers(4), workers(2)]  # fastest first
    assert persistent_twins([Candidate(fresh(1), 900.0)], space) == [workers(1)]
    assert persistent_twins([Candidate(workers(2), 1000.0)], space) == []
    # A faster finalist that has no twin does not hide the slower ones' twins.
    assert persistent_twins([Candidate(workers(2), 1000.0), Candidate(fresh(1), 9.0)], space) == [
        workers(1)
    ]
    assert persistent_twins([Candidate(DEFAULT, 1000.0)], space) == []
    fixed = build_space({"threads": None, "persistent_workers": False}, detect_machine(None), 32)
    assert persistent_twins(ranked, fixed) == []


def test_a_confirming_round_measures_at_most_most_confirmed_configs() -> None:
    # Eight loaders at batch 64 whose workers start every epoch, all within the band, the
    # leader at its compute ceiling: every kind of extra config joins.
    def fresh64(n: int) -> Settings:
        return Settings(batch_size=64, num_workers=n, prefetch_factor=2, worker_threads=1)

    # Each pruned after one window; a config measured in full sits outside the band.
    near = [Candidate(fresh64(n), 1000.0 - n) for n in range(1, 9)]
    explored = [*near, Candidate(wide(8), 900.0)]
    study = explored_study(explored, pruned=frozenset(c.settings.key() for c in near))
    backend, _ = run(
        lambda s, r: 1000.0,
        explored=explored,
        bounds=ceiling_at(1000.0, fresh64(1)),
        study=study,
    )
    assert wide(8).key() in backend.orders[0]
    limit = SearchOptions().finalists
    assert len(backend.orders[0]) == most_confirmed(limit) == (2 * limit + 4) + (limit + 2) + 1


def test_the_fastest_config_measured_in_full_joins_the_finalists() -> None:
    # Three configs pruned after one lucky window each; the config that ran every window
    # reads 7% below the best window, outside the finalists' band of twice 3%.
    explored = [
        Candidate(workers(2), 1000.0),
        Candidate(workers(1), 990.0),
        Candidate(workers(5), 985.0),
        Candidate(workers(4), 930.0),
        Candidate(workers(3), 800.0),  # in full too, but slower
    ]
    pruned = frozenset({workers(2).key(), workers(1).key(), workers(5).key()})
    progress = Recorded()
    backend, confirmed = run(
        lambda s, r: 400.0 if s == DEFAULT else 1200.0 if s == workers(4) else 1000.0,
        explored=explored,
        study=explored_study(explored, pruned=pruned),
        progress=progress,
    )
    four = (workers(2), workers(1), workers(5), workers(4))
    assert finalists_in(backend.orders[0]) == [c.key() for c in four]
    assert confirmed.winner.settings == workers(4)
    note = f"{workers(4).describe()}: the fastest config exploration measured in full"
    assert sum(m.startswith(note) for m in progress.messages) == 1
    # Measured in full and among the finalists already: confirmed once, and no note.
    progress = Recorded()
    backend, _ = run(lambda s, r: 1000.0, progress=progress)
    assert len(finalists_in(backend.orders[0])) == len(set(finalists_in(backend.orders[0]))) == 3
    assert not any("measured in full" in m for m in progress.messages)


def test_the_fastest_in_full_is_of_the_exploration_in_the_space_and_never_failed() -> None:
    space = plan().space
    study = explored_study([Candidate(workers(2), 500.0)])

    def trial(settings: Settings, role: str = "explore") -> optuna.Trial:
        return fixed_trial(study, {Attr.ROLE: role, Attr.SETTINGS: settings.to_dict()})

    pruned = trial(workers(3))
    pruned.report(5000.0, 0)
    study.tell(pruned, state=PRUNED)
    broken = trial(workers(5))  # finished, with a failure recorded
    broken.set_user_attr(Attr.FAILURE, {"kind": "crash", "message": "killed"})
    study.tell(broken, 5000.0)
    study.tell(trial(workers(6), role="confirm"), 5000.0)
    study.tell(trial(Settings(batch_size=1000)), 5000.0)  # outside the space
    study.tell(trial(workers(1)), state=FAIL)
    assert fastest_in_full(study, space) == Candidate(workers(2), 500.0)
    # A config measured in full twice counts at its median.
    study.tell(trial(workers(4)), 400.0)
    study.tell(trial(workers(4)), 700.0)
    study.tell(trial(workers(4)), 650.0)
    assert fastest_in_full(study, space) == Candidate(workers(4), 650.0)
    assert fastest_in_full(optuna.create_study(direction="maximize"), space) is None


def test_the_fastest_in_full_is_left_to_the_default_loader_when_it_is_the_default() -> None:
    explored = [Candidate(workers(2), 1000.0), Candidate(DEFAULT, 900.0)]
    study = explored_study(explored, pruned=frozenset({workers(2).key()}))
    backend, _ = run(lambda s, r: 1000.0, explored=explored, study=study)
    assert finalists_in(backend.orders[0]) == [workers(2).key()]


def test_the_runoff_tells_the_probes_that_come_after_it() -> None:
    progress = Recorded()
    run(_close_race, progress=progress, later=5)
    assert ("runoff", 12, None, 5) in progress.plans


def test_after_an_even_count_of_rounds_the_runoff_starts_as_given() -> None:
    def rate(s: Settings, r: int) -> float | None:
        if s == DEFAULT:
            return 500.0
        if s.num_workers == 1:
            return (1000.0, 1300.0)[r] if r < 2 else 900.0
        if s.num_workers == 4:
            return (1050.0, 1200.0)[r] if r < 2 else 1150.0
        return 600.0

    progress = Recorded()
    backend, confirmed = run(rate, rounds=2, progress=progress)
    d, one, four = DEFAULT.key(), workers(1).key(), workers(4).key()
    assert backend.orders[2:] == [[d, one, four, d], [d, four, one, d]]
    # Two runoff rounds settle it: 1 worker trails 4 by more than the tolerance in 3 of
    # the 5 rounds (its median cannot come back), and 4 trails 1 in no more than 2.
    assert confirmed.rounds == 4 and confirmed.winner.settings == workers(4)
    assert any(m.startswith("after 2 runoff round(s): ") for m in progress.messages)


def test_the_runoff_verdict_takes_each_config_beside_the_default() -> None:
    # The machine runs at half speed in the runoff's rounds (the default reads 250).
    # Beside the default, 4 workers are 2.2x and 1 worker 2.08x over the six rounds;
    # on their own medians they read 725 and 710 samples/s, within the tolerance.
    def rate(s: Settings, r: int) -> float | None:
        if s == DEFAULT:
            return 500.0 if r < 3 else 250.0
        if s.num_workers == 1:
            return (900.0, 1100.0, 1000.0, 520.0, 520.0, 520.0)[r]
        if s.num_workers == 4:
            return (1000.0, 850.0, 950.0, 600.0, 600.0, 600.0)[r]
        return 600.0 if r < 3 else 300.0

    _, confirmed = run(rate)
    assert confirmed.rounds == 6
    assert confirmed.winner.settings == workers(4)


def test_a_runoff_round_measures_at_most_most_in_runoff_configs() -> None:
    # Three finalists, each swinging within the noise of the others: all three run off.
    swings = {1: (1000.0, 1300.0, 1100.0), 4: (1050.0, 1200.0, 1000.0), 2: (1100.0, 1000.0, 1250.0)}

    def rate(s: Settings, r: int) -> float | None:
        return 500.0 if s == DEFAULT else swings[s.num_workers][r % 3]

    backend, _ = run(rate)
    assert backend.rounds == 6
    assert len(backend.orders[3]) == most_in_runoff() == RUNOFF + 2 + 1


def test_the_fastest_in_full_spelling_out_the_default_threads_is_the_default() -> None:
    # Measured in full: the default loader with torch's own 2 threads spelled out.
    twin = Settings(batch_size=32, threads=2)
    explored = [Candidate(workers(2), 1000.0), Candidate(twin, 900.0)]
    study = explored_study(explored, pruned=frozenset({workers(2).key()}))
    space = build_space({"threads": [1, 2]}, detect_machine(None), 32)
    for default_threads, joins in ((2, False), (1, True)):
        backend = SetFigures(lambda s, r: 1000.0)
        confirm(
            backend, plan(space=space, study=study), explored, DEFAULT, QuietProgress(),
            later=0, default_threads=default_threads,
        )  # fmt: skip
        assert (twin.key() in backend.orders[0]) is joins
