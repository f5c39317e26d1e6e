"""The rules every trial follows, piece by piece, on in-memory studies: no probe runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState

from autotune.explore import Bounds, ExplorePlan, compute_key
from autotune.explore import _in_turns as in_turns
from autotune.explore import _repeats as repeats
from autotune.explore import _ruled_out as ruled_out
from autotune.explore import _rules as rules_module
from autotune.explore._early_stop import (
    MAX_REPEATS,
    PATIENCE,
    budget_left,
    ceiling_message,
    exhausted,
    near_the_ceiling,
    probed_count,
    stalled,
)
from autotune.explore._embedded import EmbeddedBackend
from autotune.explore._fatal import (
    FATAL_REPEATS,
    FailureWatch,
    counts_against_the_code,
    failure_signature,
    fatal_failure,
)
from autotune.explore._objective import Objective
from autotune.explore._outcome import (
    Outcome,
    TrialFailed,
    probe_outcome,
    record_failure,
    record_interrupted,
)
from autotune.explore._repeats import (
    UnmeasuredProposer,
    earlier_trial,
    measured_keys,
    repeat_outcome,
    reuse,
    within_reach,
)
from autotune.explore._ruled_out import (
    OutOfMemoryRule,
    bytes_per_sample,
    free_shm_bytes,
    out_of_reach,
    shm_blocks,
)
from autotune.explore._rules import TrialRules
from autotune.explore._rungs import StudyRungs
from autotune.explore._trials import enqueue_warm_starts, fixed_trial
from autotune.machine import Machine
from autotune.probe import Failure, Figures, ProbeRequest, ProbeResult, Window, WorkloadSource
from autotune.progress import QuietProgress
from autotune.settings import Settings
from autotune.space import Space, build_space
from autotune.study import WARM_START, Attr, TrialRecord
from autotune.workload import SearchOptions


def figures(*samples: int) -> Figures:
    """Figures of one-second windows that trained ``samples`` each."""
    return Figures(
        windows=tuple(
            Window(index=i, seconds=1.0, samples=n, fresh=n, steps=1, wait_seconds=0.0)
            for i, n in enumerate(samples)
        )
    )


def new_trial() -> optuna.Trial:
    return optuna.create_study(direction="maximize").ask()


# ------------------------------------------------------------------ outcomes
def test_a_probe_that_ran_to_the_end_completes_with_its_throughput() -> None:
    outcome = probe_outcome(ProbeResult(figures=figures(100, 300)))
    assert outcome == Outcome(TrialState.COMPLETE, 200.0)
    assert outcome.unwrap() == 200.0


def test_a_probe_the_pruner_stopped_is_pruned_after_its_windows() -> None:
    outcome = probe_outcome(ProbeResult(figures=figures(100, 100), stopped=True))
    assert outcome == Outcome(TrialState.PRUNED, reason="pruned after 2 windows")
    with pytest.raises(optuna.TrialPruned, match="pruned after 2 windows"):
        outcome.unwrap()


def test_a_failed_probe_fails_with_its_message_even_when_stopped() -> None:
    failure = Failure(kind="oom", message="out of memory")
    outcome = probe_outcome(ProbeResult(figures=figures(100), failure=failure, stopped=True))
    assert outcome == Outcome(TrialState.FAIL, reason="out of memory")
    with pytest.raises(TrialFailed, match="out of memory"):
        outcome.unwrap()


def test_a_complete_outcome_without_a_value_is_a_failure() -> None:
    with pytest.raises(TrialFailed):
        Outcome(TrialState.COMPLETE).unwrap()


def test_a_failure_keeps_only_the_end_of_a_long_traceback() -> None:
    trial = new_trial()
    record_failure(trial, Failure(kind="error", message="boom", traceback="a" * 5 + "b" * 20_000))
    assert trial.user_attrs[Attr.FAILURE]["traceback"] == "b" * 20_000
    short = new_trial()
    record_failure(short, Failure(kind="error", message="boom", traceback="tb"))
    assert short.user_attrs[Attr.FAILURE] == {
        "kind": "error",
        "message": "boom",
        "piece": None,
        "traceback": "tb",
    }


def test_an_interrupted_trial_says_why_and_fails() -> None:
    trial = new_trial()
    outcome = record_interrupted(trial, "not run: the search ended")
    assert outcome == Outcome(TrialState.FAIL, reason="not run: the search ended")
    assert trial.user_attrs[Attr.FAILURE]["kind"] == "interrupted"
    assert trial.user_attrs[Attr.FAILURE]["message"] == "not run: the search ended"


# ------------------------------------------------------------------ ruled out before running
def add_trial(
    study: optuna.Study,
    settings: Settings | None = None,
    *,
    state: TrialState = TrialState.COMPLETE,
    value: float | None = None,
    role: str = "explore",
    failure: Failure | None = None,
    steps: dict[int, float] | None = None,
    **attrs: Any,
) -> FrozenTrial:
    """Add a finished trial as autotune would have recorded it; returns it."""
    user_attrs: dict[str, Any] = {Attr.ROLE: role, **attrs}
    if settings is not None:
        user_attrs[Attr.SETTINGS] = settings.to_dict()
    if failure is not None:
        user_attrs[Attr.FAILURE] = failure.to_dict()
    study.add_trial(
        optuna.trial.create_trial(
            state=state, value=value, user_attrs=user_attrs, intermediate_values=steps or {}
        )
    )
    return study.get_trials(deepcopy=False)[-1]


OOM = Failure(kind="oom", message="out of memory")


def test_out_of_memory_blocks_that_batch_and_larger_ones_with_the_same_settings() -> None:
    rule = OutOfMemoryRule()
    rule.add(Settings(batch_size=32, num_workers=1), number=4, failure=OOM)
    same = rule.blocks(Settings(batch_size=32, num_workers=1))
    assert same == Failure(
        kind="infeasible",
        message="not run: batch 32 ran out of memory with the same settings in trial #4",
    )
    larger = rule.blocks(Settings(batch_size=64, num_workers=1))
    assert larger is not None and larger.message == (
        "not run: batch 64 > batch 32, which ran out of memory with the same settings in trial #4"
    )
    assert rule.blocks(Settings(batch_size=16, num_workers=1)) is None
    assert rule.blocks(Settings(batch_size=64, num_workers=2)) is None


def test_out_of_memory_remembers_the_smallest_batch_that_failed() -> None:
    rule = OutOfMemoryRule()
    rule.add(Settings(batch_size=32), number=4, failure=OOM)
    rule.add(Settings(batch_size=64), number=9, failure=OOM)  # larger: changes nothing
    rule.add(Settings(batch_size=16), number=7, failure=OOM)
    blocked = rule.blocks(Settings(batch_size=16))
    assert blocked is not None and blocked.message.endswith("in trial #7")
    assert rule.blocks(Settings(batch_size=8)) is None


def test_out_of_memory_is_read_back_from_the_trials_of_a_resumed_study() -> None:
    study = optuna.create_study()
    add_trial(study, Settings(batch_size=8), value=100.0)
    add_trial(study, Settings(batch_size=32), state=TrialState.FAIL, failure=OOM)
    error = Failure(kind="error", message="boom")
    add_trial(study, Settings(batch_size=16), state=TrialState.FAIL, failure=error)
    add_trial(study, state=TrialState.FAIL, failure=OOM)  # no settings: nothing to learn
    rule = OutOfMemoryRule.from_trials(study.get_trials(deepcopy=False))
    blocked = rule.blocks(Settings(batch_size=64))
    assert blocked is not None and blocked.message.endswith("in trial #1")
    assert rule.blocks(Settings(batch_size=16)) is None


def test_bytes_per_sample_come_from_the_preflight_s_batch() -> None:
    assert bytes_per_sample({"workload": {"batch_bytes": 800, "batch_samples": 8}}) == 100.0
    assert bytes_per_sample({"workload": {"batch_bytes": None, "batch_samples": 8}}) == 0.0
    assert bytes_per_sample({"workload": {"batch_bytes": 800, "batch_samples": 0}}) == 0.0
    assert bytes_per_sample({"workload": {}}) == 0.0
    assert bytes_per_sample(None) == 0.0


def test_batches_in_flight_must_fit_in_the_free_shared_memory() -> None:
    mib = 2**20
    # 2 workers x prefetch 2, + 1: five batches of 2 MiB.
    settings = Settings(batch_size=2, num_workers=2, prefetch_factor=2)
    assert shm_blocks(settings, per_sample=mib, free_bytes=10 * mib) is None
    short = shm_blocks(settings, per_sample=mib, free_bytes=10 * mib - 1)
    assert short is not None and short.kind == "shm"
    assert short.message.startswith("not run: 5 batches in flight")
    assert shm_blocks(settings, per_sample=mib, free_bytes=None) is None
    assert shm_blocks(Settings(batch_size=2), per_sample=mib, free_bytes=0) is None


def test_free_shared_memory_is_none_where_there_is_none(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(ruled_out, "SHM_DIR", str(tmp_path))
    free = free_shm_bytes()
    assert isinstance(free, int) and free >= 0
    monkeypatch.setattr(ruled_out, "SHM_DIR", str(tmp_path / "missing"))
    assert free_shm_bytes() is None


def test_a_config_out_of_reach_of_the_best_explored_one_is_ruled_out() -> None:
    small, large = Settings(batch_size=4), Settings(batch_size=64)
    bounds = Bounds({compute_key(small): 400.0, compute_key(large): 6400.0})
    study = optuna.create_study(direction="maximize")
    assert out_of_reach(study, small, bounds, tolerance=0.03) is None  # no best yet
    add_trial(study, large, value=6000.0, role="confirm")
    assert out_of_reach(study, small, bounds, tolerance=0.03) is None  # not explored
    add_trial(study, large, value=6000.0)
    reason = out_of_reach(study, small, bounds, tolerance=0.03)
    assert reason is not None and reason.startswith("not run: the model alone trains 400")
    assert out_of_reach(study, large, bounds, tolerance=0.03) is None
    assert out_of_reach(study, small, None, tolerance=0.03) is None


# ------------------------------------------------------------------ repeats
MACHINE = Machine(cpus=2, cpu_model="t", memory_bytes=2**33, shm_bytes=2**30, accelerator="cpu")
BATCHES = (8, 16, 32, 64, 128)


def batches_space() -> Space:
    """Five configs that differ in batch size alone; each one's neighbours are the next
    batch sizes down and up."""
    user = {"batch_size": list(BATCHES), "num_workers": 0, "threads": 1, "amp": "off"}
    return build_space(user, MACHINE, batch_size=8)


def config(batch: int) -> Settings:
    return Settings(batch_size=batch, threads=1)


def test_a_config_settled_by_an_earlier_explored_trial_is_a_repeat() -> None:
    study = optuna.create_study()
    add_trial(study, config(16), value=100.0, role="confirm")
    first = add_trial(
        study, config(16), state=TrialState.FAIL, failure=Failure(kind="error", message="x")
    )
    add_trial(study, config(16), value=100.0)
    trials = study.get_trials(deepcopy=False)
    repeated = earlier_trial(trials, config(16), number=9)
    assert repeated is not None and repeated.number == first.number  # the first to settle it
    assert earlier_trial(trials, config(32), number=9) is None
    assert earlier_trial(trials[:2], config(16), number=first.number) is None  # not itself


def test_a_config_that_may_pass_another_time_is_measured_again() -> None:
    study = optuna.create_study()
    for kind in ("interrupted", "timeout"):
        failure = Failure(kind=kind, message=kind)
        add_trial(study, config(16), state=TrialState.FAIL, failure=failure)
    add_trial(study, config(16), state=TrialState.RUNNING)  # not settled yet
    assert earlier_trial(study.get_trials(deepcopy=False), config(16), number=9) is None
    oom = add_trial(study, config(16), state=TrialState.FAIL, failure=OOM)
    repeated = earlier_trial(study.get_trials(deepcopy=False), config(16), number=9)
    assert repeated is not None and repeated.number == oom.number


def test_a_repeat_ends_as_the_trial_it_repeats() -> None:
    study = optuna.create_study()
    complete = add_trial(study, config(8), value=150.0)
    pruned = add_trial(study, config(16), state=TrialState.PRUNED, steps={1: 90.0})
    failed = add_trial(study, config(32), state=TrialState.FAIL, failure=OOM)
    assert repeat_outcome(complete) == Outcome(TrialState.COMPLETE, 150.0)
    assert repeat_outcome(pruned) == Outcome(
        TrialState.PRUNED, reason="same config as trial #1, which was pruned"
    )
    assert repeat_outcome(failed) == Outcome(
        TrialState.FAIL, reason="same config as trial #2, which failed"
    )


def test_a_repeat_reuses_the_figures_and_windows_of_the_trial_it_repeats() -> None:
    study = optuna.create_study(direction="maximize")
    earlier = add_trial(
        study,
        config(16),
        value=200.0,
        steps={1: 190.0, 2: 200.0},
        **{Attr.FIGURES: figures(190, 210).to_dict()},
    )
    trial = study.ask()
    outcome = reuse(trial, earlier)
    assert outcome == Outcome(TrialState.COMPLETE, 200.0)
    frozen = study.tell(trial, outcome.value)
    assert frozen.user_attrs[Attr.DUPLICATE_OF] == earlier.number
    assert frozen.user_attrs[Attr.FIGURES] == earlier.user_attrs[Attr.FIGURES]
    assert Attr.FAILURE not in frozen.user_attrs and Attr.BOUNDED not in frozen.user_attrs
    assert frozen.intermediate_values == {1: 190.0, 2: 200.0}


def test_a_repeat_of_a_failed_or_ruled_out_config_says_why_as_it_did() -> None:
    study = optuna.create_study(direction="maximize")
    failed = add_trial(study, config(32), state=TrialState.FAIL, failure=OOM)
    bounded = add_trial(
        study, config(8), state=TrialState.PRUNED, **{Attr.BOUNDED: "not run: slow"}
    )
    for earlier, attr in ((failed, Attr.FAILURE), (bounded, Attr.BOUNDED)):
        trial = study.ask()
        outcome = reuse(trial, earlier)
        assert outcome.state == earlier.state
        assert trial.user_attrs[attr] == earlier.user_attrs[attr]
        assert Attr.FIGURES not in trial.user_attrs
        study.tell(trial, state=outcome.state)


def test_a_trial_that_measured_nothing_new_is_a_repeat_a_bound_or_infeasible() -> None:
    study = optuna.create_study()
    infeasible = Failure(kind="infeasible", message="not run")
    nothing = [
        add_trial(study, config(8), value=1.0, **{Attr.DUPLICATE_OF: 0}),
        add_trial(study, config(8), state=TrialState.PRUNED, **{Attr.BOUNDED: "not run"}),
        add_trial(study, config(8), state=TrialState.FAIL, failure=infeasible),
    ]
    something = [
        add_trial(study, config(8), value=1.0),
        add_trial(study, config(8), state=TrialState.FAIL, failure=OOM),
    ]
    assert not any(TrialRecord.from_trial(t).probed for t in nothing)
    assert all(TrialRecord.from_trial(t).probed for t in something)


def test_the_budget_counts_probed_trials_and_caps_free_proposals_at_itself() -> None:
    assert budget_left(3, probed=0, proposed=0) == 3
    assert budget_left(3, probed=2, proposed=2) == 1
    assert budget_left(3, probed=2, proposed=5) == 1  # three repeats: still one to probe
    assert budget_left(3, probed=2, proposed=6) == 0  # as many free proposals as the budget
    assert budget_left(3, probed=3, proposed=3) == 0
    assert budget_left(3, probed=4, proposed=4) == 0  # never negative


def test_only_explored_trials_that_probe_spend_the_budget() -> None:
    rules = TrialRules(explore_plan(optuna.create_study()), exploring=True, backend="optuna")
    run_trial(rules, config(16), ran(200))
    assert (rules.proposed, rules.probed, rules.budget_left(3)) == (1, 1, 2)
    run_trial(rules, config(16), not_probed)  # a repeat
    assert (rules.proposed, rules.probed, rules.budget_left(3)) == (2, 1, 2)
    run_trial(rules, config(8), ran(100), role="confirm")  # a given config: not exploring
    assert (rules.proposed, rules.probed, rules.budget_left(3)) == (2, 1, 2)
    run_trial(rules, config(8), ran(100))
    assert (rules.proposed, rules.probed, rules.budget_left(3)) == (3, 2, 1)


def test_embedded_exploration_probes_its_whole_budget_despite_repeats(monkeypatch) -> None:
    study = optuna.create_study(direction="maximize")
    plan = dataclasses.replace(
        explore_plan(study),
        warm_starts=(config(16), config(16), config(16)),
        options=SearchOptions(seed=0, trials=3),
    )
    probed: list[Settings] = []

    def probe(self: Objective, trial: optuna.Trial, settings: Settings, **_: Any) -> ProbeResult:
        probed.append(settings)
        return ran(settings.batch_size * 10)(settings)

    monkeypatch.setattr(Objective, "probe", probe)
    EmbeddedBackend().explore(plan)
    explored = [TrialRecord.from_trial(t) for t in study.trials]
    assert [r.duplicate_of for r in explored[:3]] == [None, 0, 0]
    assert len(probed) == 3 == sum(r.probed for r in explored)
    assert len({s.key() for s in probed}) == 3


def test_embedded_confirming_rounds_turn_their_order_every_other_round(monkeypatch) -> None:
    plan = explore_plan(optuna.create_study(direction="maximize"))
    probed: list[int] = []

    def probe(request: ProbeRequest) -> ProbeResult:  # a round measured in turns
        probed.extend(settings.batch_size for settings in request.turns)
        parts = [ran(settings.batch_size * 10)(settings) for settings in request.turns]
        return ProbeResult(figures=Figures(), turns=tuple(parts))

    monkeypatch.setattr(in_turns, "run_probe", probe)
    configs = [config(8), config(16), config(32)]
    groups = EmbeddedBackend().measure(plan, configs, ["confirm", "confirm", "baseline"], 3)
    assert probed == [8, 16, 32, 32, 16, 8, 8, 16, 32]
    assert len(set(groups)) == 3
    for group, batches in zip(groups, ([8, 16, 32], [32, 16, 8], [8, 16, 32]), strict=True):
        trials = [t for t in plan.study.trials if t.user_attrs[Attr.GROUP] == group]
        assert [t.user_attrs[Attr.SETTINGS]["batch_size"] for t in trials] == batches
        assert all(t.state == TrialState.COMPLETE for t in trials)


def test_measured_configs_are_explored_ones_of_the_space_settled_for_good() -> None:
    space = batches_space()
    study = optuna.create_study()
    add_trial(study, config(8), value=1.0)
    add_trial(study, config(16), state=TrialState.RUNNING)  # being measured
    add_trial(study, config(32), value=1.0, role="confirm")
    add_trial(
        study, config(64), state=TrialState.FAIL, failure=Failure(kind="timeout", message="x")
    )
    add_trial(study, config(256), value=1.0)  # not a config of this space
    add_trial(study, state=TrialState.FAIL)  # no config at all
    measured = measured_keys(study.get_trials(deepcopy=False), space)
    assert measured == {config(8).key(), config(16).key()}


def test_only_configs_within_reach_of_the_best_are_proposed() -> None:
    bounds = Bounds({compute_key(config(8)): 400.0, compute_key(config(64)): 6400.0})
    configs = [config(8), config(64)]
    assert within_reach(configs, bounds, 6000.0, tolerance=0.03) == [config(64)]
    assert within_reach(configs, bounds, None, tolerance=0.03) == configs
    assert within_reach(configs, None, 6000.0, tolerance=0.03) == configs


def test_unmeasured_neighbours_of_the_best_come_first() -> None:
    proposer = UnmeasuredProposer(batches_space(), None, 0.03, seed=0)
    assert proposer.candidates(set(), near=config(16)) == [config(8), config(32)]
    measured = {config(8).key()}
    assert proposer.candidates(measured, near=config(16)) == [config(32)]


def test_without_an_unmeasured_neighbour_any_unmeasured_config_in_random_order() -> None:
    measured = {config(b).key() for b in (8, 16, 32)}
    first = UnmeasuredProposer(batches_space(), None, 0.03, seed=0)
    fresh = first.candidates(measured, near=config(16))
    assert sorted(s.batch_size for s in fresh) == [64, 128]
    assert {s.batch_size for s in first.candidates(measured, near=None)} == {64, 128}
    again = UnmeasuredProposer(batches_space(), None, 0.03, seed=0)
    assert again.candidates(measured, near=config(16)) == fresh  # seeded: repeatable
    everything = {config(b).key() for b in BATCHES}
    assert first.candidates(everything, near=config(16)) == []


def test_the_unmeasured_configs_are_drawn_in_an_order_the_seed_decides() -> None:
    def order(seed: int) -> tuple[int, ...]:
        proposer = UnmeasuredProposer(batches_space(), None, 0.03, seed)
        return tuple(s.batch_size for s in proposer.candidates({config(16).key()}, near=None))

    orders = {order(seed) for seed in range(10)}
    assert all(sorted(o) == [8, 32, 64, 128] for o in orders)
    assert len(orders) > 1  # not the space's own order every time
    assert order(3) == order(3)


def test_a_space_too_large_to_list_is_not_enumerated(monkeypatch) -> None:
    measured = {config(b).key() for b in (8, 16, 32)}
    proposer = UnmeasuredProposer(batches_space(), None, 0.03, seed=0)
    monkeypatch.setattr(repeats, "_ENUMERABLE", len(BATCHES))
    assert len(proposer.candidates(measured, near=config(16))) == 2
    monkeypatch.setattr(repeats, "_ENUMERABLE", len(BATCHES) - 1)
    assert proposer.candidates(measured, near=config(16)) == []


def queued(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.WAITING,))


def next_config(study: optuna.Study, space: Space) -> Settings:
    """The config the next trial of ``study`` runs: the first queued one, if any."""
    return space.sample(study.ask())


def test_a_neighbour_of_the_best_is_queued_in_place_of_a_repeat() -> None:
    space = batches_space()
    study = optuna.create_study(direction="maximize")
    add_trial(study, config(8), value=100.0)
    best = add_trial(study, config(16), value=200.0)
    measured = measured_keys(study.get_trials(deepcopy=False), space)
    UnmeasuredProposer(space, None, 0.03, seed=0).queue(study, measured)
    [waiting] = queued(study)
    assert waiting.user_attrs == {
        Attr.ROLE: "explore",
        Attr.PROPOSED_BY: f"neighbour of #{best.number}",
    }
    assert next_config(study, space) == config(32)


def test_nothing_is_queued_while_something_new_is_queued_already() -> None:
    space = batches_space()
    study = optuna.create_study(direction="maximize")
    add_trial(study, config(16), value=200.0)
    study.enqueue_trial(space.params(config(128)), user_attrs={Attr.ROLE: "explore"})
    UnmeasuredProposer(space, None, 0.03, seed=0).queue(study, {config(16).key()})
    assert len(queued(study)) == 1
    assert next_config(study, space) == config(128)


def test_with_no_best_yet_any_unmeasured_config_is_queued() -> None:
    space = batches_space()
    study = optuna.create_study(direction="maximize")
    add_trial(study, config(16), state=TrialState.FAIL, failure=OOM)
    UnmeasuredProposer(space, None, 0.03, seed=0).queue(study, {config(16).key()})
    [waiting] = queued(study)
    assert waiting.user_attrs[Attr.PROPOSED_BY] == "unmeasured"
    assert next_config(study, space) != config(16)


def test_nothing_out_of_reach_of_the_best_is_queued() -> None:
    space = batches_space()
    ceilings = {compute_key(config(b)): 10.0 * b for b in BATCHES}
    study = optuna.create_study(direction="maximize")
    add_trial(study, config(128), value=1200.0)
    measured = {config(128).key()}
    # The neighbour, batch 64, can reach 640 samples/s: not within 3% of 1,200.
    UnmeasuredProposer(space, Bounds(ceilings), 0.03, seed=0).queue(study, measured)
    assert queued(study) == []
    UnmeasuredProposer(space, Bounds(ceilings), 0.5, seed=0).queue(study, measured)
    assert len(queued(study)) == 1
    assert next_config(study, space) == config(64)


# ------------------------------------------------------------------ fatal failures
def ended(
    state: str = "FAIL", failure: Failure | None = None, duplicate_of: int | None = None
) -> TrialRecord:
    """A finished trial as the rules read it back."""
    return TrialRecord(
        number=0,
        state=state,
        role="explore",
        settings=None,
        value=None,
        figures=None,
        failure=failure,
        duration_s=None,
        duplicate_of=duplicate_of,
    )


def corrupt(record: int) -> Failure:
    return Failure(kind="error", message=f"ValueError: corrupt record {record}", piece="dataset")


def test_one_error_in_different_configs_has_one_signature() -> None:
    assert failure_signature(corrupt(17)) == failure_signature(corrupt(4))
    other = Failure(kind="error", message="KeyError: 'label'", piece="dataset")
    assert failure_signature(other) != failure_signature(corrupt(4))
    elsewhere = Failure(kind="error", message=corrupt(4).message, piece="collate_fn")
    assert failure_signature(elsewhere) != failure_signature(corrupt(4))


def test_only_failures_the_user_s_code_may_cause_count() -> None:
    for kind in ("error", "crash", "timeout", "shm"):
        assert counts_against_the_code(ended(failure=Failure(kind=kind, message="x")))
    for kind in ("infeasible", "interrupted", "oom"):
        assert not counts_against_the_code(ended(failure=Failure(kind=kind, message="x")))
    assert not counts_against_the_code(ended(failure=corrupt(1), duplicate_of=0))
    assert not counts_against_the_code(ended(state="COMPLETE"))


def test_the_same_failure_fatal_repeats_times_with_no_success_is_fatal() -> None:
    same = [corrupt(n) for n in range(FATAL_REPEATS + 1)]
    assert fatal_failure(0, same[: FATAL_REPEATS - 1]) is None
    assert fatal_failure(0, same[:FATAL_REPEATS]) == same[0]
    assert fatal_failure(0, same) == same[0]
    assert fatal_failure(1, same) is None  # a config that works: not the code


def test_different_failures_are_not_fatal() -> None:
    other = Failure(kind="error", message="KeyError: 'label'", piece="dataset")
    assert fatal_failure(0, [corrupt(1), corrupt(2), other]) is None
    assert fatal_failure(0, [corrupt(1), corrupt(2), other, corrupt(3)]) is None


def test_the_watch_names_the_fatal_failure_once_it_is_certain() -> None:
    watch = FailureWatch()
    for n in range(FATAL_REPEATS - 1):
        assert watch.observe(ended(failure=corrupt(n))) is None
    assert watch.observe(ended(failure=corrupt(9), duplicate_of=0)) is None  # a repeat
    assert watch.observe(ended(failure=Failure(kind="interrupted", message="x"))) is None
    assert watch.observe(ended(failure=corrupt(99))) == corrupt(0)


def test_the_watch_never_stops_a_search_where_a_config_worked() -> None:
    watch = FailureWatch()
    assert watch.observe(ended(state="PRUNED")) is None
    for n in range(FATAL_REPEATS + 2):
        assert watch.observe(ended(failure=corrupt(n))) is None


# ------------------------------------------------------------------ early stop
def test_exploration_ends_after_max_repeats_proposals_of_measured_configs() -> None:
    assert exhausted(MAX_REPEATS - 1, measured=3, size=5) is None
    assert exhausted(MAX_REPEATS, measured=3, size=5) == (
        f"the sampler proposed {MAX_REPEATS} measured configs in a row; exploration ends early"
    )


def test_exploration_ends_once_every_config_is_measured() -> None:
    assert exhausted(0, measured=4, size=5) is None
    every = "every config of the space has been measured; exploration ends early"
    assert exhausted(0, measured=5, size=5) == every
    # Both at once: the repeats say more of what happened.
    assert exhausted(MAX_REPEATS, measured=5, size=5) != every


def test_probed_trials_are_explored_ones_that_ran_their_probe() -> None:
    study = optuna.create_study()
    add_trial(study, config(8), value=1.0)
    add_trial(study, config(16), state=TrialState.PRUNED, steps={1: 1.0})
    add_trial(study, config(8), value=1.0, **{Attr.DUPLICATE_OF: 0})
    add_trial(study, config(32), state=TrialState.PRUNED, **{Attr.BOUNDED: "not run"})
    add_trial(study, config(8), value=1.0, role="confirm")
    add_trial(study, config(64), state=TrialState.FAIL, failure=OOM)
    assert probed_count(study.get_trials(deepcopy=False)) == 2


def test_exploration_ends_once_patience_trials_after_the_warm_starts_beat_nothing() -> None:
    study = optuna.create_study(direction="maximize")
    for rate in (900.0, 1000.0):  # the warm starts: the best so far, 1,000
        add_trial(study, config(8), value=rate)
    # Within the tolerance of the best, slower, a pruned one's last window, a repeat and
    # a config ruled out (neither counts): none beat 1,000 by more than 3%.
    add_trial(study, config(16), value=1020.0)
    add_trial(study, config(16), state=TrialState.PRUNED, steps={1: 700.0})
    add_trial(study, config(8), value=1200.0, **{Attr.DUPLICATE_OF: 1})
    add_trial(study, config(32), state=TrialState.PRUNED, **{Attr.BOUNDED: "not run"})
    for _ in range(PATIENCE - 3):
        add_trial(study, config(64), value=800.0)
    assert stalled(study, tolerance=0.03, warm_starts=2) is None  # one short
    add_trial(study, config(64), value=1029.0)
    assert stalled(study, tolerance=0.03, warm_starts=2) == (
        f"the last {PATIENCE} trials found no config faster than the best before them by "
        "more than the tolerance (3%): exploration ends early"
    )
    # A trial beyond the tolerance of the best starts the count again.
    add_trial(study, config(64), value=1100.0)
    assert stalled(study, tolerance=0.03, warm_starts=2) is None
    # Trials that are warm starts do not count.
    assert stalled(study, tolerance=0.03, warm_starts=len(study.trials)) is None


def test_the_ceiling_message_gives_the_best_and_the_ceiling() -> None:
    assert ceiling_message(1422.0, 1536.0, tolerance=0.05) == (
        "the best config trains 1,422 samples/s, within 10% of the most the model trains "
        "with no loader at all (1,536): exploration ends early"
    )


def test_exploration_ends_near_the_highest_ceiling_once_the_warm_starts_ran() -> None:
    bounds = Bounds({compute_key(config(8)): 500.0, compute_key(config(64)): 1000.0})
    study = optuna.create_study(direction="maximize")
    assert near_the_ceiling(study, bounds, 0.03, warm_starts=0) is None  # no best yet
    add_trial(study, config(64), value=930.0)
    assert near_the_ceiling(study, bounds, 0.03, warm_starts=1) is None  # below the band
    add_trial(study, config(64), value=950.0, role="confirm")
    assert near_the_ceiling(study, bounds, 0.03, warm_starts=1) is None  # not explored
    add_trial(study, config(16), value=950.0)
    assert near_the_ceiling(study, bounds, 0.03, warm_starts=3) is None  # a warm start to go
    reason = near_the_ceiling(study, bounds, 0.03, warm_starts=2)
    assert reason == ceiling_message(950.0, 1000.0, 0.03)
    assert near_the_ceiling(study, None, 0.03, warm_starts=0) is None


# ------------------------------------------------------------------ ASHA's rungs
def reaching(
    study: optuna.Study, value: float, windows: int = 1, *, warm_start: bool = False
) -> FrozenTrial:
    """A new trial (one of the warm starts if ``warm_start``) that reported ``value``
    after each of ``windows`` windows."""
    trial = study.ask()
    if warm_start:
        trial.set_user_attr(Attr.PROPOSED_BY, WARM_START)
    for step in range(1, windows + 1):
        trial.report(value, step)
    return study._storage.get_trial(trial._trial_id)


def test_a_trial_at_a_rung_competes_with_the_trials_already_in_the_study() -> None:
    # An earlier search (resumed now, or run on the other backend) left its windows.
    study = optuna.create_study(direction="maximize")
    for value in (100, 200, 300, 400, 500):
        add_trial(study, state=TrialState.PRUNED, steps={1: value, 2: value, 3: value})
    rungs = StudyRungs(min_windows=1, reduction_factor=3, max_windows=9)
    fresh = optuna.create_study(direction="maximize")
    assert not rungs.prune(fresh, reaching(fresh, 350))  # alone, it would be the best
    assert rungs.prune(study, reaching(study, 350))  # 6 at the rung: 400 and 500 go on
    assert not rungs.prune(study, reaching(study, 500))  # the trials running compete too
    # Judged at the rungs only (1, 3, 9 windows), not in between.
    assert not rungs.prune(study, reaching(study, 1, windows=2))
    assert rungs.prune(study, reaching(study, 1, windows=3))


def test_a_warm_start_is_judged_from_the_second_rung_on() -> None:
    # compute-bound seed 1 (9e320ec) pruned its warm start without workers after one
    # window at 2,248 samples/s, where the model alone measured 3,432: the grid's best.
    study = optuna.create_study(direction="maximize")
    for value in (400, 500, 600):
        add_trial(study, state=TrialState.PRUNED, steps={1: value, 2: value, 3: value})
    rungs = StudyRungs(min_windows=1, reduction_factor=3, max_windows=9)
    assert rungs.prune(study, reaching(study, 100))  # sampled: judged on its first window
    slow_start = reaching(study, 100, warm_start=True)
    assert not rungs.prune(study, slow_start)  # a warm start goes on to the next rung
    # Its first window still counts at the first rung: with it, six values there, so the
    # best two go on (600 and 550); without it, five, and only the best one would.
    assert not rungs.prune(study, reaching(study, 550))
    assert rungs.prune(study, reaching(study, 100, windows=3, warm_start=True))  # judged
    assert not rungs.prune(study, reaching(study, 700, windows=3, warm_start=True))
    # A warm start whose window measured nothing stops at once.
    assert rungs.prune(study, reaching(study, float("nan"), warm_start=True))


def test_warm_starts_are_queued_as_such_the_first_time_a_study_explores() -> None:
    study = optuna.create_study(direction="maximize")
    plan = dataclasses.replace(explore_plan(study), warm_starts=(config(8),))
    enqueue_warm_starts(plan)
    (waiting,) = study.get_trials(states=(TrialState.WAITING,))
    assert waiting.user_attrs == {Attr.ROLE: "explore", Attr.PROPOSED_BY: WARM_START}
    enqueue_warm_starts(plan)  # the study has trials: nothing queued again
    assert len(study.trials) == 1


def test_a_trial_that_ran_every_window_is_not_pruned_at_the_last_one() -> None:
    # cpu-decode seed 1 (c1fbf4a): 777 samples/s over all 9 windows, "pruned after 9
    # windows", so not among the configs measured in full.
    study = optuna.create_study(direction="maximize")
    for value in (700, 800, 900):
        add_trial(study, value=value, steps={1: value, 3: value, 9: value})
    assert StudyRungs(1, 3, max_windows=27).prune(study, reaching(study, 600, windows=9))
    assert not StudyRungs(1, 3, max_windows=9).prune(study, reaching(study, 600, windows=9))
    assert StudyRungs(1, 3, max_windows=9).prune(study, reaching(study, 600, windows=3))
    assert StudyRungs(1, 3, max_windows=9).prune(study, reaching(study, float("nan"), 9))


def test_repeats_and_given_configs_do_not_compete_at_the_rungs() -> None:
    study = optuna.create_study(direction="maximize")
    add_trial(study, role="confirm", value=1000, steps={1: 1000})
    add_trial(study, value=1000, steps={1: 1000}, **{Attr.DUPLICATE_OF: 0})
    assert not StudyRungs(1, 3, 9).prune(study, reaching(study, 100))


# ------------------------------------------------------------------ the rules together
class Lines(QuietProgress):
    """Keeps the lines a search would show."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def message(self, text: str) -> None:
        self.lines.append(text)


def explore_plan(
    study: optuna.Study, space: Space | None = None, bounds: Bounds | None = None
) -> ExplorePlan:
    return ExplorePlan(
        study=study,
        space=space or batches_space(),
        template=ProbeRequest(source=WorkloadSource(), settings=config(8), device="cpu"),
        warm_starts=(),
        options=SearchOptions(seed=0),
        progress=Lines(),
        bounds=bounds,
    )


def ran(samples_per_s: int) -> Callable[[Settings], ProbeResult]:
    return lambda settings: ProbeResult(figures=figures(samples_per_s))


def failed(failure: Failure) -> Callable[[Settings], ProbeResult]:
    return lambda settings: ProbeResult(figures=Figures(), failure=failure)


def not_probed(settings: Settings) -> ProbeResult:
    raise AssertionError(f"{settings} was probed; the rules should have settled it")


def run_trial(
    rules: TrialRules,
    settings: Settings,
    probe: Callable[[Settings], ProbeResult],
    role: str = "explore",
) -> tuple[FrozenTrial, bool]:
    """One trial of ``settings`` through the rules, as a backend runs it; the trial as
    told, and whether exploration must stop."""
    study = rules.plan.study
    if role == "explore":
        for _ in queued(study):  # a proposal the rules queued: the test chooses instead
            study.tell(study.ask(), state=TrialState.FAIL)
        study.enqueue_trial(rules.plan.space.params(settings), user_attrs={Attr.ROLE: role})
        trial = study.ask()
    else:
        trial = fixed_trial(study, {Attr.ROLE: role, Attr.SETTINGS: settings.to_dict()})
    role, proposed = rules.begin(trial)
    assert proposed == settings
    outcome = rules.settled(trial, proposed, role)
    if outcome is None:
        outcome = rules.conclude(trial, proposed, probe(proposed))
    value = outcome.value if outcome.state == TrialState.COMPLETE else None
    frozen = study.tell(trial, value, state=outcome.state)
    return frozen, rules.after(study, frozen)


def test_a_repeat_is_settled_unprobed_and_an_unmeasured_neighbour_queued() -> None:
    rules = TrialRules(
        explore_plan(optuna.create_study(direction="maximize")), exploring=True, backend="optuna"
    )
    first, _ = run_trial(rules, config(16), ran(200))
    again, stop = run_trial(rules, config(16), not_probed)
    assert (again.state, again.value) == (TrialState.COMPLETE, 200.0)
    assert again.user_attrs[Attr.DUPLICATE_OF] == first.number
    assert again.user_attrs[Attr.BACKEND] == "optuna"
    assert not stop
    [waiting] = queued(rules.plan.study)
    assert waiting.user_attrs[Attr.PROPOSED_BY] == f"neighbour of #{first.number}"


def test_out_of_memory_rules_out_larger_batches_then_and_after_a_restart() -> None:
    study = optuna.create_study(direction="maximize")
    rules = TrialRules(explore_plan(study), exploring=True, backend="optuna")
    oom, _ = run_trial(rules, config(32), failed(OOM))
    assert oom.state == TrialState.FAIL and oom.user_attrs[Attr.FAILURE]["kind"] == "oom"
    # The same config again is ruled out (not a repeat of the failure): out of memory
    # comes first.
    same, _ = run_trial(rules, config(32), not_probed)
    assert same.user_attrs[Attr.FAILURE]["kind"] == "infeasible"
    assert Attr.DUPLICATE_OF not in same.user_attrs
    resumed = TrialRules(explore_plan(study), exploring=True, backend="ray")
    larger, _ = run_trial(resumed, config(64), not_probed)
    assert larger.user_attrs[Attr.FAILURE]["message"] == (
        f"not run: batch 64 > batch 32, which ran out of memory with the same settings in "
        f"trial #{oom.number}"
    )
    smaller, _ = run_trial(resumed, config(16), ran(100))
    assert smaller.state == TrialState.COMPLETE


def test_a_config_out_of_reach_is_pruned_unprobed_unless_it_is_to_be_measured() -> None:
    bounds = Bounds({compute_key(config(b)): 10.0 * b for b in BATCHES})
    study = optuna.create_study(direction="maximize")
    rules = TrialRules(explore_plan(study, bounds=bounds), exploring=True, backend="optuna")
    run_trial(rules, config(128), ran(1200))
    slow, _ = run_trial(rules, config(8), not_probed)
    assert slow.state == TrialState.PRUNED
    assert slow.user_attrs[Attr.BOUNDED].startswith("not run: the model alone trains 80")
    confirm, _ = run_trial(rules, config(8), ran(70), role="confirm")
    assert confirm.state == TrialState.COMPLETE and Attr.BOUNDED not in confirm.user_attrs


def test_shared_memory_is_checked_only_where_the_probes_run(monkeypatch) -> None:
    user = {
        "batch_size": 8,
        "num_workers": 1,
        "prefetch_factor": 2,
        "threads": 1,
        "worker_threads": 1,
    }
    space = build_space({**user, "persistent_workers": False, "amp": "off"}, MACHINE, 8)
    settings = Settings(**user)
    monkeypatch.setattr(rules_module, "free_shm_bytes", lambda: 2**20)
    for backend, kind in (("optuna", "shm"), ("ray", None)):
        study = optuna.create_study(direction="maximize")
        study.set_user_attr(Attr.META, {"workload": {"batch_bytes": 2**20, "batch_samples": 8}})
        rules = TrialRules(explore_plan(study, space), exploring=True, backend=backend)
        trial, _ = run_trial(rules, settings, ran(100))
        assert (trial.user_attrs.get(Attr.FAILURE) or {}).get("kind") == kind


def test_a_failure_every_config_shares_stops_exploring_with_it() -> None:
    rules = TrialRules(explore_plan(optuna.create_study()), exploring=True, backend="optuna")
    stops = [run_trial(rules, config(b), failed(corrupt(b)))[1] for b in BATCHES[:FATAL_REPEATS]]
    assert stops == [False] * (FATAL_REPEATS - 1) + [True]
    assert rules.plan.fatal == corrupt(BATCHES[0])


def test_measuring_given_configs_never_stops_early_nor_reuses_a_measure() -> None:
    rules = TrialRules(explore_plan(optuna.create_study()), exploring=False, backend="optuna")
    for batch in BATCHES[:FATAL_REPEATS]:
        _, stop = run_trial(rules, config(batch), failed(corrupt(batch)), role="confirm")
        assert not stop
    assert rules.plan.fatal is None
    trial, _ = run_trial(rules, config(8), ran(100), role="confirm")
    assert trial.state == TrialState.COMPLETE and Attr.DUPLICATE_OF not in trial.user_attrs


def test_exploration_stops_once_every_config_is_measured() -> None:
    rules = TrialRules(explore_plan(optuna.create_study()), exploring=True, backend="optuna")
    stops = [run_trial(rules, config(b), ran(10 * b))[1] for b in BATCHES]
    assert stops == [False] * (len(BATCHES) - 1) + [True]
    assert rules.plan.progress.lines == [
        "every config of the space has been measured; exploration ends early"
    ]
