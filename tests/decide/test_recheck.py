"""A study's earlier answer measured again, with a stand-in backend that measures configs
at set figures: when it holds, when it no longer does, and what the held result adds."""

from __future__ import annotations

import dataclasses

import optuna
from test_confirm import DEFAULT, SetFigures, plan, result_of, run, workers

from autotune import SearchResult, Settings
from autotune.decide import earlier_answer, earlier_finalists, recheck
from autotune.progress import QuietProgress
from autotune.study import Attr

LEADER = workers(4)


def earlier(rate: float = 2000.0, default: float = 1000.0) -> SearchResult:
    """The result of three confirming rounds in which the leader read about ``rate`` (a
    few percent apart) and the default loader ``default``, with the space the stand-in
    plan searches."""
    wobble = (1.0, 1.04, 0.97)
    _, confirmed = run(lambda s, r: rate * wobble[r] if s == LEADER else default)
    return dataclasses.replace(result_of(confirmed), space=plan().space.to_dict())


def measured_at(leader: float, default: float = 1000.0) -> SetFigures:
    return SetFigures(lambda s, r: default if s == DEFAULT else leader)


def test_the_earlier_choice_that_reads_as_predicted_holds_and_gains_a_round() -> None:
    before = earlier()
    assert before.settings == LEADER and not before.is_default
    backend = measured_at(1990.0)
    checked = recheck(backend, plan(), before, DEFAULT, QuietProgress())
    assert checked is not None and checked.held
    assert "as predicted" in checked.reason
    # One round: the default, the choice, the default.
    assert backend.orders == [[DEFAULT.key(), LEADER.key(), DEFAULT.key()]]
    after = checked.result
    assert after is not None and after.settings == LEADER
    assert after.rounds == before.rounds + 1
    assert after.rates == (*before.rates, 1990.0)
    assert after.speedup_rounds[:-1] == before.speedup_rounds
    assert after.speedup_rounds[-1] == 1.99
    assert after.baseline is not None and after.baseline.samples_per_s == 1000.0
    assert after.samples_per_s == 1990.0


def test_a_choice_that_reads_below_the_earlier_prediction_no_longer_holds() -> None:
    before = earlier()
    interval = before.speedup_interval
    assert interval is not None and interval[0] > 1.3
    checked = recheck(measured_at(1300.0), plan(), before, DEFAULT, QuietProgress())
    assert checked is not None and not checked.held and checked.result is None
    assert "reads 1.30x the default loader now" in checked.reason
    assert f"predicted {interval[0]:.2f}-{interval[1]:.2f}x" in checked.reason
    # What a study seeded from this one tries first (--warm-start): the earlier choice,
    # then its finalists, fastest first.
    seeds = earlier_finalists(before)
    assert seeds[0] == LEADER
    assert set(seeds) == {LEADER, *(m.settings for m in before.finalists)}


def test_a_choice_that_no_longer_beats_the_default_beyond_the_noise_does_not_hold() -> None:
    # One earlier round: no interval to read, the noise band alone.
    before = dataclasses.replace(
        earlier(), speedup_rounds=(2.0,), speedup_spread=None, rates=(2000.0,), rounds=1
    )
    assert before.speedup_interval is None
    checked = recheck(measured_at(1020.0), plan(), before, DEFAULT, QuietProgress())
    assert checked is not None and not checked.held
    assert "must beat the default by more than the noise" in checked.reason


def test_an_earlier_default_holds_while_its_fastest_finalist_stays_within_the_noise() -> None:
    # The rounds found the leader no faster than the default: the default was the answer.
    before = earlier(rate=1000.0)
    assert before.is_default and before.settings == DEFAULT
    fastest = earlier_finalists(before)[1]
    backend = measured_at(1010.0)
    checked = recheck(backend, plan(), before, DEFAULT, QuietProgress())
    assert checked is not None and checked.held
    assert backend.orders == [[DEFAULT.key(), fastest.key(), DEFAULT.key()]]
    assert checked.result is not None and checked.result.is_default
    assert checked.result.speedup_rounds[-1] == 1.0

    beaten = recheck(measured_at(1500.0), plan(), before, DEFAULT, QuietProgress())
    assert beaten is not None and not beaten.held
    assert "now reads 1.50x the default loader" in beaten.reason


def test_an_answer_from_another_space_is_not_measured_again() -> None:
    before = dataclasses.replace(earlier(), space={"num_workers": {"choices": [0, 1]}})
    backend = measured_at(2000.0)
    checked = recheck(backend, plan(), before, DEFAULT, QuietProgress())
    assert checked is not None and not checked.held
    assert checked.reason == "it was chosen in another space than this search's"
    assert backend.orders == []


def test_a_choice_that_fails_to_measure_again_does_not_hold() -> None:
    backend = SetFigures(lambda s, r: 1000.0 if s == DEFAULT else None)
    checked = recheck(backend, plan(), earlier(), DEFAULT, QuietProgress())
    assert checked is not None and not checked.held
    assert "failed to measure again" in checked.reason


def test_an_earlier_answer_is_a_confirmed_result_saved_in_the_study() -> None:
    study = optuna.create_study(direction="maximize")
    assert earlier_answer(study) is None
    saved = earlier()
    study.set_user_attr(Attr.RESULT, saved.to_dict())
    found = earlier_answer(study)
    assert found is not None and found.settings == saved.settings
    assert found.speedup_rounds == saved.speedup_rounds
    # Chosen from exploration figures alone: nothing to measure again.
    study.set_user_attr(Attr.RESULT, dataclasses.replace(saved, confirmed=False).to_dict())
    assert earlier_answer(study) is None


def test_the_recheck_trials_are_confirming_trials_of_the_study() -> None:
    backend = measured_at(1990.0)
    stand_in = plan()
    recheck(backend, stand_in, earlier(), DEFAULT, QuietProgress())
    roles = [t.user_attrs[Attr.ROLE] for t in stand_in.study.trials[-3:]]
    assert roles == ["baseline", "confirm", "baseline"]
    assert Settings.from_dict(stand_in.study.trials[-2].user_attrs["autotune.settings"]) == LEADER
