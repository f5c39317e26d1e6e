"""The DDP stage: the chosen config run as real DDP on every rank, its DDP keywords tuned.

After choosing (every trial measured one rank with its share of the node), the
winner, and with ``ddp_finalists`` every finalist, is run as
DistributedDataParallel across all ranks (NCCL on GPUs, gloo on CPU), each
rank with its own loader and ``DistributedSampler``. That gives the aggregate
samples/s and the scaling efficiency: aggregate / (ranks x one rank alone).

Where the space samples the batch size, the chosen config is also run as DDP at the
next larger batch: each step's gradient all-reduce is a cost that one rank's probes
never pay, and a larger batch pays it for more samples. The larger batch is kept only
when its DDP figure beats the chosen one's beyond the noise, or by more than the
tolerance in a second round as well.

Then the DDP keywords that matter for this model are tuned, one at a time from
DDP's defaults, each measured: ``gradient_as_bucket_view`` and
``static_graph`` always; ``bucket_cap_mb`` when the gradients span more than
one bucket; buffer broadcasting when the model has buffers. A keyword keeps
its default unless another value is faster by more than the tolerance and the noise.
"""

from __future__ import annotations

import dataclasses
import inspect
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torch.nn.parallel import DistributedDataParallel

from autotune._format import format_rate
from autotune._noise import difference_error
from autotune._stages import Stage
from autotune.decide._choose import Candidate, cheapest_within
from autotune.probe import Figures, Measurement, Placement, ProbeRequest, run_probe
from autotune.progress import Progress
from autotune.result import DdpMeasurement, DdpResult
from autotune.settings import Settings
from autotune.workload import SearchOptions

if TYPE_CHECKING:
    from autotune.decide._confirm import Confirmed

BUCKET_CAP_MB = 25
"""DDP's default bucket size."""
BUCKET_CHOICES = (5, 100)
"""Bucket sizes tried besides the default."""
_MIB = 2**20


def buffer_keyword() -> str:
    """The DDP keyword that turns off broadcasting buffers each forward in this torch
    (``forward_sync_buffers`` replaced ``broadcast_buffers`` in recent versions)."""
    parameters = inspect.signature(DistributedDataParallel.__init__).parameters
    return "forward_sync_buffers" if "forward_sync_buffers" in parameters else "broadcast_buffers"


def default_kwargs(buffers: bool) -> dict[str, Any]:
    """DDP's own defaults for the knobs tuned here."""
    kwargs: dict[str, Any] = {
        "bucket_cap_mb": BUCKET_CAP_MB,
        "gradient_as_bucket_view": False,
        "static_graph": False,
    }
    if buffers:
        kwargs[buffer_keyword()] = True
    return kwargs


def knob_grid(info: dict[str, Any]) -> tuple[list[tuple[str, tuple[Any, ...]]], list[str]]:
    """The DDP knobs worth measuring for this model (with the values to try besides the
    default), and notes on those left out."""
    grid: list[tuple[str, tuple[Any, ...]]] = [
        ("gradient_as_bucket_view", (True,)),
        ("static_graph", (True,)),
    ]
    notes = []
    gradient_bytes = info.get("gradient_bytes")
    if gradient_bytes is None or gradient_bytes > min(BUCKET_CHOICES) * _MIB:
        grid.append(("bucket_cap_mb", BUCKET_CHOICES))
    else:
        notes.append(
            f"bucket_cap_mb: left out: the gradients ({gradient_bytes / 2**10:,.0f} KiB) fit "
            "in one bucket of any size tried."
        )
    if info.get("buffers"):
        grid.append((buffer_keyword(), (False,)))
    else:
        notes.append(f"{buffer_keyword()}: left out: the model has no buffers.")
    return grid, notes


def planned_probes(
    info: dict[str, Any], options: SearchOptions, finalists: int, *, batches: bool = False
) -> int:
    """DDP probes the stage will run, ``batches`` when the space samples the batch size
    (one more if the model turns out to have unused parameters, and a probe of one rank
    when a larger batch wins)."""
    knobs = sum(len(values) for _, values in knob_grid(info)[0]) if options.ddp_knobs else 0
    return (max(1, finalists) if options.ddp_finalists else 1) + int(batches) + knobs


def larger_batch(settings: Settings, batch_sizes: Sequence[int]) -> Settings | None:
    """``settings`` at the smallest of ``batch_sizes`` above its own, or None when it has
    the largest."""
    above = [size for size in batch_sizes if size > settings.batch_size]
    return dataclasses.replace(settings, batch_size=min(above)) if above else None


def keep_default_unless_faster(
    default: Any,
    base: Figures,
    tried: Sequence[tuple[Any, Figures | None]],
    tolerance: float,
) -> Any:
    """The default value, unless a tried value beat it by more than ``tolerance`` and
    more than twice the noise of the two measurements (their windows' spread over the
    square root of their count); then the fastest such value. A failed try (None) never
    wins."""
    choice, best = default, base.samples_per_s
    for value, figures in tried:
        if figures is None:
            continue
        margin = max(tolerance, 2.0 * _noise(base, figures))
        rate = figures.samples_per_s
        if rate > base.samples_per_s * (1.0 + margin) and rate > best:
            choice, best = value, rate
    return choice


def _noise(a: Figures, b: Figures) -> float:
    """Relative standard error of the difference of two probes' throughputs."""
    return difference_error(*((f.window_spread, len(f.windows)) for f in (a, b)))


class _Prober:
    """Runs DDP probes of one search and keeps every measurement."""

    def __init__(self, placement: Placement, template: ProbeRequest, progress: Progress) -> None:
        self.placement = placement
        self.template = template
        self.progress = progress
        self.measurements: list[DdpMeasurement] = []

    def __call__(self, settings: Settings, kwargs: dict[str, Any], role: str) -> DdpMeasurement:
        request = self.placement.ddp_request(
            dataclasses.replace(self.template, settings=settings), kwargs
        )
        result = run_probe(request)
        measurement = DdpMeasurement(
            settings=settings,
            kwargs=dict(kwargs),
            figures=result.figures,
            failure=result.failure,
            role=role,
        )
        self.measurements.append(measurement)
        changed = ", ".join(f"{k}={v!r}" for k, v in sorted(kwargs.items()))
        outcome = (
            f"FAILED ({result.failure.kind}): {result.failure.message}"
            if result.failure
            else f"{format_rate(result.figures.samples_per_s)} samples/s"
        )
        self.progress.message(f"ddp {role:<8} {settings.describe()} [{changed}]  {outcome}")
        return measurement


@dataclasses.dataclass(frozen=True)
class DdpSetup:
    """What the DDP stage runs on: the ranks, the probe every rank runs, what the probes
    learnt of the model (``buffers``, ``gradient_bytes``, ``allocator``), the user's own
    batch and the batch sizes the space samples (a larger one is tried when there are
    several)."""

    placement: Placement
    template: ProbeRequest
    info: dict[str, Any]
    user_batch_size: int
    batch_sizes: Sequence[int] = ()


def run_ddp_stage(
    setup: DdpSetup,
    *,
    winner: Measurement,
    finalists: Sequence[Measurement],
    options: SearchOptions,
    progress: Progress,
    later: int = 0,
) -> tuple[Measurement, DdpResult]:
    """DDP-probe the winner (or every finalist) and the pick at the next larger of
    ``batch_sizes``, tune the DDP keywords, and return the winner (another finalist, or
    the larger batch measured again on one rank, when DDP figures chose it) with the
    ``ddp`` section, whose settings spell out the ranks' threads (:func:`rank_threads`);
    ``later`` probes follow the stage (for the progress estimate)."""
    placement = setup.placement
    probe = _Prober(placement, setup.template, progress)
    contenders = list(finalists) if options.ddp_finalists and finalists else [winner]
    if winner.settings not in [c.settings for c in contenders]:
        contenders.insert(0, winner)
    progress.phase(
        Stage.DDP,
        f"{len(contenders)} config(s) as DDP across {placement.describe()} ({placement.backend})",
    )
    batches = len(setup.batch_sizes) > 1
    progress.plan(
        Stage.DDP,
        planned_probes(setup.info, options, len(contenders), batches=batches),
        None,
        later=later,
    )
    base, runs, notes = _run_contenders(probe, contenders, winner, bool(setup.info.get("buffers")))
    measured = [Candidate(m.settings, m.samples_per_s) for m in runs.values() if m.samples_per_s]
    if len(measured) > 1:
        pick = cheapest_within(measured, options.tolerance, user_batch=setup.user_batch_size)
        winner = next(c for c in contenders if c.settings == pick.settings)
    chosen = runs[winner.settings.key()]
    larger = larger_batch(winner.settings, setup.batch_sizes) if chosen.failure is None else None
    gain = None
    if larger is not None:
        winner, chosen, gain = _try_larger_batch(
            probe, winner, chosen, larger, base, placement, setup.template, options.tolerance
        )
    kwargs = dict(base)
    if chosen.failure is None and options.ddp_knobs:
        chosen, kwargs, knob_notes = _tune_knobs(
            probe, chosen, kwargs, setup.info, options.tolerance
        )
        notes += knob_notes
    return winner, _result(setup, winner, chosen, kwargs, gain, probe, notes)


def _run_contenders(
    probe: _Prober, contenders: Sequence[Measurement], winner: Measurement, buffers: bool
) -> tuple[dict[str, Any], dict[str, DdpMeasurement], list[str]]:
    """Each contender as DDP with DDP's defaults; the keywords every run then uses (with
    ``find_unused_parameters`` on once a run asked for it), the runs by config key, and
    the notes."""
    base = default_kwargs(buffers)
    notes: list[str] = []
    runs: dict[str, DdpMeasurement] = {}
    for contender in contenders:
        role = "winner" if contender.settings == winner.settings else "finalist"
        run = probe(contender.settings, base, role)
        if run.failure is not None and "find_unused_parameters" in run.failure.message:
            # DDP's own advice: some parameters get no gradient in a step.
            base = {**base, "find_unused_parameters": True}
            notes.append("find_unused_parameters=True: some parameters get no gradient.")
            run = probe(contender.settings, base, role)
        runs[contender.settings.key()] = run
    return base, runs, notes


def _result(
    setup: DdpSetup,
    winner: Measurement,
    chosen: DdpMeasurement,
    kwargs: dict[str, Any],
    gain: float | None,
    probe: _Prober,
    notes: list[str],
) -> DdpResult:
    """The ``ddp`` section of the result for the ``chosen`` run of ``winner``."""
    placement = setup.placement
    return DdpResult(
        world_size=placement.ranks,
        backend=placement.backend,
        device_type=placement.device_type,
        settings=rank_threads(winner.settings, placement),
        kwargs=kwargs,
        rank_cpus=placement.rank_cpus,
        cpu_sets=placement.cpu_sets,
        user_batch_size=setup.user_batch_size,
        visible=placement.visible,
        figures=chosen.figures if chosen.failure is None else None,
        single_samples_per_s=winner.samples_per_s,
        batch_gain=gain,
        measurements=tuple(probe.measurements),
        notes=tuple(notes),
        failure=chosen.failure,
        allocator=setup.info.get("allocator"),
    )


def after_ddp(
    confirmed: Confirmed, picked: Measurement, ddp: DdpResult
) -> tuple[Confirmed, Measurement, DdpResult]:
    """The confirmation, the winner and the ``ddp`` section once the DDP stage has
    ``picked``: the rounds' rates and speedups stay with the config they measured, so they
    go when the DDP figures chose another config; the winner takes the DDP section's
    settings (the same config, its ranks' threads spelled out), a kept default staying
    the default. A larger batch taken carries the rounds' speedup times its gain as DDP
    into the section (:attr:`DdpResult.speedup`), as the search measured it."""
    if picked.settings != confirmed.winner.settings:
        if ddp.batch_gain is not None:
            rounds = confirmed.speedup_rounds
            base = 1.0 if confirmed.is_default else statistics.median(rounds) if rounds else None
            if base is not None:
                ddp = dataclasses.replace(ddp, speedup=base * ddp.batch_gain)
        confirmed = dataclasses.replace(
            confirmed,
            rates=(),
            rates_spread=None,
            speedup_rounds=(),
            speedup_spread=None,
            is_default=False,
        )
    return confirmed, dataclasses.replace(picked, settings=ddp.settings), ddp


def rank_threads(settings: Settings, placement: Placement) -> Settings:
    """``settings`` with torch's threads per rank spelled out as its probes ran them.

    A probe pinned to a rank's CPUs trains on one thread per CPU of them; a rank started
    without torchrun's ``OMP_NUM_THREADS`` (``mp.spawn``, a plain launcher, the tuned
    loader's own ``torch.set_num_threads``) would otherwise take every CPU of the node,
    each rank's threads then contending with the others'. A single rank runs unpinned, on
    torch's own choice, which stays unset.
    """
    if settings.threads is not None or placement.ranks < 2:
        return settings
    return dataclasses.replace(settings, threads=placement.rank_cpus)


def _try_larger_batch(
    probe: _Prober,
    winner: Measurement,
    chosen: DdpMeasurement,
    larger: Settings,
    kwargs: dict[str, Any],
    placement: Placement,
    template: ProbeRequest,
    tolerance: float,
) -> tuple[Measurement, DdpMeasurement, float | None]:
    """The winner, or ``larger`` when its DDP figure beats the winner's beyond the noise
    (:func:`keep_default_unless_faster`), or by more than the tolerance in a second
    round too, the winner and ``larger`` measured again one after the other: one pair
    of DDP probes on shared CPUs reads 10% or more apart by chance, so a gain under that
    noise is taken only when it holds twice. One rank alone is then measured at
    ``larger``, for the scaling efficiency and the figures the result reports for one
    rank. The last item is ``larger``'s DDP figure over the winner's when it is taken,
    None when the winner is kept."""
    run = probe(larger, kwargs, "batch")
    if run.failure is not None:
        return winner, chosen, None
    tried = [(larger, run.figures)]
    clear = keep_default_unless_faster(winner.settings, chosen.figures, tried, tolerance)
    if clear != larger:
        if run.figures.samples_per_s <= chosen.figures.samples_per_s * (1.0 + tolerance):
            return winner, chosen, None
        again = probe(winner.settings, kwargs, "winner")
        run = probe(larger, kwargs, "batch")
        if (
            again.failure is not None
            or run.failure is not None
            or run.figures.samples_per_s <= again.figures.samples_per_s * (1.0 + tolerance)
        ):
            return winner, chosen, None
        chosen = again
    alone = run_probe(dataclasses.replace(placement.slots()[0].apply(template), settings=larger))
    if alone.failure is not None:
        probe.progress.message(
            f"one rank at batch={larger.batch_size}: FAILED ({alone.failure.kind}): "
            f"{alone.failure.message}; the batch of {winner.settings.batch_size} is kept"
        )
        return winner, chosen, None
    gain = run.figures.samples_per_s / chosen.figures.samples_per_s
    probe.progress.message(
        f"one rank at batch={larger.batch_size}: {format_rate(alone.figures.samples_per_s)} "
        f"samples/s; as DDP it trains {gain:.2f}x batch={winner.settings.batch_size}"
    )
    return Measurement(settings=larger, figures=alone.figures), run, gain


def _tune_knobs(
    probe: _Prober,
    current: DdpMeasurement,
    kwargs: dict[str, Any],
    info: dict[str, Any],
    tolerance: float,
) -> tuple[DdpMeasurement, dict[str, Any], list[str]]:
    grid, notes = knob_grid(info)
    for knob, values in grid:
        tried: list[tuple[Any, Figures | None]] = []
        runs = {}
        for value in values:
            run = probe(current.settings, {**kwargs, knob: value}, "knob")
            tried.append((value, None if run.failure else run.figures))
            runs[repr(value)] = run
        choice = keep_default_unless_faster(kwargs[knob], current.figures, tried, tolerance)
        if choice != kwargs[knob]:
            kwargs = {**kwargs, knob: choice}
            current = runs[repr(choice)]
    return current, kwargs, notes
