"""loadtune's answer, as the plain-loop checker measures it.

loadtune recommends a ``Knobs`` value (``loadtune/knobs.py``): DataLoader arguments, the
training threads, and three knobs of the training loop. The checker measures
:class:`autotune.Settings`, so each knob is carried over where the checker has it and
named in a note where it does not: the record then says what the measured config left
out. Pure functions of the answer's JSON, so the tests translate made-up answers
without loadtune installed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from autotune.settings._settings import AmpMode, Settings

LOADER_KNOBS = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory")
CARRIED = (*LOADER_KNOBS, "batch_size", "num_threads", "amp", "compile", "non_blocking")
"""Every knob loadtune 0.3.0 recommends; another is named in a note and left out."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PeerChoice:
    """What a user of loadtune trains with after its run, as the checker measures it."""

    settings: Settings
    changed: bool
    """loadtune recommended a config other than its baseline (a best trial faster than
    the baseline); False: the user keeps the loader they had."""
    notes: tuple[str, ...] = ()
    """What loadtune recommended that the checker cannot express, or why nothing was."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": self.settings.to_dict(),
            "describe": self.settings.describe(),
            "changed": self.changed,
            "notes": list(self.notes),
        }


def recommended(answer: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """The knobs loadtune leaves a user with, and whether they are a change: its best
    trial where that trial beat the baseline (what its command line prints as "best
    overall"), else the baseline's (loadtune's Python API starts from ``Knobs()``: no
    workers, the workload's batch size, torch's threads). A failed run recommends
    nothing, so the user keeps the baseline."""
    baseline = answer.get("baseline") or {}
    best = answer.get("best")
    if answer.get("error") or not best:
        return dict(baseline.get("knobs") or {}), False
    if best["throughput"] > baseline.get("throughput", 0.0):
        return dict(best["knobs"]), True
    return dict(baseline.get("knobs") or {}), False


def _amp(knobs: Mapping[str, Any], device: str) -> tuple[AmpMode, list[str]]:
    """loadtune's AMP as the checker's mode: it autocasts to bf16 on a CPU and fp16 on
    CUDA, and not at all elsewhere (MPS)."""
    if not knobs.get("amp"):
        return "off", []
    kind = device.split(":")[0]
    if kind == "cpu":
        return "bf16", []
    if kind == "cuda":
        return "fp16", []
    return "off", [f"amp: loadtune autocasts only on a CPU or CUDA, not on {device}; measured off"]


def _copies(knobs: Mapping[str, Any], device: str) -> list[str]:
    """The checker copies a batch non-blocking exactly when memory is pinned on CUDA;
    where loadtune's non_blocking differs from that, a note says so."""
    non_blocking = bool(knobs.get("non_blocking"))
    pinned_cuda = bool(knobs.get("pin_memory")) and device.startswith("cuda")
    if non_blocking and not pinned_cuda:
        return [
            "non_blocking=True: the checker copies non-blocking only from pinned memory on "
            "CUDA; measured with blocking copies"
        ]
    if pinned_cuda and not non_blocking:
        return [
            "pin_memory without non_blocking: the checker copies non-blocking from pinned "
            "memory; measured non-blocking"
        ]
    return []


def to_settings(
    knobs: Mapping[str, Any], user_batch: int, device: str
) -> tuple[Settings, list[str]]:
    """loadtune's ``Knobs`` (as ``Knobs.to_dict`` writes them) as checker settings, and
    a note for each knob the checker cannot express.

    Args:
        knobs: loadtune's recommendation; a knob left out has loadtune's default.
        user_batch: the workload's batch size, which loadtune's ``batch_size=None`` means.
        device: the device the checker trains on ("cpu", "cuda", ...).
    """
    workers = int(knobs.get("num_workers") or 0)
    amp, notes = _amp(knobs, device)
    threads = knobs.get("num_threads")
    settings = Settings(
        batch_size=int(knobs.get("batch_size") or user_batch),
        num_workers=workers,
        prefetch_factor=knobs.get("prefetch_factor") if workers else None,
        persistent_workers=bool(knobs.get("persistent_workers")) if workers else False,
        pin_memory=bool(knobs.get("pin_memory")),
        amp=amp,
        threads=None if threads is None else max(1, int(threads)),  # loadtune's own floor
    )
    if knobs.get("compile"):
        notes.append("compile=True (torch.compile): not a knob the checker has; measured without")
    notes += _copies(knobs, device)
    notes += [
        f"{name}={value!r}: a knob this adapter does not know; measured without"
        for name, value in knobs.items()
        if name not in CARRIED and value not in (None, False)
    ]
    return settings, notes


def choice(answer: Mapping[str, Any], user_batch: int, device: str) -> PeerChoice:
    """What a user of loadtune trains with after the run in ``answer`` (the child's JSON,
    :mod:`benchmarks.peer._child`), as checker settings with their notes."""
    knobs, changed = recommended(answer)
    settings, notes = to_settings(knobs, user_batch, device)
    if answer.get("error"):
        notes.insert(0, "loadtune failed, so a user keeps the default loader")
    elif not changed:
        notes.insert(0, "no trial beat loadtune's baseline: no change")
    peer_device = (answer.get("baseline") or {}).get("device")
    if peer_device and peer_device != device.split(":")[0]:
        notes.append(f"loadtune measured on {peer_device}, the checker trains on {device}")
    return PeerChoice(settings=settings, changed=changed, notes=tuple(notes))
