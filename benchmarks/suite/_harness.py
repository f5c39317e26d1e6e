"""The measuring instrument every strategy shares: autotune's own probe.

A :class:`Harness` holds one workload's probe template (the config, the
device, the profile's windows, the seed and the memory limit) and measures a
config in one of three modes, each probe a fresh process:

- ``train``: the real DataLoader and the model (what every strategy is judged on);
- ``compute``: the model on batches already in memory (the compute ceiling);
- ``data``: the DataLoader alone (the data ceiling, and what loader-only tuners see).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from autotune import SearchOptions, Settings
from autotune.probe import Mode, ProbeRequest, WorkloadSource, run_probe
from benchmarks.common._workloads import Profile

_MEMORY_SHARE = 0.8


@dataclasses.dataclass(frozen=True, kw_only=True)
class Measured:
    """One probe of one config: its throughput, or why it failed."""

    settings: Settings
    mode: str
    samples_per_s: float
    """Samples the model consumed per second (loaded per second in data mode); 0 if failed."""
    wall_s: float
    """Wall time of the probe, process start to end."""
    wait_fraction: float = 0.0
    window_spread: float = 0.0
    cpu_busy: float | None = None
    """Mean share (0-1) of the probe's CPUs that were busy over its windows, if known."""
    failure: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": self.settings.to_dict(),
            "describe": self.settings.describe(),
            "mode": self.mode,
            "samples_per_s": self.samples_per_s,
            "wall_s": self.wall_s,
            "wait_fraction": self.wait_fraction,
            "window_spread": self.window_spread,
            "cpu_busy": self.cpu_busy,
            "failure": self.failure,
        }


Listener = Callable[[str, Measured], None]
"""Told about every probe: a label for progress lines, and what it measured."""


class Harness:
    """Measures configs of one workload with autotune's probe."""

    def __init__(
        self,
        config: Path,
        *,
        device: str,
        profile: Profile,
        seed: int,
        listener: Listener | None = None,
    ) -> None:
        self.config = config
        self.profile = profile
        self.template = ProbeRequest(
            source=WorkloadSource(config_path=str(config.resolve())),
            settings=Settings(batch_size=1),
            device=device,
            window_seconds=profile.window_seconds,
            max_windows=profile.max_windows,
            warmup_seconds=profile.warmup_seconds,
            stall_timeout=SearchOptions().trial_timeout,
            memory_limit=int(psutil.virtual_memory().available * _MEMORY_SHARE),
            seed=seed,
        )
        self.listener = listener
        self.probes = 0
        self.probe_seconds = 0.0

    def check(self, settings: Settings) -> dict[str, Any]:
        """Build the workload and run one step (the data is made here, once); returns
        what the probe learned of the workload.

        Raises:
            RuntimeError: the workload does not run.
        """
        result = run_probe(dataclasses.replace(self.template, settings=settings, mode="check"))
        if result.failure is not None:
            raise RuntimeError(f"{self.config.name}: {result.failure.message}")
        return dict(result.info)

    def measure(self, settings: Settings, mode: Mode = "train", label: str = "") -> Measured:
        """Probe ``settings`` fully (no pruning) in ``mode``."""
        began = time.perf_counter()
        result = run_probe(dataclasses.replace(self.template, settings=settings, mode=mode))
        wall = time.perf_counter() - began
        figures = result.figures
        cpu_percent = figures.monitor.cpu_mean_percent if figures.monitor else None
        measured = Measured(
            settings=settings,
            mode=mode,
            samples_per_s=figures.samples_per_s if result.ok else 0.0,
            wall_s=wall,
            wait_fraction=figures.wait_fraction,
            window_spread=figures.window_spread,
            cpu_busy=None if cpu_percent is None else cpu_percent / 100,
            failure=None if result.failure is None else result.failure.message,
        )
        self.probes += 1
        self.probe_seconds += wall
        if self.listener is not None:
            self.listener(label, measured)
        return measured
