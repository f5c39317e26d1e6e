"""Where a search starts, and the record of it that ``autotune show`` reads.

Two sources of starting points besides the usual ones
(:mod:`autotune.pipeline._usual_starts`): a study's own earlier answer, measured again
first (:mod:`autotune.pipeline._recheck`), and earlier studies' finalists, tried by a
new study instead of the usual starts (``warm_from``; by default the other studies of
the same database): studies of a close workload measured on a machine with the same
CPUs and GPUs, where the best settings are likely near, and which measured the usual
starts already.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

import optuna

from autotune._errors import ConfigError, StudyError
from autotune.decide import earlier_answer, earlier_finalists
from autotune.machine import Machine
from autotune.pipeline._state import SearchState
from autotune.settings import Settings
from autotune.space import Space
from autotune.study import (
    Attr,
    StudyLocation,
    locate,
    open_study,
    read_meta,
    seed_differences,
    study_names,
    workload_distance,
)


@dataclasses.dataclass(frozen=True)
class WarmStart:
    """The configs that earlier studies lend a new one to measure first, and one line for
    each study looked at: what it gave, or why it gave nothing."""

    seeds: tuple[Settings, ...]
    notes: tuple[str, ...]
    sources: tuple[str, ...]
    """The studies whose finalists were taken, as the notes name them."""


def seeds(state: SearchState) -> tuple[Settings, ...]:
    """The finalists of the earlier studies ``warm_from`` names (by default the other
    studies in the same storage) to try first, each study's line said and those that
    lent configs recorded in the study."""
    found = warm_from_studies(
        state.options.warm_from,
        study=state.study,
        where=state.where,
        info=state.info,
        machine=state.machine,
        space=state.space,
        most=2 * state.options.finalists,
    )
    for note in found.notes:
        state.progress.message(f"warm start: {note}")
    if found.sources:
        note = "; ".join(found.notes)
        record_start(state.study, {"source": ", ".join(found.sources), "note": note})
    return found.seeds


def warm_from_studies(
    named: Sequence[str] | None,
    *,
    study: optuna.Study,
    where: StudyLocation,
    info: Mapping[str, Any],
    machine: Machine,
    space: Space,
    most: int,
) -> WarmStart:
    """The finalists of the earlier studies ``named`` (names, .db paths or storage URLs;
    None: the other studies in ``where``'s storage) that were measured on a machine like
    ``machine``, of a workload close to ``info`` (:func:`~autotune.study.workload_distance`),
    which ``space`` holds: the closest study's first, at most ``most``, for the new
    ``study`` to try first.

    A study measured on another machine or of a far workload is passed over with a line
    saying why; so is one that cannot be read, unless it was named.

    Raises:
        ConfigError: a study was named but ``study`` has trials already, or a name is
            that study itself.
        StudyError: a study named cannot be read.
    """
    explicit = named is not None
    for source in [locate(name, None) for name in named or ()]:
        if _same_storage(source, where) and source.name in (None, where.name):
            raise ConfigError(
                f"--warm-from {source} is the study this search adds to; a study's own "
                "earlier answer is measured again first without the flag."
            )
    if study.get_trials(deepcopy=False):
        if named:
            raise ConfigError(
                f"--warm-from seeds a new study, and {where} has trials already; give another "
                "--study name, or leave --warm-from out to continue this one."
            )
        return WarmStart(seeds=(), notes=(), sources=())
    sources = [locate(name, None) for name in named] if named is not None else _neighbours(where)
    taken: list[tuple[float, str, tuple[Settings, ...], str]] = []
    passed: list[str] = []
    for source in sources:
        judged = _judge(source, info=info, machine=machine, space=space, explicit=explicit)
        if isinstance(judged, str):
            passed.append(f"{_label(source)}: {judged}")
        else:
            taken.append((judged[0], _label(source), judged[1], judged[2]))
    taken.sort(key=lambda entry: entry[0])
    merged = {s.key(): s for _, _, seeds, _ in taken for s in seeds}
    seeds = tuple(merged.values())[:most]
    notes = _passed_over(passed, explicit=explicit)
    for distance, label, found, machine_note in taken:
        kind = "the same workload" if distance == 0 else f"a workload {2**distance:.2f}x apart"
        notes.append(
            f"the {len(found)} finalist(s) of {label} ({kind}, {machine_note}) tried first"
        )
    return WarmStart(seeds=seeds, notes=tuple(notes), sources=tuple(t[1] for t in taken))


def _passed_over(passed: list[str], *, explicit: bool) -> list[str]:
    """A line for each study named but passed over; for the studies a database holds
    beside the new one, one line for all (a team's database may hold many)."""
    if explicit or len(passed) <= 1:
        return [f"{entry} (passed over)" for entry in passed]
    return [f"{len(passed)} other studies passed over, first {passed[0]}"]


def _neighbours(where: StudyLocation) -> list[StudyLocation]:
    """The other studies kept in ``where``'s storage (none when it cannot be read yet)."""
    try:
        names = study_names(where)
    except StudyError:
        return []
    return [where.named(name) for name in names if name != where.name]


def _label(source: StudyLocation) -> str:
    return f"study {source.name!r} in {source}" if source.name else str(source)


def _judge(
    source: StudyLocation,
    *,
    info: Mapping[str, Any],
    machine: Machine,
    space: Space,
    explicit: bool,
) -> tuple[float, tuple[Settings, ...], str] | str:
    """The distance to ``source``'s workload, its finalists that ``space`` holds and how
    its machine differed; or why it lends none."""
    try:
        other = open_study(source, create=False)
        meta = read_meta(other)
    except StudyError as error:
        if explicit:
            raise StudyError(f"--warm-from {source}: {error}") from None
        return f"cannot be read ({error})"
    apart = seed_differences(meta, machine)
    if apart:
        return f"measured on a machine with other CPUs or GPUs ({'; '.join(apart)})"
    distance = workload_distance(meta, info)
    if isinstance(distance, str):
        return f"it tuned {distance}"
    earlier = earlier_answer(other)
    if earlier is None:
        return "it holds no confirmed answer yet"
    snapped = (space.snap(s) for s in earlier_finalists(earlier))
    seeds = tuple({s.key(): s for s in snapped if space.contains(s)}.values())
    if not seeds:
        return "none of its finalists lies in this search's space"
    differences = Machine.from_dict(meta.get("machine", {})).differences(machine)
    where = f"measured with {'; '.join(differences)}" if differences else "on this machine"
    return distance, seeds, where


def _same_storage(one: StudyLocation, other: StudyLocation) -> bool:
    if one.path is not None and other.path is not None:
        return one.path.resolve() == other.path.resolve()
    return one.url == other.url


def record_start(study: optuna.Study, entry: Mapping[str, Any]) -> None:
    """Add ``entry`` (where this search started) to the study's list of starts."""
    starts = list(study.user_attrs.get(Attr.STARTS) or [])
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    starts.append({"at": stamp, **entry})
    study.set_user_attr(Attr.STARTS, starts)
