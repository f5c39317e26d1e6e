"""Hangs in DataLoader workers: what proves them, the region they rule out, and the
rules that then keep every backend and the confirming rounds from waiting them out
again; on in-memory studies, no probe runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState

from autotune.explore import (
    Bounds,
    ExplorePlan,
    WorkerRange,
    _worker_range,
    compute_key,
    measure_worker_range,
    worker_hang,
)
from autotune.explore._hangs import HUNG_CONFIGS, HangWatch, WorkerHang
from autotune.explore._rules import TrialRules
from autotune.explore._trials import fixed_trial, group_attrs
from autotune.machine import Machine
from autotune.probe import Failure, Figures, ProbeRequest, ProbeResult, Window, WorkloadSource
from autotune.progress import QuietProgress
from autotune.settings import Settings
from autotune.space import Choices, Domain, Fixed, IntRange, Space, build_space
from autotune.study import Attr, TrialRecord
from autotune.workload import SearchOptions

MACHINE = Machine(cpus=2, cpu_model="t", memory_bytes=2**33, shm_bytes=2**30, accelerator="cpu")
STALL = "no first batch within 60 s"
HUNG = Failure(kind="timeout", message=f"{STALL}: the dataset, collate_fn or a worker hangs")


class Lines(QuietProgress):
    """Keeps the lines a search would show."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def message(self, text: str) -> None:
        self.lines.append(text)


def workers_space(num_workers: Domain | None = None) -> Space:
    """Configs that differ in their workers (``num_workers``) and batch size."""
    user = {
        "num_workers": [0, 4],
        "batch_size": [8, 16],
        "prefetch_factor": 2,
        "persistent_workers": False,
        "worker_threads": 1,
        "threads": 1,
        "amp": "off",
    }
    space = build_space(user, MACHINE, batch_size=8)
    return dataclasses.replace(space, num_workers=num_workers or space.num_workers)


def loader(workers: int, batch: int = 8) -> Settings:
    """A config of :func:`workers_space` with ``workers`` workers."""
    if workers == 0:
        return Settings(batch_size=batch, threads=1)
    return Settings(
        batch_size=batch, num_workers=workers, prefetch_factor=2, worker_threads=1, threads=1
    )


def record(number: int, settings: Settings, failure: Failure | None = None) -> TrialRecord:
    """A probed trial as the rules read it back: failed with ``failure``, else complete."""
    return TrialRecord(
        number=number,
        state="FAIL" if failure else "COMPLETE",
        role="explore",
        settings=settings,
        value=None if failure else 100.0,
        figures=None,
        failure=failure,
        duration_s=None,
    )


# ------------------------------------------------------------------ the evidence
def test_two_configs_with_workers_that_hung_rule_out_every_config_with_workers() -> None:
    watch = HangWatch()
    assert watch.observe(record(0, loader(2), HUNG)) is None
    found = watch.observe(record(1, loader(1, batch=16), HUNG))
    assert found == WorkerHang(workers=1, trials=(0, 1), stall=STALL)
    assert watch.found == found and HUNG_CONFIGS == 2
    assert found.ruling(workers_space()) == (
        "trials #0 and #1 hung in DataLoader workers (no first batch within 60 s) and no "
        "config with as many workers delivered a batch: configs with workers would hang the "
        "same way, so the search goes on without workers"
    )
    assert found.blocks(loader(4)) == Failure(
        kind="infeasible",
        message="not run: trials #0 and #1 hung in DataLoader workers (no first batch within 60 s)",
    )
    assert found.blocks(loader(0)) is None
    assert watch.observe(record(2, loader(4), HUNG)) is not None  # a new list of trials


@pytest.mark.parametrize(
    "failures",
    [
        [(loader(2), HUNG)],  # a one-off: one slow start-up times out too
        [(loader(2), HUNG), (loader(2), HUNG)],  # one config, twice
        [(loader(0), HUNG), (loader(2), HUNG)],  # without workers: not the workers
        [(loader(2), HUNG), (loader(4), Failure(kind="error", message="ValueError: x"))],
    ],
    ids=["one-hang", "one-config-twice", "one-without-workers", "another-failure"],
)
def test_anything_less_rules_out_nothing(failures: list[tuple[Settings, Failure]]) -> None:
    watch = HangWatch()
    for number, (settings, failure) in enumerate(failures):
        assert watch.observe(record(number, settings, failure)) is None
    assert watch.found is None


def test_a_config_with_as_many_workers_that_delivered_keeps_the_region_open() -> None:
    watch = HangWatch()
    watch.observe(record(0, loader(2)))
    watch.observe(record(1, loader(2, batch=16), HUNG))
    assert watch.observe(record(2, loader(4), HUNG)) is None
    # Fewer workers that delivered say nothing of more: the region starts above them.
    watch = HangWatch()
    watch.observe(record(0, loader(1)))
    watch.observe(record(1, loader(2), HUNG))
    found = watch.observe(record(2, loader(4), HUNG))
    assert found is not None and found.workers == 2
    space = workers_space(IntRange(0, 4))
    assert found.region(space) == "configs with 2 or more workers"
    assert found.ruling(space).endswith("so the search goes on with at most 1 worker")
    assert found.region(workers_space(Choices((0, 2, 4)))) == "configs with workers"
    assert found.blocks(loader(1)) is None and found.blocks(loader(2)) is not None


def test_only_probes_that_ran_count() -> None:
    watch = HangWatch()
    watch.observe(record(0, loader(1), HUNG))
    repeat = record(1, loader(2), HUNG)
    assert watch.observe(dataclasses.replace(repeat, duplicate_of=0)) is None
    ruled_out = Failure(kind="infeasible", message="not run")
    assert watch.observe(record(2, loader(4), ruled_out)) is None
    assert watch.found is None


@pytest.mark.parametrize(
    ("domain", "workers", "left"),
    [
        (IntRange(0, 8), 1, Fixed(0)),
        (IntRange(0, 8), 3, IntRange(0, 2)),
        (Choices((0, 2, 4, 8)), 4, Choices((0, 2))),
        (Choices((2, 4)), 4, Fixed(2)),
        (Choices((2, 4)), 2, None),
        (Fixed(4), 1, None),
    ],
)
def test_the_space_is_narrowed_to_fewer_workers(domain, workers, left) -> None:
    hang = WorkerHang(workers=workers, trials=(0, 1), stall=STALL)
    narrowed = hang.narrow(workers_space(domain))
    assert (narrowed.num_workers if narrowed else None) == left


# ------------------------------------------------------------------ the rules, on every backend
def explore_plan(study: optuna.Study, space: Space) -> ExplorePlan:
    return ExplorePlan(
        study=study,
        space=space,
        template=ProbeRequest(source=WorkloadSource(), settings=loader(0), device="cpu"),
        warm_starts=(),
        options=SearchOptions(seed=0),
        progress=Lines(),
    )


def ran(settings: Settings) -> ProbeResult:
    window = Window(index=0, seconds=1.0, samples=100, fresh=100, steps=1, wait_seconds=0.0)
    return ProbeResult(figures=Figures(windows=(window,)))


def hung(settings: Settings) -> ProbeResult:
    return ProbeResult(figures=Figures(), failure=HUNG)


def not_probed(settings: Settings) -> ProbeResult:
    raise AssertionError(f"{settings} was probed; the rules should have settled it")


def run_trial(
    rules: TrialRules,
    settings: Settings,
    probe: Callable[[Settings], ProbeResult],
    attrs: dict[str, object] | None = None,
) -> tuple[FrozenTrial, Settings, bool]:
    """One trial through the rules, as a backend runs it: proposed with ``settings``'s
    parameters when exploring (the rules may sample another config), else given with
    ``attrs``; the trial as told, the config it ran, and whether exploration must stop."""
    study = rules.plan.study
    if attrs is None:
        for _ in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            study.tell(study.ask(), state=TrialState.FAIL)  # the test proposes instead
        study.enqueue_trial(rules.plan.space.params(settings), user_attrs={Attr.ROLE: "explore"})
        trial = study.ask()
    else:
        trial = fixed_trial(study, attrs)
    role, proposed = rules.begin(trial)
    outcome = rules.settled(trial, proposed, role)
    if outcome is None:
        outcome = rules.conclude(trial, proposed, probe(proposed))
    value = outcome.value if outcome.state == TrialState.COMPLETE else None
    frozen = study.tell(trial, value, state=outcome.state)
    return frozen, proposed, rules.after(study, frozen)


@pytest.mark.parametrize("backend", ["optuna", "ray"])
def test_exploration_goes_on_without_workers_and_a_restart_knows_why(backend) -> None:
    study = optuna.create_study(direction="maximize")
    rules = TrialRules(explore_plan(study, workers_space()), exploring=True, backend=backend)
    assert not run_trial(rules, loader(4), hung)[2]
    assert not run_trial(rules, loader(4, batch=16), hung)[2]
    assert rules.plan.progress.lines == [
        "trials #0 and #1 hung in DataLoader workers (no first batch within 60 s) and no "
        "config with as many workers delivered a batch: configs with workers would hang the "
        "same way, so the search goes on without workers"
    ]
    assert rules.plan.fatal is None
    # The sampler proposes from the rest of the space; a config given with workers (a
    # warm start queued before) is not run.
    _, proposed, _ = run_trial(rules, loader(4), ran)
    assert proposed.num_workers == 0
    resumed = TrialRules(explore_plan(study, workers_space()), exploring=True, backend=backend)
    assert resumed.space.num_workers == Fixed(0)
    given = fixed_trial(study, {Attr.ROLE: "explore", Attr.SETTINGS: loader(4).to_dict()})
    outcome = resumed.settled(given, loader(4), "explore")
    assert outcome is not None and outcome.state == TrialState.FAIL
    assert given.user_attrs[Attr.FAILURE]["kind"] == "infeasible"
    assert worker_hang(study) == WorkerHang(workers=4, trials=(0, 1), stall=STALL)


def test_when_the_rest_hangs_too_every_config_failed_the_same_way() -> None:
    rules = TrialRules(
        explore_plan(optuna.create_study(), workers_space()), exploring=True, backend="optuna"
    )
    run_trial(rules, loader(4), hung)
    run_trial(rules, loader(4, batch=16), hung)
    _, proposed, stop = run_trial(rules, loader(0), hung)
    assert proposed.num_workers == 0 and stop
    assert rules.plan.fatal == HUNG


def test_a_space_with_nothing_but_configs_that_hang_ends_with_one_error() -> None:
    plan = explore_plan(optuna.create_study(), workers_space(Choices((2, 4))))
    rules = TrialRules(plan, exploring=True, backend="ray")
    assert not run_trial(rules, loader(4), hung)[2]
    assert run_trial(rules, loader(2), hung)[2]
    assert rules.plan.fatal == Failure(
        kind="timeout",
        message=(
            "trials #0 and #1 hung in DataLoader workers (no first batch within 60 s), and "
            "so would every config of the space: let it try fewer workers "
            "(space['num_workers']), or find what blocks in a worker (a lock, a connection "
            "or a thread pool made before the fork)"
        ),
    )


def test_a_finalist_that_failed_in_a_confirming_round_is_not_measured_again() -> None:
    study = optuna.create_study(direction="maximize")
    rules = TrialRules(explore_plan(study, workers_space()), exploring=False, backend="optuna")
    order = [loader(0), loader(4), loader(2)]
    roles = ["baseline", "confirm", "confirm"]
    rounds = [group_attrs(order, roles, number)[1] for number in (1, 2)]
    ends = {}
    for number, round_attrs in enumerate(rounds):
        for attrs in round_attrs:
            settings = Settings.from_dict(attrs[Attr.SETTINGS])
            probe = hung if settings.num_workers == 4 or number else ran
            if number and settings.num_workers == 4:
                probe = not_probed
            trial, _, stop = run_trial(rules, settings, probe, attrs)
            assert not stop
            ends[(number, settings.num_workers)] = trial.user_attrs.get(Attr.FAILURE, {})
    assert ends[(0, 4)]["kind"] == "timeout"
    assert ends[(1, 4)] == {
        "kind": "infeasible",
        "message": (
            "not run: it failed in an earlier confirming round (trial #1), and a finalist "
            "with a failed round is not chosen"
        ),
        "piece": None,
        "traceback": None,
    }
    # The default loader, and a finalist that failed only now, are measured as usual.
    assert ends[(1, 0)]["kind"] == "timeout" and ends[(1, 2)]["kind"] == "timeout"


def test_the_loader_alone_hanging_before_exploring_is_one_config_that_hung(monkeypatch) -> None:
    monkeypatch.setattr(_worker_range, "run_probe", hung)
    study = optuna.create_study(direction="maximize")
    space = workers_space(IntRange(0, 4))
    bounds = Bounds({compute_key(loader(0)): 1000.0}, {compute_key(loader(0)): loader(0)})
    template = ProbeRequest(source=WorkloadSource(), settings=loader(0), device="cpu")
    _, found = measure_worker_range(template, space, bounds, study, Lines())
    assert found.hung == {4: STALL}
    assert WorkerRange.from_dict(found.to_dict()) == found
    assert worker_hang(study) is None  # one hang alone proves nothing
    rules = TrialRules(explore_plan(study, space), exploring=True, backend="optuna")
    run_trial(rules, loader(2), hung)
    assert rules.hangs.found == WorkerHang(workers=2, trials=(0,), stall=STALL, loader_alone=(4,))
    assert rules.plan.progress.lines == [
        "the loader alone with 4 workers and trial #0 hung in DataLoader workers (no first "
        "batch within 60 s) and no config with as many workers delivered a batch: configs "
        "with 2 or more workers would hang the same way, so the search goes on with at most 1 "
        "worker"
    ]


def test_a_worker_range_stored_before_hangs_were_kept_reads_back_without_any() -> None:
    stored = {"rates": {"8": 1000.0}, "bound": 8, "ceiling": 5000.0}
    assert WorkerRange.from_dict(stored) == WorkerRange({8: 1000.0}, 8, 5000.0)


def test_the_ray_driver_proposes_without_workers_once_they_hung() -> None:
    pytest.importorskip("ray")
    from ray.tune.search.optuna.optuna_search import _OptunaTrialSuggestCaptor

    from autotune.explore._ray_driver import TrialBook
    from autotune.explore._ray_worker import NUMBER_KEY, SETTINGS_KEY

    study = optuna.create_study(direction="maximize")
    book = TrialBook(explore_plan(study, workers_space()), exploring=True, count=4, timeout=None)

    def propose(settings: Settings, tune_id: str) -> Settings:
        """As OptunaSearch asks the book (define-by-run), ``settings`` queued first."""
        study.enqueue_trial(book.plan.space.params(settings))
        config = book.propose(_OptunaTrialSuggestCaptor(study.ask()))
        assert not book.settle(config[NUMBER_KEY])
        book.attach(config[NUMBER_KEY], tune_id)
        return Settings.from_dict(config[SETTINGS_KEY])

    for batch in (8, 16):
        assert propose(loader(4, batch), f"tune-{batch}").num_workers == 4
        book.reported(f"tune-{batch}", {"figures": Figures().to_dict(), "failure": HUNG.to_dict()})
        book.ended(f"tune-{batch}")
    assert book.plan.progress.lines[-1].endswith("so the search goes on without workers")
    assert propose(loader(4), "tune-next").num_workers == 0 and not book.stopping
    book.close()
