"""Backends: who proposes configs and prunes the slow ones.

A backend receives an :class:`ExplorePlan` and runs trials into the plan's
Optuna study. The embedded backend runs Optuna in this process; the Ray
backend runs the same probes on Ray Tune (local or a cluster) and records
them into the same study, in the same format.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import optuna

from autotune.explore._bounds import Bounds
from autotune.probe import Failure, ProbeRequest, Slot
from autotune.progress import Progress
from autotune.settings import Settings
from autotune.space import Space
from autotune.workload import SearchOptions

STEADY_SHARE = 1 / 3
"""A confirming probe ends once its windows agree within this share of the tolerance."""


@dataclasses.dataclass(kw_only=True)
class ExplorePlan:
    """Everything a backend needs to explore a space into a study."""

    study: optuna.Study
    space: Space
    template: ProbeRequest
    """A request for the workload and device; each trial replaces its settings."""
    warm_starts: tuple[Settings, ...]
    """Configs tried first (enqueued), so the sampler starts from sensible points."""
    options: SearchOptions
    progress: Progress
    fatal: Failure | None = None
    """Set by the backend when every config fails the same way (the user's code is broken)."""
    bounds: Bounds | None = None
    """Compute ceilings by batch size, AMP and threads: configs that cannot come near the
    best are skipped, and exploration stops once the best nears the highest."""
    slots: tuple[Slot, ...] = ()
    """Where trials run, one at a time per slot, as many at once as there are slots (one
    per DDP rank: its GPU and CPU share); empty: the template as it is, one at a time."""

    def measuring(self) -> ProbeRequest:
        """The template of a probe that measures a given config again (a confirming
        round), which ends once its windows agree within :data:`STEADY_SHARE` of the
        tolerance: where the windows agree that closely, more of them cannot move a
        config's figure by a share the verdict's band could notice."""
        return dataclasses.replace(self.template, steady=self.options.tolerance * STEADY_SHARE)


class Backend(Protocol):
    """Runs the exploration phase of a search."""

    name: str

    def explore(self, plan: ExplorePlan) -> None:
        """Run up to ``plan.options.trials`` trials (or until ``timeout``) into the study."""

    def measure(
        self,
        plan: ExplorePlan,
        settings: list[Settings],
        roles: list[str],
        rounds: int,
        *,
        first: int = 1,
    ) -> list[str]:
        """Measure each config fully (no pruning), ``rounds`` times over, interleaved (every
        config once, then every config again, in the order :func:`group_attrs` gives each
        round: as given, then reversed, ...); each round's trials are tagged with a new
        group id. Returns the group ids, one per round, in order.

        Args:
            first: the number (from 1) of the first of these rounds among the rounds they
                continue, so that a caller measuring round by round keeps the turning order.
        """

    def in_turns(self, plan: ExplorePlan) -> bool:
        """Whether :meth:`measure` measures the configs of a round in turns in one probe
        process (:mod:`autotune.explore._in_turns`), rather than each in a probe of its
        own: a round then lists the default loader once, first."""

    def close(self) -> None:
        """Release what the backend holds (a Ray session); called once, at the end."""


__all__ = ["Backend", "ExplorePlan"]
