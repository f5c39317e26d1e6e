"""Choosing: the cheapest config whose throughput is within the noise of the best.

Pure functions over measured candidates, so the rule is testable alone.
"Cheapest" puts first what changes training, nearest to how the user trains
today: the user's batch size (then the nearest to it), no echo, no AMP; then
what costs the machine (workers, prefetch depth, persistent and pinned memory,
trainer threads, the threads of each worker's native pools): between two configs
equally fast, the one that trains like the user's own code and uses fewer resources
wins.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Sequence
from itertools import zip_longest

from autotune.settings import Settings


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A config and the one throughput (samples/s) the choice ranks it by.

    Not a :class:`~autotune.probe.Measurement`: the figure may summarise several
    measurements (their median, see :func:`merge`) or be the last window a pruned trial
    reported, so there are no figures of one probe behind it.
    """

    settings: Settings
    samples_per_s: float


OVERLAP_FACTOR = 2
"""Finalists may be up to this many times ``finalists`` when that many overlap the best."""


def cost(settings: Settings, user_batch: int) -> tuple[float, ...]:
    """The cost order, smaller is cheaper (see the module docstring).

    Args:
        settings: the config.
        user_batch: the batch size the user trains with today: the cheapest batch.
    """
    return (
        batch_distance(settings.batch_size, user_batch),
        settings.echo,
        0 if settings.amp == "off" else 1,
        settings.batch_size,
        settings.num_workers,
        settings.prefetch_factor or 0,
        int(settings.persistent_workers),
        int(settings.pin_memory),
        settings.threads if settings.threads is not None else 1 << 16,
        settings.worker_threads if settings.worker_threads is not None else 1 << 16,
    )


def batch_distance(batch_size: int, user_batch: int) -> float:
    """How far a batch size is from the user's, in doublings (64 and 16 are both 1 from 32)."""
    return abs(math.log2(batch_size / user_batch))


def merge(candidates: Iterable[Candidate]) -> list[Candidate]:
    """One candidate per distinct config, its throughput the median of its measurements."""
    groups: dict[str, list[Candidate]] = {}
    for candidate in candidates:
        groups.setdefault(candidate.settings.key(), []).append(candidate)
    return [
        Candidate(group[0].settings, statistics.median(c.samples_per_s for c in group))
        for group in groups.values()
    ]


def within(candidates: Sequence[Candidate], tolerance: float) -> list[Candidate]:
    """The candidates at or above ``(1 - tolerance)`` of the best."""
    if not candidates:
        return []
    best = max(c.samples_per_s for c in candidates)
    return [c for c in candidates if c.samples_per_s >= best * (1.0 - tolerance)]


def cheapest_within(
    candidates: Sequence[Candidate], tolerance: float, *, user_batch: int
) -> Candidate:
    """The cheapest candidate within ``tolerance`` of the best; ties go to the faster.

    Raises:
        ValueError: no candidates.
    """
    return cheapest(within(candidates, tolerance), user_batch=user_batch)


def cheapest(candidates: Sequence[Candidate], *, user_batch: int) -> Candidate:
    """The cheapest of ``candidates`` (:func:`cost`); ties go to the faster.

    Raises:
        ValueError: no candidates.
    """
    if not candidates:
        raise ValueError("no candidates to choose from")
    return min(candidates, key=lambda c: (cost(c.settings, user_batch), -c.samples_per_s))


def finalists(
    candidates: Sequence[Candidate], tolerance: float, limit: int, *, user_batch: int
) -> list[Candidate]:
    """The configs worth measuring again before choosing.

    Those within twice the tolerance of the best (one lucky or unlucky window can
    move a figure that much), taken alternately fastest-first and cheapest-first,
    so both the best and the cheap contenders are confirmed: at least ``limit`` of
    them where exploration measured that many configs (the next fastest fill in),
    and up to twice ``limit`` where more overlap the best.
    """
    if limit < 1:
        raise ValueError(f"The value of `limit` is {limit}, but must be `limit >= 1`.")
    merged = merge(candidates)
    near = within(merged, 2 * tolerance)
    by_speed = sorted(near, key=lambda c: -c.samples_per_s)
    by_cost = sorted(near, key=lambda c: (cost(c.settings, user_batch), -c.samples_per_s))
    chosen: list[Candidate] = []
    seen: set[str] = set()
    for candidate in _alternate(by_speed, by_cost):
        if candidate.settings.key() not in seen:
            seen.add(candidate.settings.key())
            chosen.append(candidate)
    chosen = chosen[: OVERLAP_FACTOR * limit]
    for candidate in sorted(merged, key=lambda c: -c.samples_per_s):
        if len(chosen) >= limit:
            break
        if candidate.settings.key() not in seen:
            seen.add(candidate.settings.key())
            chosen.append(candidate)
    return chosen


def _alternate(first: Sequence[Candidate], second: Sequence[Candidate]) -> Iterable[Candidate]:
    for pair in zip_longest(first, second):
        yield from (candidate for candidate in pair if candidate is not None)
