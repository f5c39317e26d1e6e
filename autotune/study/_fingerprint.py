"""Which study a search may add to: the same workload, machine and placement, or
the figures would not compare."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from autotune._errors import StudyError
from autotune.machine import Machine
from autotune.probe import Placement
from autotune.space import Space
from autotune.study._attrs import STUDY_FORMAT
from autotune.study._location import StudyLocation
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
    path: StudyLocation,
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
    changed = workload_changes(meta, info)
    if changed:
        raise StudyError(
            f"study {path} was tuned on another workload ({'; '.join(changed)}); its figures "
            "would not compare. Give another --study name."
        )
    differences = Machine.from_dict(meta.get("machine", {})).differences(machine)
    if differences:
        near = not seed_differences(meta, machine)
        hint = f", with --warm-from {path} to try its finalists first" if near else ""
        raise StudyError(
            f"study {path} was measured on another machine ({'; '.join(differences)}); its "
            f"figures would not compare. Give another --study name{hint}."
        )


def workload_changes(meta: Mapping[str, Any], info: Mapping[str, Any]) -> list[str]:
    """How the workload the preflight read (``info``) differs from the one that the study
    with attributes ``meta`` measured, one "key old -> new" each; empty when the same."""
    before = meta.get("workload", {})
    return [
        f"{key} {before.get(key)!r} -> {info.get(key)!r}"
        for key in _WORKLOAD_IDENTITY
        if key in before and before.get(key) != info.get(key)
    ]


_KINDS = ("dataset_type", "model_type", "iterable")
FAR_FACTOR = 2.0
"""How far apart two workloads' model sizes or sample sizes may be for one's finalists to
seed a search of the other: within a factor of two each."""


def workload_distance(meta: Mapping[str, Any], info: Mapping[str, Any]) -> float | str:
    """How far the workload a study measured (attributes ``meta``) lies from ``info``: 0
    for the same sizes, 1 for a model or a sample twice (or half) as large; or, when the
    two cannot share settings, why (another dataset or model class, or sizes more than
    :data:`FAR_FACTOR` apart). The dataset's length does not count: it moves the epoch's
    length, not where the best loader lies."""
    before = meta.get("workload", {})
    for key in _KINDS:
        if key in before and before.get(key) != info.get(key):
            return f"another {key.replace('_', ' ')} ({before.get(key)!r}, here {info.get(key)!r})"
    ratios = {
        "model": _ratio(before.get("parameters"), info.get("parameters")),
        "sample": _ratio(_sample_bytes(before), _sample_bytes(info)),
    }
    for what, ratio in ratios.items():
        if ratio is not None and ratio > FAR_FACTOR:
            return f"a {what} {ratio:.1f}x the size of this one's (at most {FAR_FACTOR:g}x)"
    known = [math.log2(ratio) for ratio in ratios.values() if ratio is not None]
    return max(known, default=0.0)


def _sample_bytes(info: Mapping[str, Any]) -> float | None:
    size, samples = info.get("batch_bytes"), info.get("batch_samples")
    if not isinstance(size, int | float) or not isinstance(samples, int | float) or samples <= 0:
        return None
    return float(size) / float(samples)


def _ratio(one: Any, other: Any) -> float | None:
    """The larger of two positive sizes over the smaller; None when either is unknown."""
    if not isinstance(one, int | float) or not isinstance(other, int | float):
        return None
    if one <= 0 or other <= 0:
        return None if one == other else math.inf
    return max(one, other) / min(one, other)


def seed_differences(meta: Mapping[str, Any], machine: Machine) -> list[str]:
    """What differs between the machine that measured the study with attributes ``meta``
    and ``machine`` in ways that stop the study's finalists from seeding a search there:
    the CPU count, the accelerator and the GPU models. Another torch, CPU model or amount
    of RAM changes the figures, not where the best settings lie."""
    before = Machine.from_dict(meta.get("machine", {}))
    differences = []
    if before.cpus != machine.cpus:
        differences.append(f"CPUs {before.cpus} -> {machine.cpus}")
    if before.accelerator != machine.accelerator:
        differences.append(f"device {before.accelerator} -> {machine.accelerator}")
    if before.gpus != machine.gpus:
        differences.append(f"GPUs {list(before.gpus)} -> {list(machine.gpus)}")
    return differences
