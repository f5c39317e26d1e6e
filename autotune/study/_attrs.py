"""The names autotune gives its attributes in an Optuna study (all JSON user attributes).

The values are what the storage holds, so they never change: a study saved by an
older autotune must still load.
"""

from __future__ import annotations

from enum import StrEnum

STUDY_FORMAT = 1
"""The newest study format this autotune writes; a newer one is refused on load."""

WARM_START = "warm start"
"""The ``Attr.PROPOSED_BY`` of the configs a search tries first (judged from ASHA's second rung)."""


class Attr(StrEnum):
    """The key of each study and trial attribute autotune writes; its value is the stored string."""

    META = "autotune"
    """Study: format, machine and workload fingerprints, space, options."""
    RESULT = "autotune.result"
    """Study: the chosen settings with the figures that chose them."""
    STARTS = "autotune.starts"
    """Study: where each search of the study started, one entry a search, oldest first."""
    ROLE = "autotune.role"
    """Trial: explore, baseline or confirm."""
    SETTINGS = "autotune.settings"
    """Trial: the whole config the trial measured."""
    FIGURES = "autotune.figures"
    """Trial: its figures, windows included."""
    FAILURE = "autotune.failure"
    """Trial: why it failed."""
    GROUP = "autotune.group"
    """Trial: the confirmation round a confirming trial belongs to."""
    POSITION = "autotune.position"
    """Trial: where a confirming trial stands in its round's list of configs."""
    BACKEND = "autotune.backend"
    """Trial: who ran it, optuna (in the search's process) or ray."""
    NODE = "autotune.node"
    """Trial: with ray, the node it ran on (hostname, Ray node id)."""
    DUPLICATE_OF = "autotune.duplicate_of"
    """Trial: the earlier trial that measured the same config."""
    BOUNDED = "autotune.bounded"
    """Trial: a bound on its figures rather than a full measurement."""
    OWNER = "autotune.owner"
    """Trial: the search process running it (host, pid, start time)."""
    PROPOSED_BY = "autotune.proposed_by"
    """Trial: why autotune queued this config rather than the sampler proposing it."""
