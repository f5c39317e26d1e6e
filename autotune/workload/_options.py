"""SearchOptions: how long to search, where to keep the study, how to measure."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import re
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from autotune._errors import ConfigError
from autotune._noise import DEFAULT_TOLERANCE

_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
BACKENDS = ("optuna", "ray")
MEMORY_SHARE = 0.8
"""Of the memory available at the start, what a search's trials may use by default
(``memory_limit`` unset)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchOptions:
    """Budget, study and measuring settings of a search (the config's ``search`` dict)."""

    trials: int = 24
    """Exploration trials that probe a config, added to those a resumed study has.

    A repeat of a measured config, or a config its compute ceiling rules out, is not run
    and spends none of the budget."""
    timeout: float | None = None
    """Seconds after which no new exploration trial starts; by default no limit."""
    budget: float | None = None
    """Seconds the whole search may take (or "90s", "2m", "1m30s"); by default no limit.

    After the preflight, the stages are planned to fit, giving up what harms the choice
    least first: the ceilings, the runoff, rounds past two, the bounds, trials, rounds
    past one, finalists (one confirming round of the finalists beside the default loader
    always runs); the search says what it left out. Before each later stage the stages
    left are planned again into the time left, so one that would overrun is shortened or
    skipped."""
    study: str | None = None
    """Where the study is kept: a name (studies/NAME.db), a .db path, or a storage URL.

    A URL (``postgresql://USER:PASSWORD@HOST/DATABASE``, ``mysql://...``,
    ``sqlite:///PATH``) keeps it in a database that many searches, on many machines, write
    at once. By default studies/CONFIG_NAME.db."""
    study_name: str | None = None
    """The study's name in its storage; by default the config's name (a .db file's stem)."""
    resume: bool = False
    """Require the study to exist already, and continue exploring it.

    Without it, a search of a study that holds an earlier search's answer measures that
    answer again beside the default loader first, and ends there while it holds."""
    warm_from: tuple[str, ...] | None = None
    """Earlier studies (names, .db paths or URLs) whose finalists a new study tries first.

    By default the other studies kept in the same storage (a shared database); ``()``
    (``--warm-from none``) for none. A study lends its finalists when it was measured with
    the same CPUs and GPUs, of the same dataset and model classes with model and sample
    sizes within a factor of two; any other is passed over with a line saying why."""
    seed: int | None = None
    """Seeds the sampler and the probes' data order, for repeatable searches."""
    tolerance: float = DEFAULT_TOLERANCE
    """Configs within this fraction of the best count as equally fast; the cheapest wins."""
    window_seconds: float = 0.5
    """Length of one measuring window; the pruner decides after each.

    A window ends on a whole turn of the workers (``num_workers`` batches); longer windows
    steady noisy figures."""
    max_windows: int = 9
    """Windows a trial runs when it is not pruned."""
    min_windows: int = 1
    """Windows before the first pruning decision (ASHA's minimum resource)."""
    reduction_factor: int = 3
    """ASHA keeps the best 1/reduction_factor of trials at each rung.

    The configs tried first are judged from the second rung on, as one window is too
    noisy to drop a region the sampler may not come back to."""
    warmup_seconds: float = 0.5
    """Training after the first batch that is not measured.

    It lasts at least through the batches the workers queued while starting
    (``num_workers`` x ``prefetch_factor``)."""
    trial_timeout: float = 60.0
    """A trial silent this long (no first batch, no step ending) is killed as hung."""
    memory_limit: int | None = None
    """Bytes (or "4GiB") a trial's processes may use; by default 80% of the available RAM.

    The default reads the memory available when the search starts, and is shared among
    the ranks."""
    finalists: int = 3
    """Configs re-measured before the winner is named, at least.

    Up to twice as many when more are within twice the tolerance of the best; the fastest
    config measured in full joins them."""
    rounds: int = 3
    """Interleaved rounds that re-measure the finalists and the default loader.

    Each round is a new full-length probe of every config: the verdict uses each config's
    median and the noise measured between rounds."""
    runoff_rounds: int = 3
    """More rounds for the finalists the rounds left within the noise of each other; 0: none.

    Only the finalists that beat the default run off (up to 3 of them), and only when the
    noise is wider than the tolerance."""
    bounds: bool = True
    """Measure the compute ceiling of each batch size, AMP mode and thread count first.

    Configs that cannot come near the best are then skipped, and exploring stops once the
    best nears the highest ceiling."""
    ceilings: bool = True
    """Measure the winner's and the default loader's compute and data ceilings at the end.

    With the loader alone at the most workers, they are what the diagnosis compares the
    figures with."""
    gpus: str | int | list[int] | None = None
    """Which visible GPUs: "all" (the default), "none" (CPU), or numbers such as "0,1" (cuda:N)."""
    ranks: int | None = None
    """DDP ranks on this node; by default one per selected GPU, 1 on CPU."""
    ddp_finalists: bool = False
    """With several ranks, DDP-probe every finalist and choose by the DDP figure.

    Off, only the winner is DDP-probed."""
    ddp_knobs: bool = True
    """With several ranks, tune the DDP keywords that matter for the model, measured."""
    backend: str = dataclasses.field(default="optuna", metadata={"choices": BACKENDS})
    """Who runs the trials: "optuna" (in this process) or "ray" (Ray Tune, local or a cluster)."""
    address: str | None = None
    """With backend "ray": the cluster to join ("auto" or HOST:PORT); by default a local Ray."""
    concurrent: int | None = None
    """With backend "ray": at most this many trials at once; by default as many as fit."""

    @classmethod
    def field_docs(cls) -> dict[str, str]:
        """Each field's docstring, by field name, read from this class's source.

        The first line of each is its summary. The command line's help and the
        documentation's options table are built from these, so that the code, ``--help``
        and the docs say the same.
        """
        return _attribute_docstrings(cls)

    def __post_init__(self) -> None:
        # Checked in this order: with several options wrong, the first check that fails
        # is the one reported.
        self._check_budget()
        self._check_pruning()
        self._check_placement()
        self._check_backend()
        if self.warmup_seconds < 0:
            raise ConfigError(
                f"search option warmup_seconds is {self.warmup_seconds}; expected >= 0."
            )

    def _check_budget(self) -> None:
        """The counts and durations that must be positive, the timeout and the tolerance."""
        positive = {
            "trials": self.trials,
            "window_seconds": self.window_seconds,
            "max_windows": self.max_windows,
            "min_windows": self.min_windows,
            "trial_timeout": self.trial_timeout,
            "finalists": self.finalists,
            "rounds": self.rounds,
        }
        for name, value in positive.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigError(f"search option {name} is {value!r}; expected a number > 0.")
        if not _is_count(self.runoff_rounds, least=0):
            raise ConfigError(
                f"search option runoff_rounds is {self.runoff_rounds!r}; expected a whole "
                "number >= 0 (0: no runoff)."
            )
        for name in ("timeout", "budget"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or value <= 0
            ):
                raise ConfigError(f"search option {name} is {value!r}; expected seconds > 0.")
        if not 0 <= self.tolerance < 1:
            raise ConfigError(
                f"search option tolerance is {self.tolerance!r}; expected a fraction in [0, 1)."
            )

    def _check_pruning(self) -> None:
        """ASHA's settings: a reduction factor it can use, and rungs in order."""
        if self.reduction_factor < 2:
            raise ConfigError(
                f"search option reduction_factor is {self.reduction_factor}; expected >= 2."
            )
        if self.min_windows > self.max_windows:
            raise ConfigError(
                f"search option min_windows ({self.min_windows}) exceeds max_windows "
                f"({self.max_windows})."
            )

    def _check_placement(self) -> None:
        """The ranks and the GPUs the search runs on."""
        if self.ranks is not None and not _is_count(self.ranks):
            raise ConfigError(f"search option ranks is {self.ranks!r}; expected an integer >= 1.")
        from autotune.machine import parse_spec

        parse_spec(self.gpus)

    def _check_backend(self) -> None:
        """The backend, and the options only one backend reads."""
        if self.backend not in BACKENDS:
            raise ConfigError(
                f"search option backend is {self.backend!r}; expected one of {list(BACKENDS)}."
            )
        if self.concurrent is not None and not _is_count(self.concurrent):
            raise ConfigError(
                f"search option concurrent is {self.concurrent!r}; expected a whole number >= 1."
            )
        for name in ("address", "concurrent"):
            if getattr(self, name) is not None and self.backend != "ray":
                raise ConfigError(
                    f"search option {name} is for backend 'ray', but backend is "
                    f"{self.backend!r}; add backend='ray' (--backend ray)."
                )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], **overrides: Any) -> SearchOptions:
        """Options from a config's ``search`` dict, with explicit ``overrides`` winning.

        ``None`` in ``overrides`` means "not given" and keeps the config's value.
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted((set(data) | set(overrides)) - known)
        if unknown:
            raise ConfigError(
                f"search has unknown options {unknown}; the options are {sorted(known)}."
            )
        values = dict(data)
        values.update({k: v for k, v in overrides.items() if v is not None})
        if "memory_limit" in values and values["memory_limit"] is not None:
            values["memory_limit"] = parse_bytes(values["memory_limit"])
        if values.get("budget") is not None:
            values["budget"] = parse_duration(values["budget"], "budget")
        if values.get("warm_from") is not None:
            values["warm_from"] = parse_studies(values["warm_from"])
        try:
            return cls(**values)
        except TypeError as error:
            raise ConfigError(f"search options: {error}") from None


def _attribute_docstrings(cls: type) -> dict[str, str]:
    """The string literal under each annotated name in ``cls``'s body, cleaned.

    Python keeps no attribute docstrings at run time, so they are read from the source,
    as documentation tools read them.
    """
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    definition = tree.body[0]
    if not isinstance(definition, ast.ClassDef):
        raise TypeError(f"{cls.__qualname__}'s source is not a class definition.")
    docs: dict[str, str] = {}
    for node, after in itertools.pairwise(definition.body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def _is_count(value: Any, *, least: int = 1) -> bool:
    """Whether ``value`` is an integer >= ``least`` (a bool, though an int, is not)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def parse_studies(value: str | Sequence[str]) -> tuple[str, ...]:
    """``warm_from`` as a tuple of study names, paths or URLs: one string is one study, and
    ``"none"`` alone means no study."""
    names = (value,) if isinstance(value, str) else tuple(value)
    if not all(isinstance(name, str) and name for name in names):
        raise ConfigError(
            f"search option warm_from is {value!r}; expected study names, .db paths or "
            "storage URLs (or 'none')."
        )
    return () if names == ("none",) else names


def parse_bytes(value: int | str) -> int:
    """Bytes from an int or a string such as "512MiB", "2GB", "1.5g"."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, str):
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b)?\s*", value.lower())
        if match:
            return int(float(match.group(1)) * _UNITS[match.group(2)])
    raise ConfigError(
        f"memory_limit is {value!r}; expected a number of bytes or a size such as '4GiB'."
    )


_DURATION = re.compile(
    r"(?:(?P<h>[0-9]*\.?[0-9]+)h)?(?:(?P<m>[0-9]*\.?[0-9]+)m(?:in)?)?(?:(?P<s>[0-9]*\.?[0-9]+)s?)?"
)


def parse_duration(value: float | str, name: str) -> float:
    """Seconds from a number or a string such as "90", "90s", "2m" (or "2min"), "1m30s", "1h"; the
    command line gives every value as text, and a budget reads best in minutes."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        match = _DURATION.fullmatch(value.strip().lower().replace(" ", ""))
        if match and any(match.groupdict().values()):
            parts = {unit: float(found or 0) for unit, found in match.groupdict().items()}
            return parts["h"] * 3600 + parts["m"] * 60 + parts["s"]
    raise ConfigError(
        f"search option {name} is {value!r}; expected seconds (90) or a duration such as "
        "'90s', '2m' or '1m30s'."
    )
