"""The stages of a search, one name each, in the order they run.

Every part that speaks of a stage keys on :class:`Stage`: the pipeline's order, the
progress phases, the budget's plan, the search time and the results page. A stage is
a :class:`enum.StrEnum`, so that its value is what a study saved and what a
:class:`~autotune.progress.Progress` a user wrote receives as the phase's name.
"""

from __future__ import annotations

import enum


class Stage(enum.StrEnum):
    """One stage of a search; its value is its progress phase's name."""

    PREFLIGHT = "preflight"
    """One training step of the default loader: the workload builds and trains."""
    BOUNDS = "bounds"
    """Compute ceilings by batch size, AMP and threads: what no loader can beat."""
    WORKERS = "workers"
    """The loader alone at each worker count: the range of workers worth sampling."""
    RECHECK = "recheck"
    """A study's earlier answer measured again beside the default loader."""
    EARLY = "early"
    """The default loader measured alone, where it already nears the highest ceiling."""
    EXPLORE = "explore"
    """Trials proposed by the sampler, pruned by ASHA."""
    CONFIRM = "confirm"
    """Interleaved rounds of the finalists beside the default loader."""
    RUNOFF = "runoff"
    """More rounds of the leaders, when the confirming rounds left a close race."""
    DDP = "ddp"
    """The finalists on every rank at once, and the DDP keywords."""
    CEILINGS = "ceilings"
    """Compute and data ceilings of the winner and the default loader: the diagnosis."""
    DONE = "done"
    """The result saved: the search's end, no stage of its own."""

    @property
    def label(self) -> str:
        """The stage as a reader names it ("worker sweep" for :attr:`WORKERS`)."""
        return _LABELS.get(self, self.value)


_LABELS = {Stage.WORKERS: "worker sweep"}

PLANNED = (
    Stage.BOUNDS,
    Stage.WORKERS,
    Stage.EXPLORE,
    Stage.CONFIRM,
    Stage.RUNOFF,
    Stage.DDP,
    Stage.CEILINGS,
)
"""The stages after the preflight that a time budget plans, in the order they run."""
