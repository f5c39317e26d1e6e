"""A time budget: the option as given, the plan of made-up stage costs, the deadline that
holds the later stages to it, one search under a budget too small for more than the least
search, and one under a budget that fits, ending within it."""

from __future__ import annotations

import dataclasses
import re
import statistics

import optuna
import pytest
import workloads
from conftest import quick
from messages import Messages

import autotune
from autotune import ConfigError, SearchOptions
from autotune.cli import main
from autotune.decide import RUNOFF, round_length
from autotune.explore import BoundsLeft
from autotune.pipeline._budget import ENOUGH_TRIALS, MIN_TRIALS, RESERVE, Deadline, plan
from autotune.pipeline._costs import ProbeCost, SearchShape, stage_seconds, trial_windows
from autotune.probe._turns import REWARM_SECONDS
from autotune.result import BudgetPlan, SearchResult
from autotune.study import records

# Made-up costs: a probe starts in 1 s, has no warm-up and windows of 1 s; with
# max_windows 4 and ASHA halving from 1 window, a full probe is 5 s, a pruned trial
# about 4 s (every trial to the second rung, half of them on), a short one 4 s. The
# bounds: 2 passes of a start and 1 s of held batches, 12 readings of two half windows.
# Each confirming round's config in a probe of its own (as on Ray, or side by side).
COST = ProbeCost(start_s=1.0, warmup_s=0.0, window_s=1.0)
SHAPE = SearchShape(bounds=BoundsLeft(readings=12, passes=2), sweep_probes=2, in_turns=False)
GIVEN = SearchOptions(
    trials=10,
    rounds=3,
    runoff_rounds=2,
    finalists=3,
    max_windows=4,
    min_windows=1,
    reduction_factor=2,
    window_seconds=1.0,
    warmup_seconds=0.0,
)
SPENT = 2.0  # the preflight


def planned(budget: float, shape: SearchShape = SHAPE, given: SearchOptions = GIVEN):
    return plan(given, budget_s=budget, spent_s=SPENT, shape=shape, cost=COST)


def test_the_made_up_stages_cost_what_their_probes_add_up_to() -> None:
    assert trial_windows(GIVEN) == 3.0
    assert stage_seconds(SHAPE, GIVEN, COST) == {
        "bounds": 2 * (1.0 + 1.0) + 12 * (2 * 0.5),
        "workers": 2 * 4.0,
        "explore": 10 * 4.0,
        "confirm": round_length(4) * 3 * 5.0,  # 3 finalists and the fastest in full
        "runoff": 6 * 2 * 5.0,
        "ddp": 0.0,
        "ceilings": 5 * 4.0,
    }
    assert SPENT + sum(stage_seconds(SHAPE, GIVEN, COST).values()) == 251.0


def test_rounds_in_turns_cost_one_start_and_each_configs_turns() -> None:
    cost = ProbeCost(start_s=1.0, warmup_s=0.5, window_s=0.5)
    later = REWARM_SECONDS + 0.5  # a warm-up again and a window
    assert cost.turns(4, passes=4) == pytest.approx(1.0 + 4 * (0.5 + 0.5 + 3 * later))
    # A warm-up shorter than REWARM_SECONDS is all a later turn warms up again.
    short = ProbeCost(start_s=1.0, warmup_s=0.05, window_s=0.5)
    assert short.turns(4, passes=4) == pytest.approx(1.0 + 4 * (0.05 + 0.5 + 3 * 0.55))
    # Each config after the first starts its own loader (the probe's start counts one).
    loaders = dataclasses.replace(cost, loader_start_s=0.25)
    assert loaders.turns(4, passes=4) == pytest.approx(cost.turns(4, passes=4) + 3 * 0.25)
    options = dataclasses.replace(GIVEN, window_seconds=0.5, warmup_seconds=0.5)
    stages = stage_seconds(dataclasses.replace(SHAPE, in_turns=True), options, cost)
    # 3 finalists and the fastest in full beside the default, one process a round.
    assert stages["confirm"] == pytest.approx(3 * cost.turns(4 + 1))
    assert stages["runoff"] == pytest.approx(2 * cost.turns(RUNOFF + 1))
    # Side by side (DDP ranks' slots), each config a probe of its own as before.
    side_by_side = stage_seconds(dataclasses.replace(SHAPE, in_turns=True, slots=2), options, cost)
    assert side_by_side["confirm"] == pytest.approx(round_length(4) * 3 * cost.seconds(4) / 2)


@pytest.mark.parametrize(
    ("budget", "left_out"),
    [
        (251, []),
        (235, ["the ceilings"]),
        (171, ["the ceilings", "the runoff"]),
        # Two rounds and no bounds leave room for 7 trials, under the 8 kept before a
        # second round goes; one round leaves room for all 10.
        (
            100,
            [
                "the ceilings",
                "the runoff",
                "the bounds and the worker sweep",
                "confirming rounds 3 -> 1",
            ],
        ),
    ],
)
def test_a_plan_gives_up_what_harms_the_choice_least_until_it_fits(
    budget: float, left_out: list[str]
) -> None:
    from autotune.pipeline._budget import left_out as phrases

    found = planned(budget)
    assert found.fits and found.total_s <= budget
    assert phrases(GIVEN, found.options) == left_out
    assert found.options.trials == GIVEN.trials


def test_trials_go_before_the_second_round_and_come_back_with_the_time_it_frees() -> None:
    # 2 rounds of 7 probes (70 s) and 8 trials (32 s) fit in 104 s.
    two_rounds = planned(104)
    assert (two_rounds.options.rounds, two_rounds.options.trials) == (2, ENOUGH_TRIALS)
    assert two_rounds.total_s == 104
    # 4 s less: one round (35 s) and every trial again.
    one_round = planned(100)
    assert (one_round.options.rounds, one_round.options.trials) == (1, 10)


def test_a_budget_too_small_for_anything_runs_the_least_search_and_says_so() -> None:
    found = planned(20)
    assert not found.fits
    least = found.options
    assert (least.trials, least.rounds, least.finalists, least.runoff_rounds) == (
        MIN_TRIALS,
        1,
        1,
        0,
    )
    assert not least.bounds and not least.ceilings
    # The least search: the preflight, 3 trials, one round of a finalist and the
    # fastest config measured in full beside the default.
    assert found.total_s == SPENT + MIN_TRIALS * 4.0 + round_length(2) * 5.0


@pytest.mark.parametrize("budget", range(10, 260, 15))
def test_every_plan_that_fits_is_within_the_budget_and_keeps_one_round(budget: int) -> None:
    found = planned(budget)
    assert found.options.rounds >= 1 and found.options.trials >= MIN_TRIALS
    assert found.fits == (found.total_s <= budget)
    assert found.fits or found.options.trials == MIN_TRIALS


def test_bounds_the_study_holds_already_cost_nothing_and_stay() -> None:
    from autotune.pipeline._budget import left_out as phrases

    found = planned(100, shape=SearchShape(in_turns=False))
    assert found.options.bounds
    assert "the bounds and the worker sweep" not in phrases(GIVEN, found.options)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def after_the_preflight(budget_s: float) -> tuple[Clock, Messages, Deadline, SearchOptions]:
    """A deadline of ``budget_s`` on the made-up costs, its first plan made once the
    preflight has spent SPENT: the clock, what it said, the deadline and the options."""
    clock, said = Clock(), Messages()
    deadline = Deadline(budget_s, started=0.0, shape=SHAPE, cost=COST, clock=clock)
    clock.now = SPENT
    return clock, said, deadline, deadline.first_plan(GIVEN, said)


class Round:
    """A round maker for ``Deadline.confirming``: ``size`` configs (the default loader's
    included) whatever the options, or each finalist and the default loader; it keeps
    the options it was given."""

    def __init__(self, size: int | None = None) -> None:
        self.size = size
        self.given: list[SearchOptions] = []

    def __call__(self, options: SearchOptions) -> int:
        self.given.append(options)
        return self.size if self.size is not None else options.finalists + 1


def test_the_deadline_plans_again_before_each_stage_and_records_what_it_cut() -> None:
    clock, said, deadline, options = after_the_preflight(100.0)
    # Every plan fits the budget less its reserve.
    assert deadline.plan is not None and deadline.plan.planned_s <= 100 * (1 - RESERVE)
    assert said.lines == [deadline.plan.describe()]
    assert deadline.plan.stages[0] == ("preflight", SPENT)
    assert [stage for stage, _ in deadline.plan.stages] == ["preflight", "explore", "confirm"]
    # Exploring: no trial starts after the time that leaves a full trial and one
    # confirming round (35 s) before the reserve.
    exploring = deadline.exploring(options, said)
    assert exploring.timeout == pytest.approx(100 * (1 - RESERVE) - SPENT - 35 - 5)
    # Exploring overran to 80 s: one finalist is planned, but the round is made of five
    # configs whatever the finalists; its 7 probes no longer fit, and it runs anyway.
    clock.now = 80.0
    confirming = deadline.confirming(exploring, Round(4 + 1), said)
    assert (confirming.rounds, confirming.finalists) == (1, 1)
    assert said.lines[1:] == [
        "budget: 0:20 left (0:10 of it kept in reserve); left out: finalists 3 -> 1",
        "budget: 0:20 left (0:10 of it kept in reserve), short of the least of the stages"
        " left, which run all the same",
    ]
    clock.now = 80.0 + 35  # the round ran
    assert not deadline.keeps_ceilings(confirming, said)
    assert len(said.lines) == 3  # said once
    assert deadline.plan.left_out == (
        "the ceilings",
        "the runoff",
        "the bounds and the worker sweep",
        "confirming rounds 3 -> 1",
        "finalists 3 -> 1",
    )


def test_exploring_past_its_plan_leaves_fewer_finalists_before_their_round_is_made() -> None:
    clock, said, deadline, options = after_the_preflight(280.0)
    assert options.finalists == 3
    clock.now = 225.0  # exploring overran: a round of 3 finalists and the fastest (7
    # probes, 35 s) no longer fits in the 27 s left before the reserve (252 s)...
    made = Round()
    confirming = deadline.confirming(options, made, said)
    # ...so the round is made of one finalist and the fastest (4 probes, 20 s)
    assert [given.finalists for given in made.given] == [1]
    assert (confirming.finalists, confirming.rounds) == (1, 1)
    assert said.lines[-1] == (
        "budget: 0:55 left (0:28 of it kept in reserve); left out: the ceilings, the runoff,"
        " confirming rounds 3 -> 1, finalists 3 -> 1"
    )


def test_a_round_longer_than_planned_costs_the_later_stages_in_the_plans_order() -> None:
    clock, said, deadline, options = after_the_preflight(280.0)
    assert options == GIVEN  # 251 s planned, in the 252 s the reserve leaves
    clock.now = SPENT + 24 + 40  # bounds, sweep and exploration as planned
    # 10 configs in a round beside the default, not the 4 planned: 16 probes a round.
    confirming = deadline.confirming(options, Round(10 + 1), said)
    assert (confirming.rounds, confirming.runoff_rounds, confirming.ceilings) == (2, 0, False)
    assert said.lines[-1] == (
        "budget: 3:34 left (0:28 of it kept in reserve); left out: the ceilings, the runoff,"
        " confirming rounds 3 -> 2"
    )
    assert deadline.plan is not None
    assert deadline.plan.left_out == ("the ceilings", "the runoff", "confirming rounds 3 -> 2")


def test_time_an_earlier_stage_left_unspent_brings_back_what_the_plan_cut() -> None:
    clock, said, deadline, options = after_the_preflight(100.0)
    assert options.rounds == 1
    clock.now = SPENT + 10  # exploring stopped early, 30 s before its plan
    confirming = deadline.confirming(options, Round(4 + 1), said)
    assert (confirming.rounds, confirming.runoff_rounds, confirming.ceilings) == (2, 0, False)
    assert said.lines[-1] == (
        "budget: 1:28 left (0:10 of it kept in reserve); back in: confirming rounds 1 -> 2"
    )
    assert deadline.plan is not None
    assert deadline.plan.left_out == (
        "the ceilings",
        "the runoff",
        "the bounds and the worker sweep",
        "confirming rounds 3 -> 2",
    )


def test_the_ceilings_are_skipped_when_the_rounds_overran() -> None:
    clock, said, deadline, options = after_the_preflight(280.0)
    clock.now = 250.0  # 20 s of ceilings no longer fit before the reserve (252 s)
    assert not deadline.keeps_ceilings(options, said)
    assert said.lines[-1] == (
        "budget: 0:30 left (0:28 of it kept in reserve); left out: the ceilings"
    )
    clock.now = 230.0
    assert deadline.keeps_ceilings(options, said)


def test_a_probes_start_and_a_loaders_are_what_this_searchs_trials_took(
    saved_study,
) -> None:
    measured = SearchOptions(window_seconds=0.1, warmup_seconds=0.05, max_windows=3)
    cost = ProbeCost.of(measured, start_s=30.0)  # a preflight far slower than a probe
    study = optuna.create_study(direction="maximize")
    deadline = Deadline(1000.0, started=0.0, shape=SHAPE, cost=cost, study=study, clock=Clock())
    deadline.first_plan(measured, Messages())
    source = optuna.load_study(study_name="small", storage=f"sqlite:///{saved_study}")
    for trial in source.get_trials():
        study.add_trial(trial)  # as if this search had run them
    deadline.confirming(measured, Round(7), Messages())
    ran = [r for r in records(study) if r.probed and r.failure is None and r.figures]
    beyond = sorted(r.duration_s - 0.05 - 0.1 * len(r.figures.windows) for r in ran)
    assert len(ran) >= 3 and 0 < beyond[0] <= deadline.cost.start_s <= beyond[-1] < 30
    assert deadline.cost.start_s == pytest.approx(statistics.median(beyond))
    # and a config's loader takes to its first batch what these trials' loaders took
    loaders = [r.figures.startup_s for r in ran if r.figures.startup_s is not None]
    assert len(loaders) == len(ran) and cost.loader_start_s == 0.0
    assert deadline.cost.loader_start_s == pytest.approx(statistics.median(loaders))
    assert deadline.cost.loader_start_s > 0


def test_without_a_budget_every_check_gives_the_options_back() -> None:
    said = Messages()
    deadline = Deadline(None, started=0.0, shape=SHAPE, cost=COST, clock=Clock())
    assert deadline.first_plan(GIVEN, said) is GIVEN
    assert deadline.exploring(GIVEN, said) is GIVEN
    assert deadline.confirming(GIVEN, Round(100), said) is GIVEN
    assert deadline.keeps_ceilings(GIVEN, said)
    assert deadline.plan is None and said.lines == []


@pytest.mark.parametrize(
    ("given", "seconds"),
    [("90", 90), ("90s", 90), ("2m", 120), ("1m30s", 90), ("2min", 120), ("1h", 3600), (45, 45)],
)
def test_a_budget_reads_seconds_or_a_duration(given: object, seconds: float) -> None:
    assert SearchOptions.from_mapping({"budget": given}).budget == seconds


@pytest.mark.parametrize("given", ["soon", "1x", "m", "30s1m", "-5", 0, True])
def test_a_budget_refuses_anything_else_and_says_what_it_takes(given: object) -> None:
    with pytest.raises(ConfigError, match=r"search option budget is .*; expected"):
        SearchOptions.from_mapping({"budget": given})


CONFIG = """
from workloads import linear_model, sleepy_dataset
dataset = sleepy_dataset
model = linear_model
batch_size = 8
space = {"num_workers": [0, 1], "threads": 1, "batch_size": [8, 16], "amp": "off"}
"""


def test_the_flag_refuses_a_bad_budget_in_one_line(capsys, write_config) -> None:
    config = str(write_config(CONFIG, "c.py"))
    assert main(["search", config, "--dry-run", "--budget", "soon"]) == 2
    assert capsys.readouterr().err == (
        f"autotune: error: config {config}: search option budget is 'soon'; expected "
        "seconds (90) or a duration such as '90s', '2m' or '1m30s'.\n"
    )


def test_a_dry_run_shows_the_plan_of_its_budget(capsys, write_config, workdir) -> None:
    config = str(write_config(CONFIG, "c.py"))
    assert main(["search", config, "--dry-run", "--budget", "1m"]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    # With the default probe settings a probe is about 6 s: every stage would take
    # minutes, so the plan cuts until its stages fit the minute.
    planned = re.fullmatch(r"budget 1:00: planned (0:\d\d|1:00) \(.*\), (\d+) trials .*", line)
    assert planned is not None, line
    assert int(planned.group(2)) >= MIN_TRIALS
    assert "left out: the ceilings, the runoff, the bounds and the worker sweep" in line
    assert line.endswith("(planned again after the preflight)")
    assert not (workdir / "studies").exists()


def test_the_plan_survives_the_study() -> None:
    kept = BudgetPlan(
        seconds=60.0,
        planned_s=58.5,
        stages=(("preflight", 1.5), ("explore", 20.0), ("confirm", 37.0)),
        trials=6,
        rounds=1,
        left_out=("the ceilings", "confirming rounds 3 -> 1"),
    )
    assert BudgetPlan.from_dict(kept.to_dict()) == kept
    assert kept.planned("explore") == 20.0 and kept.planned("bounds") is None
    assert kept.describe() == (
        "budget 1:00: planned 0:58 (preflight 0:02, explore 0:20, confirm 0:37), 6 trials "
        "and 1 confirming round; left out: the ceilings, confirming rounds 3 -> 1"
    )


def _search_everything(
    name: str, workers: list[int], trials: int, budget: str, said: Messages
) -> SearchResult:
    """A search that asks for every stage (bounds, three confirming and runoff rounds,
    ceilings) on the sleepy dataset, under ``budget``: the plan decides what runs."""
    return autotune.search(
        dataset=workloads.sleepy_dataset,
        model=workloads.linear_model,
        batch_size=8,
        name=name,
        space={"num_workers": workers, "threads": 1, "batch_size": [8, 16]},
        progress=said,
        **quick(
            trials=trials,
            rounds=3,
            runoff_rounds=3,
            finalists=3,
            bounds=True,
            ceilings=True,
            budget=budget,
        ),
    )


def test_a_search_under_a_budget_runs_what_it_planned_and_keeps_the_plan(workdir) -> None:
    said = Messages()
    # Everything a search does, in a budget too small for more than the least search.
    result = _search_everything("budget", [0, 1], trials=8, budget="1s", said=said)
    budget = result.budget
    assert budget is not None and not budget.fits and budget.seconds == 1
    assert budget.planned_s > 1
    assert (budget.trials, budget.rounds) == (MIN_TRIALS, 1)
    assert [stage for stage, _ in budget.stages] == ["preflight", "explore", "confirm"]
    assert budget.left_out == (
        "the ceilings",
        "the runoff",
        "the bounds and the worker sweep",
        "confirming rounds 3 -> 1",
        "finalists 3 -> 1",
        "trials 8 -> 3",
    )
    assert budget.describe() in said.lines
    # It ran what it planned: no bounds, at most the planned trials, one round with the
    # default loader beside the finalists, no ceilings.
    study = optuna.load_study(study_name="budget", storage="sqlite:///studies/budget.db")
    assert not any(key.startswith("autotune.compute") for key in study.user_attrs)
    explored = [r for r in records(study) if r.role == "explore" and r.probed]
    assert 1 <= len(explored) <= MIN_TRIALS
    assert result.confirmed and result.rounds == 1 and result.baseline is not None
    assert result.ceilings == {} and result.loader_limit is None
    # The diagnosis says why it has no ceilings, and what brings them back.
    lacking = [a for d in autotune.decide.diagnose(result) for a in d.advice if "ceilings" in a]
    assert lacking and all(
        "(the time budget left them out: a larger --budget keeps them)" in a for a in lacking
    )
    # The study keeps the plan, and shows it.
    assert SearchResult.from_dict(study.user_attrs["autotune.result"]).budget == budget
    assert study.user_attrs["autotune"]["options"]["budget"] == 1.0
    assert budget.describe() in autotune.output.result_lines(result)
    assert f"- **time budget**: {budget.describe()}" in autotune.report(
        "studies/budget.db", format="md"
    )
    assert dataclasses.asdict(autotune.load("studies/budget.db").budget) == dataclasses.asdict(
        budget
    )


def test_a_search_under_a_budget_that_fits_ends_within_it(workdir) -> None:
    said = Messages()
    # Asked for more than 15 s holds (40 trials alone take longer), so the plan cuts.
    result = _search_everything("fits", [0, 1, 2], trials=40, budget="15s", said=said)
    budget, took = result.budget, result.search_time
    # The plan is an estimate from this search's own probes, made again before each stage
    # into the 13.5 s the reserve leaves: with the suite's three test processes on two CPUs
    # a round can run past its estimate by more than the reserve, so a tenth of slack.
    assert took is not None and took.total_s <= 15 * 1.1
    assert budget is not None and budget.fits and budget.planned_s <= 15 * (1 - RESERVE)
    assert budget.left_out and budget.trials < 40
    # The first plan is said after the preflight; the one kept is planned again since.
    assert said.lines[0].startswith("budget 0:15: planned ")
    assert result.confirmed and result.baseline is not None
