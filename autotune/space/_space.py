"""The space: which knobs a search samples, over which values, on this machine.

Knobs that do not apply to the machine are left out (with a note saying why),
not sampled and ignored. prefetch_factor and persistent_workers are sampled
only when num_workers > 0, so no trial ever builds an invalid DataLoader.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeAlias

from autotune._errors import SpaceError
from autotune.machine import Machine
from autotune.settings import AMP_MODES, TORCH_PREFETCH, WORKER_THREADS, Settings

KNOBS = (
    "num_workers",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory",
    "batch_size",
    "amp",
    "echo",
    "threads",
    "worker_threads",
)
WORKER_KNOBS = ("prefetch_factor", "persistent_workers", "worker_threads")
DEFAULT_PREFETCH = (1, 2, 4, 8)
MAX_DEFAULT_WORKERS = 32

Value: TypeAlias = int | bool | str | None


@dataclasses.dataclass(frozen=True)
class Fixed:
    """A knob held at one value (not sampled)."""

    value: Value

    def values(self) -> tuple[Value, ...]:
        return (self.value,)


@dataclasses.dataclass(frozen=True)
class Choices:
    """A knob sampled among candidates."""

    options: tuple[Value, ...]

    def values(self) -> tuple[Value, ...]:
        return self.options


@dataclasses.dataclass(frozen=True)
class IntRange:
    """An integer knob sampled in [low, high]."""

    low: int
    high: int

    def values(self) -> tuple[Value, ...]:
        return tuple(range(self.low, self.high + 1))


Domain: TypeAlias = Fixed | Choices | IntRange


class TrialLike(Protocol):
    """The part of ``optuna.Trial`` the space needs (a Ray config adapter provides it too)."""

    def suggest_int(self, name: str, low: int, high: int) -> int: ...

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any: ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class Space:
    """A domain per knob, and notes on what was left out."""

    num_workers: Domain
    prefetch_factor: Domain
    persistent_workers: Domain
    pin_memory: Domain
    batch_size: Domain
    amp: Domain
    echo: Domain
    threads: Domain
    worker_threads: Domain
    notes: tuple[str, ...] = ()

    def domain(self, knob: str) -> Domain:
        """The domain of one knob."""
        domain: Domain = getattr(self, knob)
        return domain

    def sample(self, trial: TrialLike) -> Settings:
        """Draw one config through an Optuna trial (define-by-run, conditional)."""
        values: dict[str, Any] = {}
        values["num_workers"] = _suggest(trial, "num_workers", self.num_workers)
        if values["num_workers"] > 0:
            for knob in WORKER_KNOBS:
                values[knob] = _suggest(trial, knob, self.domain(knob))
        for knob in ("pin_memory", "batch_size", "amp", "echo", "threads"):
            values[knob] = _suggest(trial, knob, self.domain(knob))
        return Settings(**values)

    def params(self, settings: Settings) -> dict[str, Any]:
        """The sampled parameters that reproduce ``settings`` (for ``enqueue_trial``)."""
        params = {}
        for knob in self.active_knobs(settings):
            if not isinstance(self.domain(knob), Fixed):
                params[knob] = getattr(settings, knob)
        return params

    def active_knobs(self, settings: Settings) -> list[str]:
        """The knobs that apply to ``settings`` (worker knobs only with workers)."""
        knobs = list(KNOBS)
        if settings.num_workers == 0:
            knobs = [k for k in knobs if k not in WORKER_KNOBS]
        return knobs

    def contains(self, settings: Settings) -> bool:
        """Whether ``settings`` is one of the space's configs."""
        return all(
            getattr(settings, knob) in self.domain(knob).values()
            for knob in self.active_knobs(settings)
        )

    def snap(self, settings: Settings) -> Settings:
        """The config of the space nearest to ``settings``: each knob moved into its domain."""
        values: dict[str, Any] = {}
        for knob in ("num_workers", "pin_memory", "batch_size", "amp", "echo", "threads"):
            values[knob] = _nearest(getattr(settings, knob), self.domain(knob).values())
        if values["num_workers"] > 0:
            prefetch = settings.prefetch_factor or TORCH_PREFETCH  # None: torch's default
            values["prefetch_factor"] = _nearest(prefetch, self.prefetch_factor.values())
            values["persistent_workers"] = _nearest(
                settings.persistent_workers, self.persistent_workers.values()
            )
            values["worker_threads"] = _nearest(
                settings.worker_threads, self.worker_threads.values()
            )
        return Settings(**values)

    def neighbors(self, settings: Settings) -> list[Settings]:
        """The configs of the space one step from ``settings``: one knob moved to an
        adjacent value (the next worker count, the next batch size, the other boolean...).
        Starting or stopping workers moves num_workers alone; the worker knobs then
        take their default or fall away."""
        found: dict[str, Settings] = {}
        for knob in self.active_knobs(settings):
            values = self.domain(knob).values()
            current = getattr(settings, knob)
            if current not in values:
                continue
            at = values.index(current)
            for step in (-1, 1):
                if 0 <= at + step < len(values):
                    moved = dataclasses.replace(
                        settings,
                        **_with_worker_knobs(knob, values[at + step], settings),
                    )
                    snapped = self.snap(moved)
                    if snapped != settings and self.contains(snapped):
                        found.setdefault(snapped.key(), snapped)
        return list(found.values())

    def configs(self) -> Iterator[Settings]:
        """Every config of the space (the exhaustive grid)."""
        shared = ("pin_memory", "batch_size", "amp", "echo", "threads")
        for workers in self.num_workers.values():
            assert isinstance(workers, int)
            if workers > 0:
                worker_values = [self.domain(k).values() for k in WORKER_KNOBS]
            else:
                worker_values = [(None,), (False,), (None,)]
            shared_values = [self.domain(k).values() for k in shared]
            for combo in itertools.product(*worker_values, *shared_values):
                values: dict[str, Any] = dict(zip((*WORKER_KNOBS, *shared), combo, strict=True))
                yield Settings(num_workers=workers, **values)

    def size(self) -> int:
        """How many distinct configs the space holds."""
        workers = self.num_workers.values()
        per_worker_setting = 1
        for knob in WORKER_KNOBS:
            per_worker_setting *= len(self.domain(knob).values())
        count = sum(1 if w == 0 else per_worker_setting for w in workers)
        for knob in ("pin_memory", "batch_size", "amp", "echo", "threads"):
            count *= len(self.domain(knob).values())
        return count

    def to_dict(self) -> dict[str, Any]:
        """The space as JSON types, for the study."""
        data: dict[str, Any] = {}
        for knob in KNOBS:
            domain = self.domain(knob)
            if isinstance(domain, Fixed):
                data[knob] = {"fixed": domain.value}
            elif isinstance(domain, Choices):
                data[knob] = {"choices": list(domain.options)}
            else:
                data[knob] = {"low": domain.low, "high": domain.high}
        data["notes"] = list(self.notes)
        return data

    def describe(self) -> list[str]:
        """One line per knob: its values, or why it is left out."""
        lines = []
        for knob in KNOBS:
            domain = self.domain(knob)
            if isinstance(domain, Fixed):
                text = f"fixed at {domain.value}"
            elif isinstance(domain, Choices):
                text = "one of " + ", ".join(str(v) for v in domain.options)
            else:
                text = f"{domain.low}..{domain.high}"
            if knob in WORKER_KNOBS:
                text += " (with workers)"
            lines.append(f"{knob}: {text}")
        return lines + list(self.notes)


def _with_worker_knobs(knob: str, value: Value, settings: Settings) -> dict[str, Any]:
    """The fields to replace when ``knob`` takes ``value``, keeping Settings valid."""
    if knob == "num_workers" and value == 0:
        # worker_threads falls to None with the workers (Settings drops a cap without any).
        return {"num_workers": 0, "prefetch_factor": None, "persistent_workers": False}
    if knob == "num_workers" and settings.num_workers == 0:
        return {"num_workers": value, "prefetch_factor": 2}
    return {knob: value}


def _nearest(value: Value, allowed: tuple[Value, ...]) -> Value:
    if value in allowed:
        return value
    numbers = [v for v in allowed if _is_int(v)]
    if _is_int(value) and numbers:
        return min(numbers, key=lambda v: (abs(v - value), v))  # type: ignore[operator]
    return allowed[0]


def _suggest(trial: TrialLike, name: str, domain: Domain) -> Any:
    if isinstance(domain, Fixed):
        return domain.value
    if isinstance(domain, IntRange):
        return trial.suggest_int(name, domain.low, domain.high)
    return trial.suggest_categorical(name, list(domain.options))


def default_max_workers(cpus: int) -> int:
    """The default upper bound of num_workers for a process that may use ``cpus`` CPUs.

    Above the CPU count because workers that wait on I/O leave their core free;
    throughput usually falls again past 8-16 workers, hence the cap.
    """
    return min(MAX_DEFAULT_WORKERS, max(4, 4 * cpus))


def default_batch_sizes(batch_size: int) -> tuple[int, ...]:
    """Around the user's own batch size: half, same, double."""
    return tuple(sorted({max(1, batch_size // 2), batch_size, batch_size * 2}))


def amp_modes(machine: Machine) -> tuple[tuple[str, ...], str | None]:
    """AMP modes the device runs natively, and a note on what was left out."""
    if machine.accelerator == "cuda":
        if machine.gpu_bf16:
            return ("off", "bf16", "fp16"), None
        return ("off", "fp16"), "amp: bf16 left out: the GPU does not support it."
    if machine.cpu_bf16:
        return ("off", "bf16"), "amp: fp16 left out: it is for GPUs; the CPU runs bf16."
    return ("off",), "amp: left out: this CPU has no native bf16 and fp16 is for GPUs."


def build_space(
    user: Mapping[str, Any],
    machine: Machine,
    batch_size: int,
    *,
    max_workers: int | None = None,
    rank_cpus: int | None = None,
) -> Space:
    """The space for this machine, narrowed by the user's ``space`` dict.

    Args:
        user: knob -> a value (fixed), a list/tuple/range (candidates), or for integer
            knobs ``{"low": a, "high": b}``.
        machine: the machine's fingerprint.
        batch_size: the workload's own batch size.
        max_workers: the default num_workers bound; None derives it from the CPUs of one rank.
        rank_cpus: CPUs of one rank (its share of the node with several ranks), which bound
            the workers and the training threads; None: the machine's.

    Raises:
        SpaceError: an unknown knob, an empty or out-of-range value, or a contradiction.
    """
    unknown = sorted(set(user) - set(KNOBS))
    if unknown:
        raise SpaceError(f"space has unknown knobs {unknown}; the knobs are {list(KNOBS)}.")
    cpus = rank_cpus if rank_cpus is not None else machine.cpus
    bound = max_workers if max_workers is not None else default_max_workers(cpus)
    modes, amp_note = amp_modes(machine)
    defaults, notes = _default_domains(machine, batch_size, cpus, bound, modes)
    if amp_note and "amp" not in user:
        notes.append(amp_note)
    if "echo" not in user:
        notes.append("echo: fixed at 1 (it changes what is learned; opt in with space['echo']).")
    if "worker_threads" not in user:
        notes.append(
            f"worker_threads: fixed at {WORKER_THREADS} (the BLAS and OpenMP threads of each "
            "worker, as torch sets its own there; None leaves one per core in every worker; "
            "widen with space['worker_threads'])."
        )

    domains = dict(defaults)
    for knob, raw in user.items():
        domains[knob] = _parse_domain(knob, raw)
        _check_values(knob, domains[knob], machine, modes)
    _check_consistency(user, domains)
    return Space(**domains, notes=tuple(notes))


def _default_domains(
    machine: Machine, batch_size: int, cpus: int, bound: int, modes: tuple[str, ...]
) -> tuple[dict[str, Domain], list[str]]:
    """Every knob's domain on this machine before the user narrows it, with a note for
    each knob the machine leaves out (pinning off an accelerator, threads on a GPU)."""
    on_accelerator = machine.accelerator != "cpu"
    pins = pins_memory(machine.accelerator)
    notes: list[str] = []
    defaults: dict[str, Domain] = {
        "num_workers": IntRange(0, bound),
        "prefetch_factor": Choices(DEFAULT_PREFETCH),
        "persistent_workers": Choices((False, True)),
        "pin_memory": Choices((False, True)) if pins else Fixed(False),
        "batch_size": Choices(default_batch_sizes(batch_size)),
        "amp": Choices(modes) if len(modes) > 1 else Fixed("off"),
        "echo": Fixed(1),
        "worker_threads": Fixed(WORKER_THREADS),
    }
    if not on_accelerator:
        notes.append("pin_memory: left out: it needs an accelerator and this search runs on CPU.")
        defaults["threads"] = IntRange(1, cpus) if cpus > 1 else Fixed(1)
    else:
        defaults["threads"] = Fixed(None)
        notes.append("threads: left out: the model runs on the GPU.")
    if on_accelerator and not pins:
        notes.append(
            f"pin_memory: left out: the loader pins memory for copies to CUDA only, and this "
            f"search runs on {machine.accelerator}."
        )
    return defaults, notes


def _parse_domain(knob: str, raw: Any) -> Domain:
    if isinstance(raw, Mapping):
        if set(raw) != {"low", "high"}:
            raise SpaceError(
                f"space[{knob!r}] is {dict(raw)!r}; a range is written {{'low': a, 'high': b}}."
            )
        low, high = raw["low"], raw["high"]
        if not (_is_int(low) and _is_int(high)) or low > high:
            raise SpaceError(
                f"space[{knob!r}] is {dict(raw)!r}; expected integers with low <= high."
            )
        return IntRange(int(low), int(high)) if low < high else Fixed(int(low))
    if isinstance(raw, list | tuple | set | frozenset | range):
        options = list(raw)
        if not options:
            raise SpaceError(f"space[{knob!r}] is empty; give at least one value.")
        unique = list(dict.fromkeys(options))
        if all(_is_int(v) for v in unique):
            unique = sorted(unique)
        if len(unique) == 1:
            return Fixed(unique[0])
        return Choices(tuple(unique))
    return Fixed(raw)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_MINIMUM = {
    "num_workers": 0,
    "prefetch_factor": 1,
    "batch_size": 1,
    "echo": 1,
    "threads": 1,
    "worker_threads": 1,
}
_NONE_ALLOWED = ("threads", "worker_threads")
"""Integer knobs where None means "as the libraries start it"."""


def _check_values(knob: str, domain: Domain, machine: Machine, modes: tuple[str, ...]) -> None:
    """Check the values the user gave ``knob`` suit it and this machine.

    Raises:
        SpaceError: a value out of the knob's range or of the wrong type, or one this
            machine cannot use.
    """
    values = domain.values() if not isinstance(domain, IntRange) else (domain.low, domain.high)
    if knob in _MINIMUM:
        _check_minimum(knob, values)
    elif knob in ("persistent_workers", "pin_memory"):
        _check_flags(knob, values, machine)
    elif knob == "amp":
        _check_amp(values, machine, modes)


def _check_minimum(knob: str, values: Sequence[Value]) -> None:
    """Integer knobs: every value an integer no less than the knob's least."""
    least = _MINIMUM[knob]
    for value in values:
        if knob in _NONE_ALLOWED and value is None:
            continue
        if not _is_int(value) or value < least:  # type: ignore[operator]
            raise SpaceError(
                f"space[{knob!r}] holds {value!r}; {knob} must be an integer >= {least}."
            )


def pins_memory(accelerator: str) -> bool:
    """Whether the tuned loader pins memory on ``accelerator``: for CUDA only (it turns
    ``pin_memory`` off elsewhere), so the space offers pinning nowhere else, where a
    "pinned" trial would measure unpinned loading."""
    return accelerator == "cuda"


def _check_flags(knob: str, values: Sequence[Value], machine: Machine) -> None:
    """On/off knobs: every value a bool, and pinned memory only with an accelerator."""
    for value in values:
        if not isinstance(value, bool):
            raise SpaceError(f"space[{knob!r}] holds {value!r}; expected True or False.")
    if knob == "pin_memory" and True in values and machine.accelerator == "cpu":
        raise SpaceError(
            "space['pin_memory'] allows True, but this search runs on CPU; pinned memory "
            "only helps copies to an accelerator. Remove it or set it to False."
        )
    if knob == "pin_memory" and True in values and not pins_memory(machine.accelerator):
        raise SpaceError(
            f"space['pin_memory'] allows True, but this search runs on {machine.accelerator}; "
            "the loader pins memory for copies to CUDA only. Remove it or set it to False."
        )


def _check_amp(values: Sequence[Value], machine: Machine, modes: tuple[str, ...]) -> None:
    """AMP modes: every value a known mode, and one this machine's device runs natively."""
    for value in values:
        if value not in AMP_MODES:
            raise SpaceError(f"space['amp'] holds {value!r}; allowed are {list(AMP_MODES)}.")
        if value != "off" and value not in modes:
            raise SpaceError(
                f"space['amp'] holds {value!r}, which this {machine.accelerator} device "
                f"does not run natively; allowed here: {list(modes)}."
            )


def _check_consistency(user: Mapping[str, Any], domains: Mapping[str, Domain]) -> None:
    workers = domains["num_workers"]
    if workers.values() == (0,):
        for knob in WORKER_KNOBS:
            if knob in user:
                raise SpaceError(
                    f"space sets {knob} but fixes num_workers at 0; {knob} only applies with "
                    "workers. Allow num_workers > 0 or drop it."
                )
