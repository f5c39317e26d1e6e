"""The configs a search with nothing to go on tries first: the common rule of thumb and
the points around it that single noisy windows would sample too seldom (the runs:
``docs/decisions.md``). A study that earlier studies lend finalists to starts from those
instead (:mod:`autotune.pipeline._starts`)."""

from __future__ import annotations

import dataclasses

from autotune.machine import Machine
from autotune.settings import Settings
from autotune.space import Space


def usual_starts(
    space: Space,
    machine: Machine,
    batch_size: int,
    *,
    cpus: int | None = None,
    leading_model: Settings | None = None,
    wide_workers: int | None = None,
    loader_workers: int | None = None,
) -> tuple[Settings, ...]:
    """Configs tried first, in this order: the common rule of thumb (a worker per CPU of
    the rank's share, ``cpus``, by default the machine's, training on every thread);
    ``wide_workers`` when the worker sweep widened the range to that many (so the search
    measures the region the sweep opened); the loader at its best, ``loader_workers``
    (the worker count the sweep measured fastest alone), training on the fewest threads
    so the workers have the CPUs; the rule of thumb's workers training on the fewest
    threads; the CPUs split between training and loading (the fewest training threads, a
    worker on each CPU they leave: workers and training threads share the cores, which
    the rule of thumb oversubscribes); no workers. Each comes with the batch size, AMP
    and threads of ``leading_model``, the fastest compute ceiling (where the loader
    bounds the training, the largest batch size's), when the bounds measured one (the
    starts on the fewest threads keep their threads), then with the user's own
    (:func:`_at_the_leading_model`).

    The loader's best is there because exploration prunes on single windows of a noisy
    machine and may sample that region too seldom; a worker per CPU on the fewest
    threads lies between the loader's best and the split, where neither of them nor the
    rule of thumb measures it."""
    share = cpus or machine.cpus
    threads = [t for t in space.threads.values() if isinstance(t, int)]
    rule_of_thumb = Settings(
        batch_size=batch_size,
        num_workers=share,
        prefetch_factor=2,
        persistent_workers=True,
        pin_memory=machine.accelerator != "cpu",
        threads=max(threads) if threads else None,
    )
    starts = [rule_of_thumb]
    if wide_workers is not None:
        starts.append(dataclasses.replace(rule_of_thumb, num_workers=wide_workers))
    own_threads = _on_the_fewest_threads(rule_of_thumb, share, threads, loader_workers)
    starts.extend(own_threads)
    no_workers = dataclasses.replace(
        rule_of_thumb, num_workers=0, prefetch_factor=None, persistent_workers=False
    )
    starts.append(no_workers)
    if leading_model is not None:
        starts = _at_the_leading_model(starts, own_threads, no_workers, leading_model)
    snapped = (space.snap(s) for s in starts)
    return tuple({s.key(): s for s in snapped}.values())


def _on_the_fewest_threads(
    rule_of_thumb: Settings, share: int, threads: list[int], loader_workers: int | None
) -> list[Settings]:
    """The starts that train on the fewest threads, so that workers have the CPUs: the
    loader at its best, the rule of thumb's workers, and the CPUs split between the
    two; those the space and the sweep allow, in that order."""
    fewest = min(threads) if threads else None
    starts = []
    if loader_workers is not None and loader_workers > 0:
        starts.append(
            dataclasses.replace(rule_of_thumb, num_workers=loader_workers, threads=fewest)
        )
    if fewest is not None and fewest < max(threads):
        starts.append(dataclasses.replace(rule_of_thumb, threads=fewest))
    if fewest is not None and share > fewest:
        starts.append(
            dataclasses.replace(rule_of_thumb, num_workers=share - fewest, threads=fewest)
        )
    return starts


def _at_the_leading_model(
    starts: list[Settings],
    own_threads: list[Settings],
    no_workers: Settings,
    leading_model: Settings,
) -> list[Settings]:
    """``starts`` at the batch size and AMP of ``leading_model`` first (its threads too,
    but for ``own_threads``, which keep theirs), then as they were. No workers at the
    leading batch size and AMP is also tried on every thread, when the leading model
    had fewer: without workers the training has the CPUs to itself, and ceilings of two
    thread counts are often within each other's noise, so the one measured fastest may
    not be."""
    leading = [
        dataclasses.replace(
            s,
            batch_size=leading_model.batch_size,
            amp=leading_model.amp,
            threads=s.threads if any(s is o for o in own_threads) else leading_model.threads,
        )
        for s in starts
    ]
    alone = dataclasses.replace(
        no_workers, batch_size=leading_model.batch_size, amp=leading_model.amp
    )
    return [*leading, alone, *starts]
