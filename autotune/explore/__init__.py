"""Exploring: the compute bounds measured first, then the backends that propose configs
and prune the slow ones (embedded Optuna, Ray Tune), and the rules every trial follows."""

from __future__ import annotations

from autotune.explore._backend import Backend, ExplorePlan
from autotune.explore._bounds import (
    Bounds,
    BoundsLeft,
    compute_key,
    measure_bounds,
    readings_left,
)
from autotune.explore._hangs import worker_hang
from autotune.explore._in_turns import PASSES
from autotune.explore._worker_range import WorkerRange, measure_worker_range, sweep_left, sweepable


def get_backend(name: str) -> Backend:
    """The backend called ``name``.

    Raises:
        ConfigError: no backend has that name.
        MissingExtraError: the backend's optional dependency is not installed.
    """
    from autotune._errors import ConfigError

    if name in ("optuna", "embedded"):
        from autotune.explore._embedded import EmbeddedBackend

        return EmbeddedBackend()
    if name == "ray":
        from autotune.explore._ray import RayBackend

        return RayBackend()
    raise ConfigError(f"backend is {name!r}; expected 'optuna' or 'ray'.")


__all__ = [
    "PASSES",
    "Backend",
    "Bounds",
    "BoundsLeft",
    "ExplorePlan",
    "WorkerRange",
    "compute_key",
    "get_backend",
    "measure_bounds",
    "measure_worker_range",
    "readings_left",
    "sweep_left",
    "sweepable",
    "worker_hang",
]
