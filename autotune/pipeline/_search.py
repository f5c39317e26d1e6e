"""A search: its inputs settled, its state made, and its stages run in order
(:mod:`autotune.pipeline._stages`), its study's storage errors made one line.

Workload -> Space -> Backend (probes, pruned by ASHA) -> Study -> SearchResult
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from autotune._errors import StudyError
from autotune.explore import Backend, get_backend
from autotune.pipeline._probe import template
from autotune.pipeline._setup import Setup, inputs, prepare
from autotune.pipeline._stages import run_pipeline
from autotune.pipeline._state import SearchState
from autotune.probe import refuse_while_bootstrapping
from autotune.progress import Progress, QuietProgress, StageClock
from autotune.result import SearchResult
from autotune.study import open_study, read_meta, settle, storage_errors
from autotune.workload import SearchOptions, Workload


def search(  # noqa: PLR0913 - the config file's pieces as keywords, the public API
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
    """Tune a DataLoader by measuring short real trainings, and return the chosen settings,
    their figures, and ``.loader(dataset)``.

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

    Raises:
        ConfigError: the config or the arguments are wrong.
        WorkloadError: the dataset, model, loss or step fails.
        StudyError: the study cannot be opened or does not match this workload.
    """
    refuse_while_bootstrapping()  # before the study is touched
    pieces = {
        "dataset": dataset,
        "model": model,
        "loss": loss,
        "optimizer": optimizer,
        "step": step,
        "collate_fn": collate_fn,
        "batch_size": batch_size,
        "device": device,
        "name": name,
    }
    workload, user_space, search_options = inputs(config, pieces, space=space, options=options)
    return run_search(workload, user_space, search_options, progress=progress or QuietProgress())


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
            state = _begin(workload, user_space, options, setup, runner, clock, started)
            result = run_pipeline(state)
    finally:
        runner.close()
    settle(setup.study)
    return result


def _begin(
    workload: Workload,
    user_space: Mapping[str, Any],
    options: SearchOptions,
    setup: Setup,
    runner: Backend,
    progress: StageClock,
    started: float,
) -> SearchState:
    """The state before the first stage: the probe template and the study opened (made,
    unless the search resumes one)."""
    if options.resume and not setup.study.exists():
        raise StudyError(f"--resume: there is no study at {setup.study} to continue.")
    request = template(workload, options, setup.device, setup.placement.ranks)
    study = open_study(setup.study, create=not options.resume, writes=True)
    return SearchState(
        workload=workload,
        user_space=user_space,
        options=options,
        setup=setup,
        runner=runner,
        progress=progress,
        started=started,
        study=study,
        meta=read_meta(study),
        template=request,
        single=setup.placement.slots()[0].apply(request),  # one rank's share of the node
        space=setup.space,
    )
