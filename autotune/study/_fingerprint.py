"""Which study a search may add to: the same workload, machine and placement, or
the figures would not compare."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune._errors import StudyError
from autotune.machine import Machine
from autotune.probe import Placement
from autotune.space import Space
from autotune.study._study import STUDY_FORMAT
from autotune.workload import SearchOptions, Workload

_WORKLOAD_IDENTITY = ("dataset_type", "dataset_length", "model_type", "parameters")
_PLACEMENT_IDENTITY = ("device_type", "ranks", "rank_cpus", "gpus")


def study_meta(
    workload: Workload,
    machine: Machine,
    device: str,
    space: Space,
    options: SearchOptions,
    info: Mapping[str, Any],
    placement: Placement,
) -> dict[str, Any]:
    """The study attributes a search writes when it creates a study."""
    return {
        "placement": placement.to_dict(),
        "format": STUDY_FORMAT,
        "config": workload.config_path,
        "workload_name": workload.name,
        "batch_size": workload.batch_size,
        "device": device,
        "machine": machine.to_dict(),
        "workload": dict(info),
        "space": space.to_dict(),
        "options": {k: v for k, v in dataclasses.asdict(options).items() if k != "study"},
    }


def check_same_workload(
    meta: Mapping[str, Any],
    machine: Machine,
    info: Mapping[str, Any],
    path: Path,
    placement: Placement,
) -> None:
    """A study's figures only compare with new ones for the same workload, machine and
    placement (ranks, devices, CPUs per rank)."""
    if not meta:
        return
    was, now = meta.get("placement"), placement.to_dict()
    if was is not None and any(was.get(k) != now[k] for k in _PLACEMENT_IDENTITY):
        raise StudyError(
            f"study {path} was measured with {was['ranks']} rank(s) of {was['rank_cpus']} "
            f"CPU(s) on {was['gpus'] or was['device_type']}; this search runs "
            f"{now['ranks']} of {now['rank_cpus']} on {now['gpus'] or now['device_type']}, "
            "so the figures would not compare. Give another --study name."
        )
    before = meta.get("workload", {})
    changed = [
        f"{key} {before.get(key)!r} -> {info.get(key)!r}"
        for key in _WORKLOAD_IDENTITY
        if key in before and before.get(key) != info.get(key)
    ]
    if changed:
        raise StudyError(
            f"study {path} was tuned on another workload ({'; '.join(changed)}); its figures "
            "would not compare. Give another --study name."
        )
    differences = Machine.from_dict(meta.get("machine", {})).differences(machine)
    if differences:
        raise StudyError(
            f"study {path} was measured on another machine ({'; '.join(differences)}); its "
            "figures would not compare. Give another --study name."
        )
