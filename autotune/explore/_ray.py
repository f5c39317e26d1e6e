"""The Ray backend: the same search on Ray Tune, on one machine or a cluster.

Ray Tune runs the probes in Ray workers, on whichever nodes have room; Ray's
OptunaSearch proposes with the embedded backend's sampler, in the same study, and
the driver (this process) prunes over the probe's windows with the embedded
backend's pruner, whose rungs are read from the study (so a resumed search prunes
against the trials already there). The driver records every trial (see
``_ray_driver``), so a study written here reads exactly like one the embedded
backend wrote, but for ``autotune.backend = "ray"`` and the node each trial ran on.

Each trial asks Ray for what one DDP rank would have: one GPU and the node's
CPUs divided by its GPUs, so trials side by side on a node measure what ranks
side by side will see. On CPU-only nodes a trial takes the whole node (trials
sharing cores would corrupt each other's figures), unless ``concurrent`` asks
for more trials at once than there are nodes.

Both rounds (explore, then confirm) run on Ray: a finalist is re-measured in
a Ray worker with the same resources as when it was explored, so the figures
compared are taken alike (and with a cluster, the driver may have no GPU).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import multiprocessing
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune._errors import ConfigError, MissingExtraError
from autotune.explore._backend import ExplorePlan
from autotune.explore._ray_worker import TrialSpec, run_trial
from autotune.explore._trials import enqueue_warm_starts, group_attrs
from autotune.settings import Settings
from autotune.study import quiet_optuna
from autotune.workload import MEMORY_SHARE

if TYPE_CHECKING:
    from ray.tune import Tuner

    from autotune.explore._ray_driver import TrialBook

INSTALL = "pip install 'autotune[ray]'"


def require_ray() -> None:
    """Raises MissingExtraError, saying what to install, when Ray Tune is missing."""
    try:
        import ray  # noqa: F401
        from ray import tune  # noqa: F401
    except ImportError as error:
        raise MissingExtraError(
            f"backend 'ray' needs Ray Tune, which is not installed ({error}); "
            f"install it with: {INSTALL}"
        ) from None


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrialResources:
    """What each trial asks Ray for, and how many fit at once."""

    cpus: int
    gpus: int
    at_once: int
    """Trials running at the same time: what fits, capped by ``concurrent``."""
    memory_share: float
    """Share of a node's memory one trial may use (its share of the node's CPUs)."""
    note: str


def trial_resources(
    nodes: Sequence[Mapping[str, float]],
    device: str,
    concurrent: int | None,
    ranks: int | None = None,
) -> TrialResources:
    """Each trial's resources on a cluster of ``nodes`` (Ray's resource totals per node),
    for ``ranks`` DDP ranks per node on CPU (default 1).

    Raises:
        ConfigError: the trials need a GPU and no node has one, or no node has a CPU.
    """
    nodes = [n for n in nodes if n.get("CPU", 0) >= 1]
    if not nodes:
        raise ConfigError("the Ray cluster has no node with a CPU to run trials on.")
    if device.startswith("cuda"):
        gpu_nodes = [n for n in nodes if n.get("GPU", 0) >= 1]
        if not gpu_nodes:
            raise ConfigError(
                f"the search trains on {device}, but no node of the Ray cluster has a GPU; "
                "add GPU nodes, or set device = 'cpu' in the config."
            )
        cpus = max(1, min(int(n["CPU"] // n["GPU"]) for n in gpu_nodes))
        fit = sum(min(int(n["GPU"]), int(n["CPU"] // cpus)) for n in gpu_nodes)
        at_once = min(fit, concurrent or fit)
        share = min(cpus / min(n["CPU"] for n in gpu_nodes), 1.0)
        note = (
            f"each trial takes 1 GPU and {_cpus(cpus)} (a DDP rank's share: a node's CPUs / its "
            f"GPUs); {at_once} at once"
        )
        return TrialResources(cpus=cpus, gpus=1, at_once=at_once, memory_share=share, note=note)
    node_cpus = int(min(n["CPU"] for n in nodes))
    per_node = ranks or 1
    if concurrent is not None and concurrent > per_node * len(nodes):
        per_node = math.ceil(concurrent / len(nodes))
    cpus = max(1, node_cpus // per_node)
    fit = sum(int(n["CPU"] // cpus) for n in nodes)
    at_once = min(fit, concurrent or fit)
    if per_node == 1:
        note = (
            f"CPU only: each trial takes a whole node's {_cpus(node_cpus)}, so trials run one "
            "at a time on each node (trials sharing cores would corrupt each other's figures); "
            f"{at_once} at once"
        )
    elif per_node == ranks:
        note = (
            f"CPU only: each trial takes a DDP rank's share of a node, {_cpus(cpus)} "
            f"({ranks} ranks per node), side by side as the ranks will run; {at_once} at once"
        )
    else:
        note = (
            f"CPU only: {per_node} trials share each node's {_cpus(node_cpus)} ({cpus} each), as "
            f"concurrent={concurrent} asks; their figures will disturb each other"
        )
    share = min(cpus / node_cpus, 1.0)
    return TrialResources(cpus=cpus, gpus=0, at_once=at_once, memory_share=share, note=note)


def _cpus(count: int) -> str:
    return "1 CPU" if count == 1 else f"{count} CPUs"


class RaySession:
    """Ray for one search: a local Ray it started (and stops), or a cluster it joined."""

    def __init__(self, address: str | None) -> None:
        import ray

        self.address = address
        self.owned = False
        self._auth_mode = os.environ.get("RAY_AUTH_MODE")
        options: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "logging_level": logging.WARNING,
        }
        if ray.is_initialized():
            self.description = "the Ray session this process had already started"
        elif address is None:
            from autotune.machine import usable_cpus

            # Workers import what this process can import (modules next to the config).
            path = os.pathsep.join(p for p in sys.path if p)
            with _loopback_only():
                ray.init(
                    address="local",
                    num_cpus=usable_cpus(),
                    num_gpus=_visible_gpus(),
                    runtime_env={"env_vars": {"PYTHONPATH": path}},
                    # Workers at this process's priority, not Ray's niceness 15: a probe
                    # on a busy machine measures what the user's training would get.
                    _system_config={"worker_niceness": os.getpriority(os.PRIO_PROCESS, 0)},
                    **options,
                )
            self.owned = True
            self.description = "a local Ray (listening on the loopback only)"
        else:
            options.pop("include_dashboard")
            try:
                ray.init(address=address, **options)
            except (ConnectionError, ValueError, RuntimeError) as error:
                raise ConfigError(
                    f"cannot join the Ray cluster at {address!r}: {error}. Start one with "
                    "`ray start --head`, or give its address as HOST:PORT."
                ) from None
            self.owned = True
            self.description = f"the Ray cluster at {address}"
        self.storage = tempfile.mkdtemp(prefix="autotune-ray-")
        self.nodes = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]

    def close(self) -> None:
        import ray

        if self.owned:
            ray.shutdown()
        shutil.rmtree(self.storage, ignore_errors=True)
        # A new local Ray turns token authentication on for this process; put it back.
        if self._auth_mode is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = self._auth_mode

    def summary(self) -> str:
        cpus = sum(n["Resources"].get("CPU", 0) for n in self.nodes)
        gpus = sum(n["Resources"].get("GPU", 0) for n in self.nodes)
        return f"{self.description}: {len(self.nodes)} node(s), {cpus:g} CPUs, {gpus:g} GPUs"


class RayBackend:
    """Ray Tune: the trials in Ray workers, proposed, pruned and recorded from here."""

    name = "ray"

    def __init__(self) -> None:
        require_ray()
        self._session: RaySession | None = None
        self._resources: TrialResources | None = None

    def _start(self, plan: ExplorePlan) -> tuple[RaySession, TrialResources]:
        if self._session is None:
            self._session = RaySession(plan.options.address)
            plan.progress.message(f"ray: {self._session.summary()}")
        if self._resources is None:
            nodes = [n["Resources"] for n in self._session.nodes]
            self._resources = trial_resources(
                nodes, plan.template.device, plan.options.concurrent, plan.options.ranks
            )
            plan.progress.message(f"ray: {self._resources.note}")
        return self._session, self._resources

    def explore(self, plan: ExplorePlan) -> None:
        session, resources = self._start(plan)
        enqueue_warm_starts(plan)
        self._run(plan, session, resources, exploring=True, count=plan.options.trials)

    def measure(
        self,
        plan: ExplorePlan,
        settings: list[Settings],
        roles: list[str],
        rounds: int,
        *,
        first: int = 1,
    ) -> list[str]:
        session, resources = self._start(plan)
        # Every round in one Tune run: each run starts its Ray workers and their probe fork
        # servers anew (seconds on a small machine), which a run per round would pay each time.
        groups, attrs = [], []
        for number in range(first, first + rounds):
            group, round_attrs = group_attrs(settings, roles, number)
            groups.append(group)
            attrs.extend(round_attrs)
        self._run(plan, session, resources, exploring=False, count=len(attrs), fixed=attrs)
        return groups

    def in_turns(self, plan: ExplorePlan) -> bool:
        """Never: Ray runs each trial in a worker of its own, side by side where they fit."""
        return False

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def _run(
        self,
        plan: ExplorePlan,
        session: RaySession,
        resources: TrialResources,
        *,
        exploring: bool,
        count: int,
        fixed: list[dict[str, Any]] | None = None,
    ) -> None:
        from ray import tune
        from ray.tune.schedulers import FIFOScheduler
        from ray.tune.search import ConcurrencyLimiter

        from autotune.explore._ray_driver import (
            StopOnFatal,
            StudyPruning,
            StudyRecorder,
            StudySearch,
            TrialBook,
        )

        book = TrialBook(
            plan,
            exploring=exploring,
            count=count,
            timeout=plan.options.timeout if exploring else None,
            fixed=fixed,
        )
        scheduler = StudyPruning(book) if exploring else FIFOScheduler()  # type: ignore[no-untyped-call]
        trainable = tune.with_resources(
            tune.with_parameters(run_trial, spec=_spec(plan, resources, exploring=exploring)),
            {"cpu": resources.cpus, "gpu": resources.gpus},
        )
        with quiet_optuna():
            search = StudySearch(book)  # loads the study: Optuna would say so
        tuner = tune.Tuner(
            trainable,
            tune_config=tune.TuneConfig(
                search_alg=ConcurrencyLimiter(search, max_concurrent=resources.at_once),
                scheduler=scheduler,
                num_samples=-1,  # until the search says FINISHED: settled repeats count too
                reuse_actors=True,  # a worker and its probe fork server serve many trials
            ),
            run_config=tune.RunConfig(
                name="explore" if exploring else "confirm",
                storage_path=session.storage,
                verbose=0,
                stop=StopOnFatal(book),
                callbacks=[StudyRecorder(book)],
                failure_config=tune.FailureConfig(max_failures=0),
            ),
        )
        _fit(tuner, book)


def _fit(tuner: Tuner, book: TrialBook) -> None:
    """Run ``tuner`` to the end, the study told of every trial (reconciled where the run
    finished, abandoned with the reason where it did not), and close ``book``."""
    try:
        with _tune_environment():
            grid = tuner.fit()
    except KeyboardInterrupt:
        book.abandon("interrupted (Ctrl-C)")
        raise
    except BaseException as error:
        book.abandon(f"not finished: Ray Tune stopped with {type(error).__name__}: {error}")
        raise
    else:
        book.reconcile(grid[i] for i in range(len(grid)))
    finally:
        book.close()


def _spec(plan: ExplorePlan, resources: TrialResources, *, exploring: bool) -> TrialSpec:
    template = plan.template if exploring else plan.measuring()
    if template.worker_start_method is None:
        # The DataLoader's workers start as the user's training would start them here.
        template = dataclasses.replace(
            template, worker_start_method=multiprocessing.get_start_method()
        )
    text = None
    if template.source.config_path is not None:
        text = Path(template.source.config_path).read_text()
    share = None
    if plan.options.memory_limit is None:
        share = MEMORY_SHARE * resources.memory_share
    return TrialSpec(
        template=template,
        config_text=text,
        memory_share=share,
        niceness=os.getpriority(os.PRIO_PROCESS, 0),
    )


def _visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@contextlib.contextmanager
def _loopback_only() -> Iterator[None]:
    """Ray treats any Linux machine as a cluster node and listens on every interface; as
    on macOS and Windows, a Ray for this machine alone listens on the loopback only."""
    from ray._private import ray_constants

    before = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    if before is None:
        yield
        return
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before


@contextlib.contextmanager
def _tune_environment() -> Iterator[None]:
    """Tune's switches for the length of a run: trials run in their worker's directory, not
    a trial directory, so the paths a config names mean what they mean to the user (Tune
    hands this one on to the trials); Ctrl-C raises KeyboardInterrupt as in the embedded
    backend (every finished trial is already in the study). Tune's console output, result
    files and error reports stay off: the search's progress and the study replace them
    (every trial error is recorded there with its reason)."""
    values = {
        "RAY_CHDIR_TO_TRIAL_DIR": "0",
        "TUNE_DISABLE_SIGINT_HANDLER": "1",
        "RAY_AIR_NEW_OUTPUT": "0",
        "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",
        "TUNE_PRINT_ALL_TRIAL_ERRORS": "0",
    }
    before = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    loggers = [logging.getLogger(name) for name in _QUIET_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


_QUIET_LOGGERS = (
    "ray.tune.tune",  # "Trials did not complete": they are in the study, with their reasons
    "ray.tune.analysis.experiment_analysis",  # no result files: the study is the record
)
