"""A search, stage by stage: preflight, explore, confirm, choose, save.

Workload -> Space -> Backend (probes, pruned by ASHA) -> Study -> SearchResult
"""

from __future__ import annotations

import dataclasses
import pickle
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import optuna
import psutil

from autotune._errors import StudyError, WorkloadError
from autotune._format import format_rate
from autotune.decide import (
    Ceilings,
    Confirmed,
    after_ddp,
    confirm,
    earlier_answer,
    explored_candidates,
    measure_ceilings,
    near_ceiling,
    planned_probes,
    recheck,
    round_configs,
    round_length,
    run_ddp_stage,
)
from autotune.explore import (
    Backend,
    Bounds,
    ExplorePlan,
    WorkerRange,
    get_backend,
    measure_bounds,
    measure_worker_range,
    sweepable,
    worker_hang,
)
from autotune.machine import Machine
from autotune.pipeline._budget import Deadline, start_budget
from autotune.pipeline._setup import Setup, inputs, prepare
from autotune.pipeline._starts import record_start, warm_from_studies
from autotune.probe import (
    Failure,
    Placement,
    ProbeRequest,
    WorkloadSource,
    refuse_while_bootstrapping,
    run_probe,
    start_probe_server,
)
from autotune.progress import Progress, QuietProgress, StageClock
from autotune.result import BudgetPlan, DdpResult, SearchResult
from autotune.settings import Settings
from autotune.space import Space, default_max_workers, fit_to_step
from autotune.study import (
    META,
    RESULT,
    StudyLocation,
    check_same_workload,
    open_study,
    read_meta,
    settle,
    storage_errors,
    study_meta,
)
from autotune.workload import MEMORY_SHARE, SearchOptions, Workload

_CEILING_PROBES = 5
"""At most: compute and data of the winner and of the default loader, and the loader limit."""


def search(
    config: str | Path | None = None,
    *,
    dataset: Any = None,
    model: Any = None,
    loss: Callable[[Any, Any], Any] | None = None,
    optimizer: Callable[[Any], Any] | None = None,
    step: Callable[[Any, Any], Any] | None = None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    batch_size: int | None = None,
    device: str | None = None,
    name: str | None = None,
    space: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
    **options: Any,
) -> SearchResult:
    """Tune a DataLoader by measuring short real trainings, and return the best settings.

    Give either a config file, or ``dataset`` and ``model`` (factories or objects)
    with the optional pieces a config file may define.

    Args:
        config: path of a config file (see the README's config contract).
        dataset: a Dataset, or a function returning one.
        model: an nn.Module, or a function returning one (each trial gets its own).
        loss: ``loss(output, batch)`` -> scalar tensor.
        optimizer: ``optimizer(params)`` -> Optimizer; default SGD.
        step: ``step(model, batch)`` -> loss, for models with several inputs.
        collate_fn: handed to the DataLoader as given.
        batch_size: the batch size trained with today (default 32).
        device: "cpu", "cuda", ...; default a GPU when there is one.
        name: names the study by default.
        space: knobs to fix or narrow (``{"num_workers": [0, 2, 4], "echo": [1, 2]}``).
        progress: receives the search's events; default silent.
        **options: :class:`SearchOptions` fields (trials, timeout, study, seed, ...;
            ``backend="ray"`` with ``address`` and ``concurrent`` runs the trials on Ray Tune).

    Returns:
        The chosen settings, their figures, and ``.loader(dataset)``.

    Raises:
        ConfigError: the config or the arguments are wrong.
        WorkloadError: the dataset, model, loss or step fails.
        StudyError: the study cannot be opened or does not match this workload.
    """
    refuse_while_bootstrapping()  # before the study is touched
    workload, user_space, search_options = inputs(
        config,
        dataset=dataset,
        model=model,
        loss=loss,
        optimizer=optimizer,
        step=step,
        collate_fn=collate_fn,
        batch_size=batch_size,
        device=device,
        name=name,
        space=space,
        options=options,
    )
    return run_search(
        workload,
        user_space,
        search_options,
        progress=progress or QuietProgress(),
    )


def run_search(
    workload: Workload,
    user_space: Mapping[str, Any],
    options: SearchOptions,
    *,
    progress: Progress,
) -> SearchResult:
    """Run every stage of a search for an already-validated workload, timing each by the
    phases it announces (the result's ``search_time``)."""
    started = time.monotonic()
    clock = StageClock(progress)
    setup = prepare(workload, user_space, options)
    runner = get_backend(options.backend)
    try:
        with storage_errors(setup.study):
            result = _run_stages(workload, user_space, options, setup, clock, runner, started)
    finally:
        runner.close()
    settle(setup.study)
    return result


def _run_stages(
    workload: Workload,
    user_space: Mapping[str, Any],
    options: SearchOptions,
    setup: Setup,
    progress: StageClock,
    runner: Backend,
    started: float,
) -> SearchResult:
    placement, machine, device, space = setup.placement, setup.machine, setup.device, setup.space
    where = setup.study
    if options.resume and not where.exists():
        raise StudyError(f"--resume: there is no study at {where} to continue.")
    baseline = Settings(batch_size=workload.batch_size)
    template = _template(workload, options, device, placement.ranks)
    slots = placement.slots()
    single = slots[0].apply(template)  # one rank's share of the node
    study = open_study(where, create=not options.resume)
    meta = read_meta(study)

    progress.phase("preflight", f"one training step of the default loader on {device}")
    info, probe_start_s = preflight(single, workload)
    check_same_workload(meta, machine, info, where, placement)
    space = fit_to_step(space, user_space, info.get("step_cpu_share"))
    if not meta:
        study.set_user_attr(
            META, study_meta(workload, machine, device, space, options, info, placement)
        )
    options, deadline = start_budget(
        options,
        started=started,
        probe_start_s=probe_start_s,
        info=info,
        space=space,
        user_space=user_space,
        study=study,
        slots=len(slots),
        ranks=placement.ranks,
        progress=progress,
    )
    bounds, compute_figures = (
        measure_bounds(single, space, study, progress) if options.bounds else (None, {})
    )
    worker_range: WorkerRange | None = None
    if bounds is not None and sweepable(space, user_space, bounds):
        space, worker_range = measure_worker_range(single, space, bounds, study, progress)
    most_workers = max(
        default_max_workers(placement.rank_cpus), worker_range.bound if worker_range else 0
    )
    ceiling_probes = _CEILING_PROBES if options.ceilings else 0
    batch_sizes = _batch_sizes(space)
    ddp_probes = (
        planned_probes(info, options, options.finalists, batches=len(batch_sizes) > 1)
        if placement.ranks > 1
        else 0
    )
    plan = ExplorePlan(
        study=study,
        space=space,
        template=single if len(slots) == 1 else template,
        warm_starts=_seeds(options, study, where, info, machine, space, progress)
        + warm_starts(
            space,
            machine,
            workload.batch_size,
            cpus=placement.rank_cpus,
            leading_model=_leading_model(bounds, worker_range),
            wide_workers=worker_range.widened() if worker_range is not None else None,
            loader_workers=worker_range.fastest() if worker_range is not None else None,
        ),
        options=options,
        progress=progress,
        bounds=bounds,
        slots=slots if len(slots) > 1 else (),
    )
    held = _recheck(
        runner, plan, baseline, progress, info=info, workload=workload, budget=deadline.plan
    )
    if held is not None:
        return held
    confirmed = near_ceiling(runner, plan, baseline, info, progress) if len(slots) == 1 else None
    if confirmed is None:
        confirmed = _explore_and_confirm(
            runner,
            plan,
            workload,
            where,
            placement,
            baseline,
            deadline,
            info=info,
            later=ddp_probes + ceiling_probes,
        )
    options = plan.options
    winner = confirmed.winner

    ddp: DdpResult | None = None
    if placement.ranks > 1:
        winner, ddp = run_ddp_stage(
            placement=placement,
            template=template,
            winner=winner,
            finalists=list(confirmed.finalists),
            info=info,
            options=deadline.ddp(options, progress),
            progress=progress,
            user_batch_size=workload.batch_size,
            batch_sizes=batch_sizes,
            later=ceiling_probes,
        )
        confirmed, winner, ddp = after_ddp(confirmed, winner, ddp)
    hang = worker_hang(study)
    if hang is not None:  # the loader alone with as many workers would hang the same way
        most_workers = min(most_workers, hang.workers - 1)
    ceilings = (
        measure_ceilings(
            single,
            winner.settings,
            baseline,
            most_workers,
            progress,
            compute_figures,
            default_threads=info.get("torch_threads"),
        )
        if deadline.keeps_ceilings(options, progress)
        else Ceilings(winner={}, baseline={}, loader_limit=None)
    )
    result = SearchResult(
        settings=winner.settings,
        figures=winner.figures,
        device=device,
        machine=machine,
        ceilings=ceilings.winner,
        baseline_ceilings=ceilings.baseline,
        loader_limit=ceilings.loader_limit,
        tolerance=options.tolerance,
        user_batch_size=workload.batch_size,
        space=space.to_dict(),
        workload=info,
        study_path=str(where),
        study_name=study.study_name,
        collate_fn=workload.collate_fn,
        ddp=ddp,
        search_time=progress.stop(continued=bool(meta)),
        budget=deadline.plan,
        **confirmed.confirmation(),
    )
    study.set_user_attr(RESULT, result.to_dict())
    progress.phase("done", _summary(result))
    return result


# --------------------------------------------------------------------- stages
def _explore_and_confirm(
    runner: Backend,
    plan: ExplorePlan,
    workload: Workload,
    where: StudyLocation,
    placement: Placement,
    baseline: Settings,
    deadline: Deadline,
    *,
    info: Mapping[str, Any],
    later: int,
) -> Confirmed:
    """Explore the space, then confirm the finalists beside the default loader, each
    stage with the options the budget leaves it; ``later``: the probes to come after."""
    options = plan.options = deadline.exploring(plan.options, plan.progress)
    # Later: the finalists and the default loader re-measured (the default beside every
    # two; a runoff, when one runs, is counted once it starts), the DDP probes, the ceilings.
    coming = round_length(options.finalists) * options.rounds + later
    _explore(runner, plan, workload, where, placement, later=coming)
    explored = explored_candidates(plan.study, plan.space)
    if not explored:
        raise WorkloadError(
            f"{workload.origin()}: no config finished a probe; see the failures with "
            f"`autotune show {where}`."
        )
    plan.options = deadline.confirming(
        options, round_configs(plan, explored, baseline, info.get("torch_threads")), plan.progress
    )
    return confirm(
        runner,
        plan,
        explored,
        baseline,
        plan.progress,
        later=later,
        default_threads=info.get("torch_threads"),
    )


def _explore(
    runner: Backend,
    plan: ExplorePlan,
    workload: Workload,
    where: StudyLocation,
    placement: Placement,
    *,
    later: int,
) -> None:
    """Announce the exploration and run it; raises WorkloadError when every config failed
    the same way."""
    options, space = plan.options, plan.space
    parallel = f"; {len(plan.slots)} at a time, {placement.describe()}" if plan.slots else ""
    plan.progress.phase(
        "explore",
        f"{options.trials} trials into {where} (space of {space.size()} configs{parallel}; "
        + "; ".join(space.notes)
        + ")",
    )
    plan.progress.plan("explore", options.trials, options.timeout, later=later)
    runner.explore(plan)
    if plan.fatal is not None:
        raise WorkloadError(_workload_message(workload, plan.fatal, every_config=True))


def _seeds(
    options: SearchOptions,
    study: optuna.Study,
    where: StudyLocation,
    info: dict[str, Any],
    machine: Machine,
    space: Space,
    progress: Progress,
) -> tuple[Settings, ...]:
    """The finalists of the earlier studies ``options.warm_from`` names (by default the
    other studies in the same storage) to try first, each study's line said and those
    that lent configs recorded in the study."""
    found = warm_from_studies(
        options.warm_from,
        study=study,
        where=where,
        info=info,
        machine=machine,
        space=space,
        most=2 * options.finalists,
    )
    for note in found.notes:
        progress.message(f"warm start: {note}")
    if found.sources:
        record_start(study, {"source": ", ".join(found.sources), "note": "; ".join(found.notes)})
    return found.seeds


def _recheck(
    runner: Backend,
    plan: ExplorePlan,
    baseline: Settings,
    progress: StageClock,
    *,
    info: dict[str, Any],
    workload: Workload,
    budget: BudgetPlan | None,
) -> SearchResult | None:
    """Measure the study's earlier answer again, unless the search resumes exploring or
    runs trials side by side; the result to end the search with when it holds, None when
    the search must go on (saying why)."""
    if plan.options.resume or plan.slots:
        return None
    earlier = earlier_answer(plan.study)
    if earlier is None:
        return None
    checked = recheck(runner, plan, earlier, baseline, progress)
    if checked is None:
        return None
    if checked.result is None:
        note = f"the earlier answer no longer holds: {checked.reason}; the search goes on"
    else:
        note = f"the earlier answer holds: {checked.reason}; nothing else measured"
    progress.message(note)
    entry = {"source": "earlier answer", "held": checked.held, "reason": checked.reason}
    record_start(plan.study, {**entry, "note": note})
    if checked.result is None:
        return None
    result = dataclasses.replace(
        checked.result,
        workload=info,
        collate_fn=workload.collate_fn,
        search_time=progress.stop(continued=True),
        budget=budget,
    )
    plan.study.set_user_attr(RESULT, result.to_dict())
    progress.phase("done", _summary(result))
    return result


def preflight(template: ProbeRequest, workload: Workload) -> tuple[dict[str, Any], float]:
    """Build the dataset and model and run one step, so a broken workload fails in
    one clear line before any trial; returns what was learned of the workload, and the
    probe's wall seconds: about what any probe costs before its first window, since the
    fork server probes start from is started first, its one-off import not in them."""
    start_probe_server()
    started = time.monotonic()
    result = run_probe(dataclasses.replace(template, mode="check"))
    if result.failure is not None:
        raise WorkloadError(_workload_message(workload, result.failure, every_config=False))
    return result.info, time.monotonic() - started


def warm_starts(
    space: Space,
    machine: Machine,
    batch_size: int,
    *,
    cpus: int | None = None,
    leading_model: Settings | None = None,
    wide_workers: int | None = None,
    loader_workers: int | None = None,
) -> tuple[Settings, ...]:
    """Configs tried first, in this order: the common rule of thumb (a worker per CPU of
    the rank's share, ``cpus``, by default the machine's, training on every thread);
    ``wide_workers`` when the worker sweep widened the range to that many (so the search
    measures the region the sweep opened); the loader at its best, ``loader_workers``
    (the worker count the sweep measured fastest alone), training on the fewest threads
    so the workers have the CPUs; the rule of thumb's workers training on the fewest
    threads; the CPUs split between training and loading
    (the fewest training threads, a worker on each CPU they leave: workers and training
    threads share the cores, which the rule of thumb oversubscribes); no workers. Each
    comes with the batch size, AMP and threads of ``leading_model``, the fastest compute
    ceiling (where the loader bounds the training, the largest batch size's:
    :meth:`~autotune.explore._worker_range.WorkerRange.leading_model`) when the bounds
    measured one (the starts on the fewest threads
    keep their threads), then with the user's own. No workers at the leading batch size
    and AMP is also tried on every thread, when the leading model had fewer: without
    workers the training has the CPUs to itself, and ceilings of two thread counts are
    often within each other's noise, so the one measured fastest may not be.

    The loader's best is there because exploration prunes on single windows of a noisy
    machine and may sample that region too seldom; a worker per CPU on the fewest
    threads lies between the loader's best and the split, where neither of them nor the
    rule of thumb measures it (the runs: ``docs/decisions.md``)."""
    share = cpus or machine.cpus
    threads = [t for t in space.threads.values() if isinstance(t, int)]
    rule_of_thumb = Settings(
        batch_size=batch_size,
        num_workers=share,
        prefetch_factor=2,
        persistent_workers=True,
        pin_memory=machine.accelerator != "cpu",
        threads=max(threads) if threads else None,
    )
    no_workers = dataclasses.replace(
        rule_of_thumb, num_workers=0, prefetch_factor=None, persistent_workers=False
    )
    starts = [rule_of_thumb]
    if wide_workers is not None:
        starts.append(dataclasses.replace(rule_of_thumb, num_workers=wide_workers))
    own_threads = []  # the starts that keep their threads at the leading batch size
    if loader_workers is not None and loader_workers > 0:
        loaded = dataclasses.replace(
            rule_of_thumb, num_workers=loader_workers, threads=min(threads) if threads else None
        )
        own_threads.append(loaded)
        starts.append(loaded)
    if threads and min(threads) < max(threads):
        packed = dataclasses.replace(rule_of_thumb, threads=min(threads))
        own_threads.append(packed)
        starts.append(packed)
    if threads and share > min(threads):
        split = dataclasses.replace(
            rule_of_thumb, num_workers=share - min(threads), threads=min(threads)
        )
        own_threads.append(split)
        starts.append(split)
    starts.append(no_workers)
    if leading_model is not None:
        leading = [
            dataclasses.replace(
                s,
                batch_size=leading_model.batch_size,
                amp=leading_model.amp,
                threads=s.threads if any(s is o for o in own_threads) else leading_model.threads,
            )
            for s in starts
        ]
        alone = dataclasses.replace(
            no_workers, batch_size=leading_model.batch_size, amp=leading_model.amp
        )
        starts = [*leading, alone, *starts]
    snapped = (space.snap(s) for s in starts)
    return tuple({s.key(): s for s in snapped}.values())


# --------------------------------------------------------------------- helpers
def _template(workload: Workload, options: SearchOptions, device: str, ranks: int) -> ProbeRequest:
    """The probe every trial starts from: the default loader, measured as ``options`` say."""
    return ProbeRequest(
        source=_source(workload),
        settings=Settings(batch_size=workload.batch_size),
        device=device,
        window_seconds=options.window_seconds,
        max_windows=options.max_windows,
        warmup_seconds=options.warmup_seconds,
        stall_timeout=options.trial_timeout,
        # Trials run side by side, one per rank's slot: each gets its share of the RAM.
        memory_limit=options.memory_limit or _default_memory_limit() // ranks,
        seed=options.seed or 0,
    )


def _batch_sizes(space: Space) -> tuple[int, ...]:
    """The batch sizes the space samples, smallest first."""
    return tuple(sorted(int(size) for size in space.batch_size.values() if size is not None))


def _leading_model(bounds: Bounds | None, worker_range: WorkerRange | None) -> Settings | None:
    if bounds is None:
        return None
    return worker_range.leading_model(bounds) if worker_range else bounds.fastest_model()


def _source(workload: Workload) -> WorkloadSource:
    if workload.config_path is not None:
        return WorkloadSource(config_path=workload.config_path)
    return WorkloadSource(pickled=pickle.dumps(workload))


def _default_memory_limit() -> int:
    return int(psutil.virtual_memory().available * MEMORY_SHARE)


def _workload_message(workload: Workload, failure: Failure, *, every_config: bool) -> str:
    where = workload.origin()
    piece = ""
    if failure.piece and not failure.message.startswith(failure.piece):
        piece = f"{failure.piece}: "
    hint = ""
    if failure.piece == "model(batch)" and workload.step is None:
        hint = " (if the model takes several inputs, define step(model, batch) in the config)"
    lead = "every config failed the same way: " if every_config else ""
    return f"{where}: {lead}{piece}{failure.message}{hint}"


def _summary(result: SearchResult) -> str:
    if result.is_default:
        return f"{result.settings.describe()}: {result.default_text()}"
    text = f"{result.settings.describe()}: {result.rate_text()}"
    speedup = result.speedup_text()
    if result.baseline is not None and speedup is not None:
        text += (
            f" vs {format_rate(result.baseline.samples_per_s)} for the default loader ({speedup})"
        )
    return text
