"""What a search settles before it measures anything: the workload, the space and the
search options from a config or Python arguments, where the probes run (placement), the
machine, the space on it, and the study's file. Shared by the search and its dry run."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune._errors import ConfigError, SpaceError
from autotune.machine import Machine, detect_machine, discover, read_topology, usable_cpus
from autotune.probe import Placement
from autotune.space import Space, build_space
from autotune.study import StudyLocation, locate
from autotune.workload import SearchOptions, Workload, ensure_picklable, load_config


@dataclasses.dataclass(frozen=True)
class Setup:
    """Where and over what a search measures."""

    placement: Placement
    machine: Machine
    device: str
    space: Space
    study: StudyLocation


def inputs(
    config: str | Path | None,
    pieces: Mapping[str, Any],
    *,
    space: Mapping[str, Any] | None,
    options: Mapping[str, Any],
) -> tuple[Workload, Mapping[str, Any], SearchOptions]:
    """The workload, the user's space and the search options of ``autotune.search``'s
    arguments: a config file, or the workload's ``pieces`` (the :class:`Workload` fields
    ``autotune.search`` takes, None where not given), of which ``dataset`` and ``model``
    are needed. A ``device`` given with a config file wins over the config's."""
    device = pieces.get("device")
    if config is not None:
        if pieces.get("dataset") is not None or pieces.get("model") is not None:
            raise ConfigError("give a config file or dataset= and model=, not both.")
        loaded = load_config(config)
        workload = loaded.workload
        if device is not None:
            workload = dataclasses.replace(workload, device=device)
        user_space: Mapping[str, Any] = {**loaded.space, **(space or {})}
        try:
            return workload, user_space, SearchOptions.from_mapping(loaded.search, **options)
        except ConfigError as error:
            raise ConfigError(f"{workload.origin()}: {error}") from None
    if pieces.get("dataset") is None or pieces.get("model") is None:
        raise ConfigError("nothing to tune: give a config file, or both dataset= and model=.")
    given = {name: value for name, value in pieces.items() if value is not None}
    workload = Workload(**{**given, "name": pieces.get("name") or "workload"})
    ensure_picklable(workload)
    return workload, dict(space or {}), SearchOptions.from_mapping({}, **options)


def prepare(workload: Workload, user_space: Mapping[str, Any], options: SearchOptions) -> Setup:
    """Placement, machine, device, space and study file of a search (nothing measured).

    Raises:
        ConfigError: the GPUs or ranks asked for are not there.
        SpaceError: the space is contradictory or out of range.
    """
    discovery = discover()
    try:
        placement = Placement.plan(
            device=workload.device,
            gpus=options.gpus,
            ranks=options.ranks,
            discovery=discovery,
            cpus=affinity(),
            usable=usable_cpus(),
            topology=read_topology(),
        )
    except ConfigError as error:
        raise ConfigError(f"{workload.origin()}: {error}") from None
    machine = detect_machine(placement.device or placement.device_type, discovery=discovery)
    device = workload.device or placement.device_type
    try:
        space = build_space(user_space, machine, workload.batch_size, rank_cpus=placement.rank_cpus)
    except SpaceError as error:
        raise SpaceError(f"{workload.origin()}: {error}") from None
    where = locate(options.study, workload.name, name=options.study_name)
    return Setup(placement, machine, device, space, where)


def affinity() -> list[int]:
    """The CPUs this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))
