"""The stages of a search, in the order they run: each a function of the search's
state (:class:`~autotune.pipeline._state.SearchState`) that reads what the stages
before it set, sets what it learns, and ends the search by setting its result.

PREFLIGHT -> BOUNDS -> WORKERS -> RECHECK -> EARLY -> EXPLORE -> CONFIRM -> DDP ->
CEILINGS -> DONE

A stage with nothing to do for this search (no bounds asked for, one rank, a study
with no earlier answer) returns at once; each announces its own progress phase, which
times it (:class:`~autotune.progress.StageClock`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from autotune._errors import WorkloadError
from autotune._stages import Stage
from autotune.decide import (
    Ceilings,
    DdpSetup,
    after_ddp,
    confirm,
    explored_candidates,
    measure_ceilings,
    near_ceiling,
    planned_probes,
    round_configs,
    round_length,
    run_ddp_stage,
)
from autotune.explore import (
    ExplorePlan,
    measure_bounds,
    measure_worker_range,
    sweepable,
    worker_hang,
)
from autotune.pipeline._budget import search_shape, start_budget
from autotune.pipeline._probe import preflight, workload_message
from autotune.pipeline._recheck import recheck_earlier_answer
from autotune.pipeline._starts import seeds
from autotune.pipeline._state import SearchState
from autotune.pipeline._summary import summary
from autotune.pipeline._usual_starts import usual_starts
from autotune.result import SearchResult
from autotune.settings import Settings
from autotune.space import default_max_workers, fit_to_step
from autotune.study import Attr, check_same_workload, study_meta
from autotune.workload import SearchOptions

CEILING_PROBES = 5
"""At most: compute and data of the winner and of the default loader, and the loader limit."""


def run_preflight(state: SearchState) -> None:
    """One training step of the default loader; the study checked against this workload
    and machine (and told them, when new); the budget planned from the step's time."""
    state.progress.phase(
        Stage.PREFLIGHT, f"one training step of the default loader on {state.setup.device}"
    )
    state.info, probe_start_s = preflight(state.single, state.workload)
    check_same_workload(state.meta, state.machine, state.info, state.where, state.placement)
    state.space = fit_to_step(state.space, state.user_space, state.info.get("step_cpu_share"))
    if not state.meta:
        entry = study_meta(
            state.workload,
            state.machine,
            state.setup.device,
            state.space,
            state.options,
            state.info,
            state.placement,
        )
        state.study.set_user_attr(Attr.META, entry)
    shape = search_shape(
        state.options,
        info=state.info,
        space=state.space,
        user_space=state.user_space,
        study=state.study,
        slots=len(state.placement.slots()),
        ranks=state.placement.ranks,
    )
    state.options, state.deadline = start_budget(
        state.options,
        shape,
        started=state.started,
        probe_start_s=probe_start_s,
        step_s=float(state.info.get("step_s") or 0.0),
        study=state.study,
        progress=state.progress,
    )


def run_bounds(state: SearchState) -> None:
    """The compute ceilings by batch size, AMP and threads, when asked for."""
    if state.options.bounds:
        state.bounds, state.compute_figures = measure_bounds(
            state.single, state.space, state.study, state.progress
        )


def run_worker_sweep(state: SearchState) -> None:
    """The loader alone at each worker count, when the bounds ran and the space samples
    the workers: the space then spans the counts worth sampling."""
    if state.bounds is not None and sweepable(state.space, state.user_space, state.bounds):
        state.space, state.worker_range = measure_worker_range(
            state.single, state.space, state.bounds, state.study, state.progress
        )


def run_recheck(state: SearchState) -> None:
    """The plan of exploration made (its starting points said), then the study's earlier
    answer measured again: the search ends with it where it holds."""
    state.plan = _exploration_plan(state)
    state.result = recheck_earlier_answer(state)


def run_early(state: SearchState) -> None:
    """The default loader kept as the answer where it already trains near the highest
    compute ceiling (trials one at a time only)."""
    if len(state.placement.slots()) == 1:
        state.confirmed = near_ceiling(
            state.runner, state.exploring(), state.baseline, state.info, state.progress
        )


def run_explore(state: SearchState) -> None:
    """Trials proposed by the sampler and pruned by ASHA, as many as the budget leaves."""
    if state.confirmed is not None:
        return
    plan = state.exploring()
    options = plan.options = state.budget().exploring(plan.options, plan.progress)
    # Later: the finalists and the default loader re-measured (the default beside every
    # two; a runoff, when one runs, is counted once it starts), the DDP probes, the ceilings.
    coming = round_length(options.finalists) * options.rounds + _later_probes(state)
    parallel = ""
    if plan.slots:
        parallel = f"; {len(plan.slots)} at a time, {state.placement.describe()}"
    notes = "; ".join(plan.space.notes)
    plan.progress.phase(
        Stage.EXPLORE,
        f"{options.trials} trials into {state.where} "
        f"(space of {plan.space.size()} configs{parallel}; {notes})",
    )
    plan.progress.plan(Stage.EXPLORE, options.trials, options.timeout, later=coming)
    state.runner.explore(plan)
    if plan.fatal is not None:
        raise WorkloadError(workload_message(state.workload, plan.fatal, every_config=True))


def run_confirm(state: SearchState) -> None:
    """The finalists measured in interleaved rounds beside the default loader (and a
    runoff of the leaders where the rounds leave a close race); the winner chosen."""
    if state.confirmed is None:
        plan = state.exploring()
        explored = explored_candidates(plan.study, plan.space)
        if not explored:
            raise WorkloadError(
                f"{state.workload.origin()}: no config finished a probe; see the failures "
                f"with `autotune show {state.where}`."
            )
        threads = state.info.get("torch_threads")

        def round_of(options: SearchOptions) -> int:
            return round_configs(
                dataclasses.replace(plan, options=options), explored, state.baseline, threads
            )

        plan.options = state.budget().confirming(plan.options, round_of, plan.progress)
        state.confirmed = confirm(
            state.runner,
            plan,
            explored,
            state.baseline,
            plan.progress,
            later=_later_probes(state),
            default_threads=threads,
        )
    state.options = state.exploring().options
    state.winner = state.confirmed.winner


def run_ddp(state: SearchState) -> None:
    """With several ranks: the finalists on every rank at once, and the DDP keywords."""
    if state.placement.ranks == 1:
        return
    confirmed, winner = state.chosen()
    setup = DdpSetup(
        placement=state.placement,
        template=state.template,
        info=state.info,
        user_batch_size=state.workload.batch_size,
        batch_sizes=_batch_sizes(state),
    )
    winner, ddp = run_ddp_stage(
        setup,
        winner=winner,
        finalists=list(confirmed.finalists),
        options=state.budget().ddp(state.options, state.progress),
        progress=state.progress,
        later=_ceiling_probes(state),
    )
    state.confirmed, state.winner, state.ddp = after_ddp(confirmed, winner, ddp)


def run_ceilings(state: SearchState) -> None:
    """The winner's and the default loader's compute and data ceilings, and the loader's
    limit, for the diagnosis, when asked for and in time."""
    _, winner = state.chosen()
    if not state.budget().keeps_ceilings(state.options, state.progress):
        state.ceilings = Ceilings(winner={}, baseline={}, loader_limit=None)
        return
    most_workers = max(
        default_max_workers(state.placement.rank_cpus),
        state.worker_range.bound if state.worker_range else 0,
    )
    hang = worker_hang(state.study)
    if hang is not None:  # the loader alone with as many workers would hang the same way
        most_workers = min(most_workers, hang.workers - 1)
    state.ceilings = measure_ceilings(
        state.single,
        winner.settings,
        state.baseline,
        most_workers,
        state.progress,
        state.compute_figures,
        default_threads=state.info.get("torch_threads"),
    )


def run_done(state: SearchState) -> None:
    """The answer, saved in the study."""
    confirmed, winner = state.chosen()
    ceilings = state.ceilings or Ceilings(winner={}, baseline={}, loader_limit=None)
    result = SearchResult(
        settings=winner.settings,
        figures=winner.figures,
        device=state.setup.device,
        machine=state.machine,
        ceilings=ceilings.winner,
        baseline_ceilings=ceilings.baseline,
        loader_limit=ceilings.loader_limit,
        tolerance=state.options.tolerance,
        user_batch_size=state.workload.batch_size,
        space=state.space.to_dict(),
        workload=state.info,
        study_path=str(state.where),
        study_name=state.study.study_name,
        collate_fn=state.workload.collate_fn,
        ddp=state.ddp,
        search_time=state.progress.stop(continued=bool(state.meta)),
        budget=state.budget().plan,
        **confirmed.confirmation(),
    )
    state.study.set_user_attr(Attr.RESULT, result.to_dict())
    state.progress.phase(Stage.DONE, summary(result))
    state.result = result


PIPELINE: tuple[tuple[Stage, Callable[[SearchState], None]], ...] = (
    (Stage.PREFLIGHT, run_preflight),
    (Stage.BOUNDS, run_bounds),
    (Stage.WORKERS, run_worker_sweep),
    (Stage.RECHECK, run_recheck),
    (Stage.EARLY, run_early),
    (Stage.EXPLORE, run_explore),
    (Stage.CONFIRM, run_confirm),
    (Stage.DDP, run_ddp),
    (Stage.CEILINGS, run_ceilings),
    (Stage.DONE, run_done),
)
"""Every stage of a search, in the order they run (the runoff is the confirming
stage's, which runs it where its rounds leave a close race)."""


def run_pipeline(state: SearchState) -> SearchResult:
    """Run the stages in order until one sets the result."""
    for _, run in PIPELINE:
        run(state)
        if state.result is not None:
            return state.result
    raise RuntimeError("the search's stages ended without a result")


# --------------------------------------------------------------------- helpers
def _exploration_plan(state: SearchState) -> ExplorePlan:
    """What exploring and confirming run on: the space as the sweep left it, and the
    configs to try first, the close studies' finalists or else the usual starts."""
    slots = state.placement.slots()
    lent = seeds(state)
    starts = lent or usual_starts(
        state.space,
        state.machine,
        state.workload.batch_size,
        cpus=state.placement.rank_cpus,
        leading_model=_leading_model(state),
        wide_workers=state.worker_range.widened() if state.worker_range is not None else None,
        loader_workers=state.worker_range.fastest() if state.worker_range is not None else None,
    )
    return ExplorePlan(
        study=state.study,
        space=state.space,
        template=state.single if len(slots) == 1 else state.template,
        warm_starts=starts,
        options=state.options,
        progress=state.progress,
        bounds=state.bounds,
        slots=slots if len(slots) > 1 else (),
    )


def _leading_model(state: SearchState) -> Settings | None:
    if state.bounds is None:
        return None
    if state.worker_range is not None:
        return state.worker_range.leading_model(state.bounds)
    return state.bounds.fastest_model()


def _batch_sizes(state: SearchState) -> tuple[int, ...]:
    """The batch sizes the space samples, smallest first."""
    values = state.space.batch_size.values()
    return tuple(sorted(int(size) for size in values if size is not None))


def _ceiling_probes(state: SearchState) -> int:
    return CEILING_PROBES if state.options.ceilings else 0


def _later_probes(state: SearchState) -> int:
    """The probes after the confirming rounds: the DDP stage's and the ceilings'."""
    ddp = 0
    if state.placement.ranks > 1:
        batches = len(_batch_sizes(state)) > 1
        ddp = planned_probes(state.info, state.options, state.options.finalists, batches=batches)
    return ddp + _ceiling_probes(state)
