"""The space fitted to where the training step runs, as the preflight measured it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from autotune.space._space import Fixed, Space

OFF_CPU_SHARE = 0.5
"""A training step that keeps less than this share of one core busy runs its compute off
the CPU (on an accelerator, or a device the search sees only through its clock). A step
computing on the CPU reads about 1 (time spent waiting for a core is left out, so a
loaded machine reads alike); one waiting on a device, far less."""


def fit_to_step(space: Space, user: Mapping[str, Any], step_cpu_share: float | None) -> Space:
    """``space`` with the training threads fixed at one when the step runs off the CPU.

    Such a step needs one thread to launch its work; more threads only spin beside the
    DataLoader's workers, which want every core the training leaves. The user's own
    ``space['threads']`` is kept as given, and so is a space whose threads are fixed.

    Args:
        space: the space built for the machine.
        user: the user's space dict, as given.
        step_cpu_share: the preflight's CPU time of the training thread over its wall
            time for a step (1.0: one core busy throughout); None when not measured.
    """
    threads = space.threads.values()
    if "threads" in user or step_cpu_share is None or step_cpu_share >= OFF_CPU_SHARE:
        return space
    if len(threads) < 2 or 1 not in threads:
        return space
    note = (
        f"threads: fixed at 1: the training step kept {step_cpu_share:.0%} of one core busy "
        "in the preflight (its compute runs off the CPU), so the cores go to the workers; "
        "widen with space['threads']."
    )
    return dataclasses.replace(space, threads=Fixed(1), notes=(*space.notes, note))
