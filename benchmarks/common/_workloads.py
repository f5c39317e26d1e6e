"""The workloads of the suite, their reduced spaces, and the two run profiles.

A workload is a config file under ``benchmarks/workloads/`` (the same contract
as any user's config) plus what the benchmark needs to know about it: the
reduced space that the oracle enumerates and autotune searches, and whether it
must clearly beat every baseline.

The reduced space is written as a ``space`` dict, exactly what a user would
put in a config, and handed both to ``autotune.search(space=...)`` and to
``build_space`` for the oracle's grid, so both search the same configs.

A run measures the workloads marked ``in_default_run``; the others (none of which
autotune's defaults were tuned on) when named (``--workloads png-folder,...``) or
with ``--workloads all``; the agreement check measures every one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune import Machine, SearchOptions

WORKLOADS_DIR = Path(__file__).parents[1] / "workloads"
MAX_WORKERS = 32
"""No grid tries more workers than this, however many CPUs (autotune's own default cap)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Profile:
    """How long to measure and how many configs to try: ``quick`` or ``full``."""

    name: str
    window_seconds: float
    """One measuring window, for every probe of every strategy alike."""
    max_windows: int
    warmup_seconds: float
    rounds: int
    """Rounds of the interleaved final re-measurement."""

    def search_options(self) -> dict[str, Any]:
        """The measuring options autotune's search gets: only those that differ from its
        defaults, so a full run is autotune exactly as a user runs it."""
        defaults = SearchOptions()
        options: dict[str, Any] = {}
        for name in ("window_seconds", "max_windows", "warmup_seconds"):
            if getattr(self, name) != getattr(defaults, name):
                options[name] = getattr(self, name)
        return options


def full_profile() -> Profile:
    """autotune's own default measuring, five interleaved rounds."""
    defaults = SearchOptions()
    return Profile(
        name="full",
        window_seconds=defaults.window_seconds,
        max_windows=defaults.max_windows,
        warmup_seconds=defaults.warmup_seconds,
        rounds=5,
    )


def quick_profile() -> Profile:
    """Half-length windows and warm-up for every probe (autotune's included), three rounds."""
    defaults = SearchOptions()
    return Profile(
        name="quick",
        window_seconds=defaults.window_seconds / 2,
        max_windows=defaults.max_windows,
        warmup_seconds=defaults.warmup_seconds / 2,
        rounds=3,
    )


GridFn = Callable[[Profile, Machine], dict[str, Any]]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Reference:
    """A config measured beside the strategies to show what lies outside the knobs."""

    label: str
    config: Path
    note: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchWorkload:
    """One workload of the suite."""

    name: str
    config: Path
    summary: str
    grid: GridFn
    """The reduced space (a ``space`` dict) for a profile on a machine."""
    must_beat_baselines: bool
    """autotune must be clearly above every baseline but the oracle (io-bound, cpu-decode)."""
    references: tuple[Reference, ...] = ()
    in_default_run: bool = True
    """Part of ``python -m benchmarks`` without ``--workloads``; False for a workload added
    later, so the suite's default run (and its results' history) stays as it was."""


def _common(
    profile: Profile, machine: Machine, workers: list[int], batch: list[int]
) -> dict[str, Any]:
    """The knobs every grid shares: prefetch, persistence, training threads, AMP."""
    grid: dict[str, Any] = {
        "num_workers": sorted({min(w, MAX_WORKERS) for w in workers}),
        "prefetch_factor": [2, 4],
        "persistent_workers": [False, True],
        "batch_size": sorted(set(batch)),
    }
    if machine.accelerator == "cpu":
        grid["threads"] = sorted({1, max(1, machine.cpus // 2), machine.cpus})
    if profile.name == "quick":
        # Quick runs fix what doubles the grid least informatively: AMP (at the machine's
        # default, off) and persistence (on: cheap to keep, and never slower here).
        grid["amp"] = "off"
        grid["persistent_workers"] = True
    return grid


def _io_bound(profile: Profile, machine: Machine) -> dict[str, Any]:
    c = machine.cpus
    if profile.name == "quick":
        return _common(profile, machine, [0, 2 * c, 4 * c, 8 * c], [32])
    return _common(profile, machine, [0, c, 2 * c, 4 * c, 6 * c, 8 * c], [32, 64])


def _cpu_bound_workers(profile: Profile, machine: Machine) -> list[int]:
    c = machine.cpus
    if profile.name == "quick":
        return [0, max(1, c // 2), c, 2 * c]
    return [0, max(1, c // 2), c, c + 1, 2 * c]


def _cpu_decode(profile: Profile, machine: Machine) -> dict[str, Any]:
    batch = [32] if profile.name == "quick" else [32, 64]
    return _common(profile, machine, _cpu_bound_workers(profile, machine), batch)


def _hdf5(profile: Profile, machine: Machine) -> dict[str, Any]:
    batch = [32] if profile.name == "quick" else [32, 64]
    return _common(profile, machine, _cpu_bound_workers(profile, machine), batch)


def _model_bound_workers(profile: Profile, machine: Machine) -> list[int]:
    """Loading is cheap beside the model: none, one, the CPUs (and twice them in full runs)."""
    c = machine.cpus
    return [0, 1, c] if profile.name == "quick" else [0, 1, c, 2 * c]


def _compute_bound(profile: Profile, machine: Machine) -> dict[str, Any]:
    batch = [64] if profile.name == "quick" else [64, 128]
    return _common(profile, machine, _model_bound_workers(profile, machine), batch)


def _padded_text(profile: Profile, machine: Machine) -> dict[str, Any]:
    # The batch size sets the padding and the GRU's work per step: quick runs keep two.
    batch = [32, 64] if profile.name == "quick" else [16, 32, 64]
    return _common(profile, machine, _model_bound_workers(profile, machine), batch)


def _small_in_ram(profile: Profile, machine: Machine) -> dict[str, Any]:
    batch = [32] if profile.name == "quick" else [16, 32]
    grid = _common(profile, machine, _model_bound_workers(profile, machine), batch)
    if profile.name == "quick":
        # Persistence is what this workload is about: quick runs keep it and fix prefetch.
        grid["persistent_workers"] = [False, True]
        grid["prefetch_factor"] = 2
    return grid


def _tiny_model(profile: Profile, machine: Machine) -> dict[str, Any]:
    batch = [64] if profile.name == "quick" else [64, 128]
    return _common(profile, machine, _cpu_bound_workers(profile, machine), batch)


def _large_model(profile: Profile, machine: Machine) -> dict[str, Any]:
    c = machine.cpus
    if profile.name == "quick":
        # Batch size and AMP are what this workload is about: quick runs keep both (AMP as
        # the machine allows) and fix the training threads at every CPU instead.
        grid = _common(profile, machine, [0, 1], [16, 32, 64])
        del grid["amp"]
        if "threads" in grid:
            grid["threads"] = c
        return grid
    return _common(profile, machine, [0, 1, c], [16, 32, 64])


def _short_step(profile: Profile, machine: Machine) -> dict[str, Any]:
    batch = [64] if profile.name == "quick" else [64, 128]
    return _common(profile, machine, _model_bound_workers(profile, machine), batch)


def _hf_style_text(profile: Profile, machine: Machine) -> dict[str, Any]:
    batch = [16] if profile.name == "quick" else [16, 32]
    return _common(profile, machine, _cpu_bound_workers(profile, machine), batch)


def _sim_batch(profile: Profile, machine: Machine) -> dict[str, Any]:
    """The batch size is what this workload is about: quick runs keep three and fewer
    workers (none or one: loading is cheap beside the device)."""
    if profile.name == "quick":
        return _common(profile, machine, [0, 1], [16, 64, 256])
    return _common(profile, machine, _model_bound_workers(profile, machine), [16, 32, 64, 128, 256])


def _sim_amp(profile: Profile, machine: Machine) -> dict[str, Any]:
    """AMP is what this workload is about: quick runs keep it (as the machine allows)
    and fix the training threads at every CPU instead."""
    if profile.name == "quick":
        grid = _common(profile, machine, _model_bound_workers(profile, machine), [64])
        del grid["amp"]
        if "threads" in grid:
            grid["threads"] = machine.cpus
        return grid
    return _common(profile, machine, _model_bound_workers(profile, machine), [64])


SIMULATED: tuple[BenchWorkload, ...] = (
    BenchWorkload(
        name="sim-decode",
        config=WORKLOADS_DIR / "sim_decode.py",
        summary="JPEG decode and augment on the CPU; a simulated accelerator that outruns it",
        grid=_cpu_decode,
        must_beat_baselines=False,
        in_default_run=False,
    ),
    BenchWorkload(
        name="sim-storage",
        config=WORKLOADS_DIR / "sim_storage.py",
        summary="4 ms of storage latency per item; a simulated accelerator, synchronous steps",
        grid=_io_bound,
        must_beat_baselines=False,
        in_default_run=False,
    ),
    BenchWorkload(
        name="sim-device-bound",
        config=WORKLOADS_DIR / "sim_device_bound.py",
        summary="in-memory rows; a simulated accelerator slower than any loader",
        grid=_compute_bound,
        must_beat_baselines=False,
        in_default_run=False,
    ),
    BenchWorkload(
        name="sim-batch",
        config=WORKLOADS_DIR / "sim_batch.py",
        summary="in-memory rows; a simulated accelerator whose launch overhead rewards "
        "larger batches",
        grid=_sim_batch,
        must_beat_baselines=False,
        in_default_run=False,
    ),
    BenchWorkload(
        name="sim-amp",
        config=WORKLOADS_DIR / "sim_amp.py",
        summary="in-memory rows; a simulated accelerator three times faster under AMP",
        grid=_sim_amp,
        must_beat_baselines=False,
        in_default_run=False,
    ),
    BenchWorkload(
        name="sim-short-step",
        config=WORKLOADS_DIR / "sim_short_step.py",
        summary="in-memory rows; a simulated accelerator whose step takes under 2 ms, where "
        "a per-step cost of the probe would show",
        grid=_short_step,
        must_beat_baselines=False,
        in_default_run=False,
    ),
    BenchWorkload(
        name="sim-ddp",
        config=WORKLOADS_DIR / "sim_ddp.py",
        summary="numpy-augmented images; two DDP ranks, each with its own simulated "
        "accelerator, loading on shared CPUs",
        grid=_cpu_decode,
        must_beat_baselines=False,
        in_default_run=False,
    ),
)
"""The workloads on the simulated accelerator (:mod:`benchmarks.simdevice`): run by name,
with --workloads all, and by the agreement check."""

WORKLOADS: tuple[BenchWorkload, ...] = (
    BenchWorkload(
        name="io-bound",
        config=WORKLOADS_DIR / "io_bound.py",
        summary="items wait 10 ms on simulated remote storage (CPU free); a small CNN",
        grid=_io_bound,
        must_beat_baselines=True,
    ),
    BenchWorkload(
        name="cpu-decode",
        config=WORKLOADS_DIR / "cpu_decode.py",
        summary="JPEG files decoded and augmented with Pillow and numpy; a small CNN",
        grid=_cpu_decode,
        must_beat_baselines=True,
    ),
    BenchWorkload(
        name="hdf5-chunked",
        config=WORKLOADS_DIR / "hdf5_chunked.py",
        summary="rows read at random from a chunked, gzip-compressed HDF5 file; an MLP",
        grid=_hdf5,
        must_beat_baselines=False,
        references=(
            Reference(
                label="chunk-order reads",
                config=WORKLOADS_DIR / "hdf5_chunk_order.py",
                note=(
                    "the same file read chunk by chunk (an IterableDataset), with the oracle's "
                    "settings: what the access order is worth; no loader knob reaches it"
                ),
            ),
        ),
    ),
    BenchWorkload(
        name="compute-bound",
        config=WORKLOADS_DIR / "compute_bound.py",
        summary="rows of an in-memory tensor; a wide MLP that takes most of every step",
        grid=_compute_bound,
        must_beat_baselines=False,
    ),
    BenchWorkload(
        name="hf-style-text",
        config=WORKLOADS_DIR / "hf_style_text.py",
        summary="variable-length token ids padded per batch; a tiny transformer whose "
        "forward returns .loss (Hugging Face style)",
        grid=_hf_style_text,
        must_beat_baselines=False,
        in_default_run=False,
    ),
    # Workloads nobody tuned the defaults for (the generalisation benchmark): run by name, with
    # --workloads all, and by the agreement check.
    BenchWorkload(
        name="dict-batches",
        config=WORKLOADS_DIR / "dict_batches.py",
        summary="dict items {image, label} made with numpy; a small CNN fed by step(model, batch)",
        grid=_cpu_decode,
        must_beat_baselines=False,
        in_default_run=False,
    ),
    BenchWorkload(
        name="iterable-latency",
        config=WORKLOADS_DIR / "iterable_latency.py",
        summary="an IterableDataset sharded by worker, 4 ms of waiting per record; an MLP",
        grid=_io_bound,
        must_beat_baselines=False,
        in_default_run=False,
    ),
    BenchWorkload(
        name="padded-text",
        config=WORKLOADS_DIR / "padded_text.py",
        summary="sentences tokenised in Python, padded per batch; an embedding and GRU classifier",
        grid=_padded_text,
        must_beat_baselines=False,
        in_default_run=False,
    ),
    BenchWorkload(
        name="png-folder",
        config=WORKLOADS_DIR / "png_folder.py",
        summary="2,000 small PNG files decoded, cropped, flipped, normalised; a small CNN",
        grid=_cpu_decode,
        must_beat_baselines=False,
        in_default_run=False,
    ),
    BenchWorkload(
        name="numpy-memmap",
        config=WORKLOADS_DIR / "numpy_memmap.py",
        summary="rows of a numpy.memmap file mapped lazily per worker; an MLP",
        grid=_compute_bound,
        must_beat_baselines=False,
        in_default_run=False,
    ),
    BenchWorkload(
        name="small-in-ram",
        config=WORKLOADS_DIR / "small_in_ram.py",
        summary="4 batches per epoch in memory: epoch start-up and persistent workers decide",
        grid=_small_in_ram,
        must_beat_baselines=False,
        in_default_run=False,
    ),
    BenchWorkload(
        name="tiny-model",
        config=WORKLOADS_DIR / "tiny_model.py",
        summary="audio features computed per item with numpy FFTs; a single Linear layer",
        grid=_tiny_model,
        must_beat_baselines=False,
        in_default_run=False,
    ),
    BenchWorkload(
        name="large-model",
        config=WORKLOADS_DIR / "large_model.py",
        summary="in-memory images; a small vision transformer where batch size and AMP decide",
        grid=_large_model,
        must_beat_baselines=False,
        in_default_run=False,
    ),
    BenchWorkload(
        name="heavy-augment",
        config=WORKLOADS_DIR / "heavy_augment.py",
        summary="images made on the fly through eight Pillow and numpy augmentations; a CNN",
        grid=_cpu_decode,
        must_beat_baselines=False,
        in_default_run=False,
    ),
    BenchWorkload(
        name="many-small-files",
        config=WORKLOADS_DIR / "many_small_files.py",
        summary="5,000 .npy files of 384 bytes, one opened per item; an MLP",
        grid=_cpu_decode,
        must_beat_baselines=False,
        in_default_run=False,
    ),
    BenchWorkload(
        name="short-step",
        config=WORKLOADS_DIR / "short_step.py",
        summary="rows in memory; a small MLP whose step takes ~2 ms, where a per-step cost "
        "of the probe would show",
        grid=_short_step,
        must_beat_baselines=False,
        in_default_run=False,
    ),
    BenchWorkload(
        name="short-step-long",
        config=WORKLOADS_DIR / "short_step_long.py",
        summary="short-step's data and a wider MLP, a ~20 ms step: its reference",
        grid=_short_step,
        must_beat_baselines=False,
        in_default_run=False,
    ),
    *SIMULATED,
)


def find(names: list[str], *, every: bool = False) -> list[BenchWorkload]:
    """The workloads called ``names``, in the suite's order (every one when a name is
    ``all``); when empty, those of the default run (every workload with ``every``).

    Raises:
        ValueError: a name that is not a workload of the suite.
    """
    known = {w.name: w for w in WORKLOADS}
    unknown = [n for n in names if n not in known and n != "all"]
    if unknown:
        raise ValueError(f"unknown workloads {unknown}; the suite has {list(known)} (or all).")
    if names:
        return [w for w in WORKLOADS if "all" in names or w.name in names]
    return [w for w in WORKLOADS if every or w.in_default_run]
