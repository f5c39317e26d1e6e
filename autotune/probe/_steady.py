"""A measured probe that ends before its last window once its windows agree: more of
them would not move its figure by a share that matters to the comparison it serves.

Only probes that compare configs already explored (the confirming rounds) end so, and
only loaders that start no workers at an epoch's start (no workers, or persistent
ones): a few windows that fall inside one epoch would miss that cost, where all of
them may not.
"""

from __future__ import annotations

from collections.abc import Sequence

from autotune.probe._protocol import ProbeRequest, Window

STEADY_FROM = 3
"""Windows a probe measures before it may end steady: as many as a reference probe's
least (:func:`~autotune.probe.reference_windows`), so that a figure never rests on
fewer windows than a ceiling's."""


def steady_share(request: ProbeRequest) -> float | None:
    """How closely ``request``'s windows must agree for its probe to end early (highest
    over lowest rate, less 1); None where every window runs: it sets no share, measures
    something other than training, or its loader starts workers every epoch."""
    settings = request.settings
    if request.steady is None or request.mode != "train":
        return None
    if settings.num_workers > 0 and not settings.persistent_workers:
        return None
    return request.steady


def ends_steady(windows: Sequence[Window], share: float | None) -> bool:
    """Whether a probe with these ``windows`` so far ends there: ``share`` is set, at
    least :data:`STEADY_FROM` windows ran, and their rates lie within ``share`` of each
    other."""
    if share is None or len(windows) < STEADY_FROM:
        return False
    rates = [w.samples / w.seconds for w in windows if w.seconds > 0]
    if len(rates) < len(windows) or min(rates) <= 0:
        return False
    return max(rates) / min(rates) <= 1.0 + share
