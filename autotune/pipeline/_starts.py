"""Where a search starts, and the record of it that ``autotune show`` reads.

Two sources of starting points besides the rule of thumb and the bounds' leaders: a
study's own earlier answer, measured again first (:mod:`autotune.decide`'s recheck), and
another study's finalists, tried first by a new study (``warm_start``): a study of the
same workload measured with another torch, or kept under another name, on a machine
with the same CPUs and GPUs, where the best settings are likely near.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna

from autotune._errors import ConfigError, StudyError
from autotune.decide import earlier_answer, earlier_finalists
from autotune.machine import Machine
from autotune.settings import Settings
from autotune.space import Space
from autotune.study import (
    STARTS,
    open_study,
    read_meta,
    resolve,
    seed_differences,
    workload_changes,
)


def seeds_from(
    name: str,
    *,
    study: optuna.Study,
    path: Path,
    info: Mapping[str, Any],
    machine: Machine,
    space: Space,
) -> tuple[tuple[Settings, ...], str]:
    """The finalists of the study ``name`` (a name or .db path) that ``space`` holds,
    fastest first, for the new ``study`` at ``path`` to try first, and one line saying
    where they came from.

    Raises:
        ConfigError: ``study`` has trials already, or ``name`` is that study itself.
        StudyError: ``name`` cannot be read, holds no finished search, measured another
            workload, or was measured with other CPUs or GPUs.
    """
    source, source_name = resolve(name, Path(name).stem)
    if source.resolve() == path.resolve():
        raise ConfigError(
            f"--warm-start {name} is the study this search adds to; a study's own earlier "
            "answer is measured again first without the flag."
        )
    if study.get_trials(deepcopy=False):
        raise ConfigError(
            f"--warm-start seeds a new study, and {path} has trials already; give another "
            "--study name, or leave --warm-start out to continue this one."
        )
    other = open_study(source, source_name, create=False)
    meta = read_meta(other)
    changed = workload_changes(meta, info)
    if changed:
        raise StudyError(
            f"--warm-start {name}: that study tuned another workload ({'; '.join(changed)}); "
            "its finalists would not carry over."
        )
    apart = seed_differences(meta, machine)
    if apart:
        raise StudyError(
            f"--warm-start {name}: that study was measured on a machine with other CPUs or "
            f"GPUs ({'; '.join(apart)}), where the best settings lie elsewhere; search "
            "without --warm-start."
        )
    earlier = earlier_answer(other)
    if earlier is None:
        raise StudyError(
            f"--warm-start {name}: that study holds no confirmed answer to start from; "
            "finish its search first (or search without --warm-start)."
        )
    snapped = (space.snap(s) for s in earlier_finalists(earlier))
    seeds = tuple({s.key(): s for s in snapped if space.contains(s)}.values())
    differences = Machine.from_dict(meta.get("machine", {})).differences(machine)
    where = f"measured with {'; '.join(differences)}" if differences else "on this machine"
    return seeds, f"the {len(seeds)} finalist(s) of {source} ({where}) tried first"


def record_start(study: optuna.Study, entry: Mapping[str, Any]) -> None:
    """Add ``entry`` (where this search started) to the study's list of starts."""
    starts = list(study.user_attrs.get(STARTS) or [])
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    starts.append({"at": stamp, **entry})
    study.set_user_attr(STARTS, starts)
