"""Does the online loader pay for itself in one epoch?

For each workload:

1. the best static config: a grid of the loader knobs the online loader may choose
   from (workers, prefetch, persistence; pinned memory on CUDA), at the config's
   batch size, measured by the plain-loop checker (:mod:`benchmarks.common._checker`) in
   interleaved rounds; the highest median samples/s wins;
2. one epoch from a cold start (:mod:`benchmarks.online._epoch`: a new process each, the
   loader's construction, its workers' start-up and the online loader's tuning
   timed) of the default loader, that static config and ``autotune.online`` with
   its defaults, in rounds whose order rotates (D S O, S O D, O D S, ...);
3. the targets on the medians: the online epoch <= 1.05 x the static one, and <= the
   default's.

An epoch is the workload's dataset cut or repeated to a set length
(:data:`EPOCH_ITEMS`): 512 steps, 20-36 s with the default loader on 2 cores
(io-bound: 174 s).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from autotune import Machine, Settings
from autotune.inloop._climb import ClimbOptions
from autotune.inloop._online import most_workers
from autotune.space._space import build_space
from autotune.workload._workload import load_config
from benchmarks.common._checker import measure_interleaved, median, spread
from benchmarks.common._workloads import BenchWorkload, find
from benchmarks.online._epoch import measure_epoch

STATIC_BOUND = 1.05
"""The online epoch may take at most this many times the best static config's."""
DEFAULT_BOUND = 1.0
"""... and at most the default loader's."""
DEFAULT_ROUNDS = 5
"""Rounds of each loader's epoch. Where the online loader keeps the default's settings
(hf-style-text) the two differ by under 1%, within which medians of 3 rounds came out
on either side of 1.0 from run to run, so 5."""
DEFAULT_WORKLOADS = ("io-bound", "cpu-decode", "hdf5-chunked", "hf-style-text")
EPOCH_ITEMS: dict[str, int] = {
    # 512 steps each: the online loader's default budget, 5% of an epoch's steps, is
    # then 26 steps everywhere. At 256 it would be 13: less than one window after a
    # switch's warm-up.
    #
    # Its 2,048 items 8 times: about 190 s at the default loader's 85 samples/s, 12 s
    # at 16 workers' 1,400. Shorter, and the 2 batches an online loader must load
    # without workers before it knows it waits (0.3 s each) outweigh 5% of the epoch:
    # an online tuner needs an epoch long enough to pay back what it measures.
    "io-bound": 16384,
    # Its 1,024 files 16 times: about 20 s with the default loader.
    "cpu-decode": 16384,
    # Its 16,384 rows: 35.8 s with the default loader.
    "hdf5-chunked": 16384,
    # Its 2,048 texts 4 times at batch 16: 19-21 s with the default loader.
    "hf-style-text": 8192,
    # The simulated accelerator's workloads, 512 steps or more each: their datasets as
    # they are make epochs of 1-2 s, shorter than the online loader's first windows.
    "sim-decode": 16384,
    "sim-storage": 16384,
    "sim-device-bound": 32768,
    "sim-batch": 32768,  # 2,048 steps at batch 16: 6.3 ms each at the least
    "sim-amp": 32768,
}
"""Items per epoch; a workload not named here is timed over its dataset as it is."""
LOADER_KNOBS = (
    "num_workers",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory",
    "worker_threads",
)
LOADERS = ("default", "static", "online")

Say = Callable[[str], None]


@dataclasses.dataclass(frozen=True, kw_only=True)
class OnlineOptions:
    """How long to measure, and which grid."""

    rounds: int = DEFAULT_ROUNDS
    """Interleaved rounds, of the grid and of the epochs alike."""
    seconds: float = 1.5
    """Timed part of one plain-loop measurement of the grid."""
    warmup: float = 0.5
    """Untimed training before it."""
    grid: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Loader knobs of the grid (a ``space`` dict) over :func:`default_grid`'s."""
    epoch_scale: float = 1.0
    """Multiplies every epoch length of :data:`EPOCH_ITEMS`."""
    seed: int = 0


def online_workloads(names: Sequence[str]) -> list[BenchWorkload]:
    """The workloads called ``names``; :data:`DEFAULT_WORKLOADS` when empty.

    Raises:
        ValueError: a name that is not a workload of the suite.
    """
    return find(list(names or DEFAULT_WORKLOADS))


def default_grid(cpus: int) -> dict[str, Any]:
    """The loader knobs the online loader may reach on ``cpus`` CPUs: no workers, then
    doubling up to its bound (1, 2, 4, 8, 16 on 2 CPUs), prefetch doubling from torch's
    2 to its deepest. Workers are not persistent: within the one epoch timed, keeping
    them changes nothing. Pinned memory is left to the space's default (both on an
    accelerator, off on a CPU), as the online loader tries it only on CUDA."""
    most = most_workers(cpus)
    deepest = ClimbOptions(max_workers=most).max_prefetch
    return {
        "num_workers": [0, *_doublings(1, most)],
        "prefetch_factor": _doublings(2, deepest),
        "persistent_workers": False,
    }


def _doublings(first: int, most: int) -> list[int]:
    values = []
    while first <= most:
        values.append(first)
        first *= 2
    return values


def grid_configs(grid: Mapping[str, Any], machine: Machine, batch_size: int) -> list[Settings]:
    """Every config of ``grid`` (over :func:`default_grid`) at ``batch_size``, with the
    training knobs as the online loader leaves them (no AMP, no echo, torch's threads).

    Raises:
        ValueError: a knob that is not a loader knob.
        SpaceError: a value the space does not allow on this machine.
    """
    others = sorted(set(grid) - set(LOADER_KNOBS))
    if others:
        raise ValueError(
            f"the grid has {others}; it takes the loader knobs {list(LOADER_KNOBS)} only."
        )
    fixed = {"batch_size": batch_size, "amp": "off", "echo": 1, "threads": None}
    space = build_space({**default_grid(machine.cpus), **grid, **fixed}, machine, batch_size)
    return list(space.configs())


def epoch_items(workload: BenchWorkload, scale: float) -> int | None:
    """Items per epoch of ``workload``, scaled; None: its dataset as it is."""
    items = EPOCH_ITEMS.get(workload.name)
    return None if items is None else max(1, round(items * scale))


def rotated(labels: Sequence[str], round_index: int) -> list[str]:
    """The order of one round: each label first in turn, so none always runs first."""
    shift = round_index % len(labels) if labels else 0
    return [*labels[shift:], *labels[:shift]]


def judge(seconds: Mapping[str, Sequence[float]]) -> list[dict[str, Any]]:
    """The two targets on the median epoch seconds of ``default``, ``static``, ``online``."""
    online = median(seconds["online"])
    found = []
    for label, bound in (("static", STATIC_BOUND), ("default", DEFAULT_BOUND)):
        other = median(seconds[label])
        ratio = online / other if other > 0 else None
        found.append(
            {
                "against": label,
                "bound": bound,
                "ratio": ratio,
                "passed": ratio is not None and ratio <= bound,
            }
        )
    return found


# --------------------------------------------------------------------- one workload
def run_workload(
    workload: BenchWorkload, options: OnlineOptions, machine: Machine, say: Say
) -> dict[str, Any]:
    """The grid, then the epochs, of one workload; returns its section of the results
    (JSON types only)."""
    loaded = load_config(workload.config).workload
    batch = loaded.batch_size
    device = loaded.device or machine.accelerator
    configs = grid_configs(options.grid, machine, batch)
    say(f"grid: {len(configs)} config(s), {options.rounds} interleaved round(s) of the plain loop")
    rates = measure_interleaved(
        workload.config,
        configs,
        rounds=options.rounds,
        seconds=options.seconds,
        warmup=options.warmup,
        device=device,
        seed=options.seed,
        say=say,
    )
    grid = [
        {"settings": s.to_dict(), "describe": s.describe(), "rounds": r, "median": median(r)}
        for s, r in zip(configs, rates, strict=True)
    ]
    best = max(range(len(configs)), key=lambda i: median(rates[i]))
    items = epoch_items(workload, options.epoch_scale)
    loaders = {
        "default": Settings(batch_size=batch),
        "static": configs[best],
        "online": Settings(batch_size=batch),
    }
    epochs = _epochs(workload, loaders, items, device, options, say)
    seconds = {label: [e["seconds"] for e in runs] for label, runs in epochs.items()}
    return {
        "name": workload.name,
        "config": workload.config.relative_to(workload.config.parents[2]).as_posix(),
        "device": device,
        "batch_size": batch,
        "epoch_items": items,
        "grid": {"configs": grid, "best": best},
        "loaders": {
            label: _loader_row(loaders[label], runs, online=label == "online")
            for label, runs in epochs.items()
        },
        "targets": judge(seconds),
    }


def _epochs(
    workload: BenchWorkload,
    loaders: Mapping[str, Settings],
    items: int | None,
    device: str,
    options: OnlineOptions,
    say: Say,
) -> dict[str, list[dict[str, Any]]]:
    """Every loader's epochs, one per round in a rotating order; a static config that
    is the default loader is measured once, for both."""
    same = loaders["static"] == loaders["default"]
    labels = [label for label in LOADERS if not (label == "static" and same)]
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
    say(f"epochs: {items or 'all'} items, {options.rounds} rotating round(s) of {labels}")
    for round_index in range(options.rounds):
        for label in rotated(labels, round_index):
            epoch = measure_epoch(
                workload.config,
                loaders[label],
                online=label == "online",
                items=items,
                device=device,
                seed=options.seed,
            )
            runs[label].append(epoch)
            chose = f" (chose {epoch['describe']})" if label == "online" else ""
            say(f"epoch, round {round_index + 1}: {label}: {epoch['seconds']:.2f} s{chose}")
    if "static" not in runs:
        runs["static"] = runs["default"]
    return {label: runs[label] for label in LOADERS}


def _loader_row(
    settings: Settings, runs: Sequence[Mapping[str, Any]], online: bool
) -> dict[str, Any]:
    seconds = [run["seconds"] for run in runs]
    row: dict[str, Any] = {
        "settings": settings.to_dict(),
        "describe": settings.describe(),
        "seconds": seconds,
        "median": median(seconds),
        "spread": spread(seconds),
        "samples": [run["samples"] for run in runs],
        "batches": [run["batches"] for run in runs],
    }
    if online:
        row["choices"] = [run["describe"] for run in runs]
        row["choice_settings"] = [run["choice"] for run in runs]
        row["still_tuning"] = [run["tuning"] for run in runs]
        row["logs"] = [run["log"] for run in runs]
    return row


# --------------------------------------------------------------------- the tables
HEADER = "| loader | settings | epoch s (median) | range | online / this | target | verdict |"
_NAMES = {"default": "default", "static": "best static", "online": "online"}


def _cells(label: str, row: Mapping[str, Any], target: Mapping[str, Any] | None) -> list[str]:
    seconds = row["seconds"]
    cells = [
        _NAMES[label],
        row["describe"] if label != "online" else "autotune.online(...) defaults",
        f"{row['median']:.2f}",
        f"{min(seconds):.2f}-{max(seconds):.2f}" if seconds else "-",
    ]
    if target is None:
        return [*cells, "", "", ""]
    ratio = target["ratio"]
    return [
        *cells,
        "-" if ratio is None else f"{ratio:.3f}",
        f"<= {target['bound']:.2f}",
        "PASS" if target["passed"] else "FAIL",
    ]


def _rounds(count: int) -> str:
    return f"{count} round{'' if count == 1 else 's'}"


def choices_text(online: Mapping[str, Any]) -> str:
    """The online loader's final choices over the rounds, most frequent first."""
    counted = Counter(online["choices"]).most_common()
    rounds = len(online["choices"])
    parts = [f"{choice} ({count} of {_rounds(rounds)})" for choice, count in counted]
    tuning = sum(online["still_tuning"])
    if tuning:
        parts.append(f"still climbing at the epoch's end in {tuning} of {rounds} rounds")
    return "; ".join(parts)


def markdown(section: Mapping[str, Any]) -> str:
    """One workload's table (or its error), in markdown."""
    title = f"### {section['name']}"
    if "error" in section:
        return f"{title}\n\nFAILED: {section['error']}\n"
    loaders, targets = section["loaders"], {t["against"]: t for t in section["targets"]}
    lines = [title, "", HEADER, "|" + " --- |" * 7]
    for label in LOADERS:
        lines.append("| " + " | ".join(_cells(label, loaders[label], targets.get(label))) + " |")
    online = loaders["online"]
    grid = section["grid"]
    best = grid["configs"][grid["best"]]
    lines += [
        "",
        f"Online loader's final choice: {choices_text(online)}.",
        f"Best static of {len(grid['configs'])} configs: {best['describe']}, "
        f"{best['median']:,.0f} samples/s in the plain loop (median of "
        f"{_rounds(len(best['rounds']))}).",
        f"Epoch: {section['epoch_items'] or 'the dataset'} items, batch {section['batch_size']}; "
        f"device {section['device']}.",
    ]
    counts = {label: set(loaders[label]["samples"]) for label in LOADERS}
    if len(set().union(*counts.values())) > 1:
        lines.append(f"Samples per epoch differ: { ({k: sorted(v) for k, v in counts.items()}) }.")
    return "\n".join(lines) + "\n"


def summary(sections: Sequence[Mapping[str, Any]]) -> str:
    """One line per workload: both targets with their ratios."""
    lines = [
        f"| workload | online <= {STATIC_BOUND:.2f} x best static | online <= default |",
        "|---|---|---|",
    ]
    for section in sections:
        if "error" in section:
            lines.append(f"| {section['name']} | FAILED | FAILED |")
            continue
        cells = [
            f"{'PASS' if t['passed'] else 'FAIL'} "
            + ("-" if t["ratio"] is None else f"{t['ratio']:.3f}")
            for t in section["targets"]
        ]
        lines.append(f"| {section['name']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def document(results: Mapping[str, Any]) -> str:
    """The markdown file of a run: what was run, the targets, a table per workload."""
    options = results["options"]
    head = [
        f"# Online loader, one epoch from a cold start: {results['started']}, {results['host']}",
        "",
        f"{results['machine'].get('cpus')} CPUs, accelerator "
        f"{results['machine'].get('accelerator')}; commit {results['commit']}"
        f"{' (dirty)' if results['dirty'] else ''}; {options['rounds']} round(s); grid timed "
        f"{options['seconds']} s per config after {options['warmup']} s of warm-up; epoch "
        f"lengths x{options['epoch_scale']:g}.",
        "",
        summary(results["workloads"]),
    ]
    return "\n".join(head) + "\n" + "\n".join(markdown(s) for s in results["workloads"])
