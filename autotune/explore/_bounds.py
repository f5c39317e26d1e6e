"""Bounds: what the model can train at all, for each batch size, AMP mode and thread
count, measured before exploring.

The compute ceiling of a config is the model trained on batches already in
memory (probe mode "compute") with its batch size, AMP mode and threads; the
loader knobs cannot lift a config above it. Measured once per such combination
(a handful of short probes), the ceilings let the search

- skip a config whose ceiling lies below the band of the best measured so far
  (no loader setting can bring it into contention), and
- stop exploring once the best config is within the finalist band of the
  highest ceiling (no config can do much better).

The ceilings are kept in the study, so a resumed search does not measure them again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import optuna

from autotune._format import format_rate
from autotune.probe import Figures, ProbeRequest, run_probe
from autotune.progress._progress import Progress
from autotune.settings._settings import Settings
from autotune.space._space import Space

COMPUTE_CEILINGS = "autotune.compute_ceilings"
"""Study attribute: compute-ceiling figures by :func:`compute_key`."""
MAX_COMBINATIONS = 16
"""Above this many (batch size, AMP, threads) combinations, no bounds are measured."""
NOISE_MARGIN = 0.05
"""A ceiling measured in a few short windows may read this much low."""


def compute_key(settings: Settings) -> str:
    """What a compute ceiling depends on: batch size, AMP mode and training threads."""
    return f"batch={settings.batch_size} amp={settings.amp} threads={settings.threads}"


def compute_configs(space: Space) -> list[Settings]:
    """One config per (batch size, AMP, threads) combination of the space, no workers."""
    return [
        Settings(batch_size=batch, amp=amp, threads=threads)  # type: ignore[arg-type]
        for batch in space.batch_size.values()
        for amp in space.amp.values()
        for threads in space.threads.values()
    ]


@dataclasses.dataclass(frozen=True)
class Bounds:
    """Compute ceilings (samples/s) by :func:`compute_key`."""

    ceilings: Mapping[str, float]
    models: Mapping[str, Settings] = dataclasses.field(default_factory=dict)
    """The config measured for each key (no workers)."""

    def ceiling(self, settings: Settings) -> float | None:
        """The compute ceiling of ``settings``'s combination, if measured."""
        return self.ceilings.get(compute_key(settings))

    @property
    def highest(self) -> float:
        """The highest ceiling of the space."""
        return max(self.ceilings.values(), default=0.0)

    def fastest_model(self) -> Settings | None:
        """The (batch size, AMP, threads) combination with the highest ceiling."""
        if not self.ceilings:
            return None
        return self.models.get(max(self.ceilings, key=lambda k: self.ceilings[k]))

    def rules_out(self, settings: Settings, best: float | None, tolerance: float) -> str | None:
        """Why ``settings`` cannot come within ``tolerance`` of ``best``; None if it might."""
        ceiling = self.ceiling(settings)
        if ceiling is None or best is None:
            return None
        if ceiling * (1 + NOISE_MARGIN) >= best * (1 - tolerance):
            return None
        return (
            f"not run: the model alone trains {format_rate(ceiling)} samples/s with "
            f"{compute_key(settings)}, below the {format_rate(best * (1 - tolerance))} a "
            "config needs to be within the tolerance of the best so far"
        )

    def saturated(self, best: float | None, tolerance: float) -> bool:
        """Whether ``best`` is within the finalist band (twice the tolerance) of the
        highest ceiling, so that no config can do much better."""
        if best is None or not self.ceilings:
            return False
        return best >= (1 - 2 * tolerance) * self.highest


def measure_bounds(
    template: ProbeRequest,
    space: Space,
    study: optuna.Study,
    progress: Progress,
) -> tuple[Bounds | None, dict[str, Figures]]:
    """Measure (or read from the study) the compute ceiling of every combination.

    Returns the bounds (None when the space has too many combinations) and the
    figures by key, for the ceilings stage to reuse.
    """
    configs = compute_configs(space)
    if len(configs) > MAX_COMBINATIONS:
        progress.message(
            f"{len(configs)} (batch size, AMP, threads) combinations: too many to measure "
            "their compute ceilings first; exploring without bounds"
        )
        return None, {}
    stored: dict[str, Any] = dict(study.user_attrs.get(COMPUTE_CEILINGS) or {})
    figures = {key: Figures.from_dict(data) for key, data in stored.items()}
    missing = [c for c in configs if compute_key(c) not in figures]
    if missing:
        progress.phase(
            "bounds",
            f"the model alone on batches in memory, for {len(missing)} combination(s) of "
            "batch size, AMP and threads",
        )
        progress.plan("bounds", len(missing), None)
        short = dataclasses.replace(
            template, mode="compute", max_windows=max(3, template.max_windows // 3)
        )
        for settings in missing:
            result = run_probe(dataclasses.replace(short, settings=settings))
            key = compute_key(settings)
            if result.failure is None:
                figures[key] = result.figures
                rate = format_rate(result.figures.samples_per_s)
                progress.message(f"compute ceiling, {key}: {rate} samples/s")
            else:
                progress.message(f"compute ceiling, {key}: not measured ({result.failure.message})")
        study.set_user_attr(COMPUTE_CEILINGS, {key: f.to_dict() for key, f in figures.items()})
    models = {compute_key(c): c for c in configs}
    rates = {k: f.samples_per_s for k, f in figures.items() if k in models and f.samples_per_s > 0}
    return (Bounds(rates, models) if rates else None), figures
