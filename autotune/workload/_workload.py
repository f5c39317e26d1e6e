"""The workload: what to train, from a config file or from Python callables.

A config file is a Python module, loaded with importlib, that defines:

- ``dataset()`` -> a torch Dataset (map-style or iterable)            required
- ``model()`` -> a ``torch.nn.Module``                                 required
- ``loss(output, batch)`` -> a scalar tensor                           optional
- ``optimizer(params)`` -> a ``torch.optim.Optimizer`` (default SGD)   optional
- ``step(model, batch)`` -> the loss, for models with several inputs  optional
- ``collate_fn(items)`` -> a batch, handed to the DataLoader as is    optional
- ``batch_size`` (int, default 32), ``device`` ("cpu", "cuda", ...)   optional
- ``space = {...}`` to fix or narrow knobs, ``search = {...}``        optional

The workload travels to probe processes either as the config's path (the
child loads the file itself) or pickled, for callables given in Python.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import pickle
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from torch import nn

from autotune._errors import ConfigError

DEFAULT_BATCH_SIZE = 32
_CALLABLES = ("dataset", "model", "loss", "optimizer", "step", "collate_fn")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Workload:
    """What a probe trains: factories for the data and the model, and how to step."""

    dataset: Any
    """A function returning a Dataset, or a Dataset itself."""
    model: Any
    """A function returning an nn.Module, or an nn.Module itself (each trial gets a copy)."""
    loss: Callable[[Any, Any], Any] | None = None
    """loss(output, batch) -> scalar tensor; None: the default described in the README."""
    optimizer: Callable[[Any], Any] | None = None
    """optimizer(params) -> Optimizer; None: SGD(lr=0.01, momentum=0.9)."""
    step: Callable[[Any, Any], Any] | None = None
    """step(model, batch) -> loss, replacing the default forward and loss."""
    collate_fn: Callable[[list[Any]], Any] | None = None
    """Handed to the DataLoader as given."""
    batch_size: int = DEFAULT_BATCH_SIZE
    """The batch size the user trains with today; the default loader's and the space's centre."""
    device: str | None = None
    """"cpu", "cuda", "cuda:1"...; None picks a GPU when there is one."""
    name: str = "workload"
    """Names the study by default."""
    config_path: str | None = None
    """The config file this workload came from; probes load it themselves."""

    def __post_init__(self) -> None:
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int):
            raise ConfigError(f"batch_size is {self.batch_size!r}; expected a positive integer.")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size is {self.batch_size}; expected a positive integer.")
        if self.dataset is None:
            raise ConfigError("no dataset given; expected a Dataset or a function returning one.")
        if self.model is None:
            raise ConfigError("no model given; expected an nn.Module or a function returning one.")
        for piece in ("loss", "optimizer", "step", "collate_fn"):
            value = getattr(self, piece)
            if value is not None and not callable(value):
                raise ConfigError(
                    f"{piece} is {type(value).__name__}; expected a function or None."
                )
        if self.device is not None and not isinstance(self.device, str):
            raise ConfigError(f"device is {self.device!r}; expected a string such as 'cuda'.")

    def make_dataset(self) -> Any:
        """Call the dataset factory (or return the dataset given)."""
        if _is_dataset_like(self.dataset) or not callable(self.dataset):
            return self.dataset
        return self.dataset()

    def make_model(self) -> Any:
        """Call the model factory (or return the module given)."""
        if isinstance(self.model, nn.Module) or not callable(self.model):
            return self.model
        return self.model()

    def origin(self) -> str:
        """Where this workload came from, for messages."""
        if self.config_path:
            return f"config {self.config_path}"
        return f"the {self.name!r} workload"


def _is_dataset_like(value: Any) -> bool:
    from torch.utils.data import Dataset, IterableDataset

    return isinstance(value, Dataset | IterableDataset)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoadedConfig:
    """A config file's contents: the workload and the raw ``space``/``search`` dicts."""

    workload: Workload
    space: Mapping[str, Any]
    search: Mapping[str, Any]


def load_config(path: str | Path) -> LoadedConfig:
    """Load a config file as a module and read its named pieces.

    Raises:
        ConfigError: the file is missing, not Python, fails to import or lacks a piece.
    """
    module = _import_config(Path(path))
    where = f"config {path}"
    pieces: dict[str, Any] = {}
    for piece in _CALLABLES:
        value = getattr(module, piece, None)
        if value is None:
            continue
        if piece in ("dataset", "model") and not callable(value):
            raise ConfigError(
                f"{where}: `{piece}` is {type(value).__name__}; expected a function "
                f"`{piece}()` returning {_EXPECTED[piece]}."
            )
        pieces[piece] = value
    for required in ("dataset", "model"):
        if required not in pieces:
            raise ConfigError(
                f"{where} defines no `{required}()`; expected a function returning "
                f"{_EXPECTED[required]}."
            )
    space = getattr(module, "space", None) or {}
    search = getattr(module, "search", None) or {}
    for name, value in (("space", space), ("search", search)):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: `{name}` is {type(value).__name__}; expected a dict.")
    try:
        workload = Workload(
            **pieces,
            batch_size=getattr(module, "batch_size", DEFAULT_BATCH_SIZE),
            device=getattr(module, "device", None),
            name=Path(path).stem,
            config_path=str(Path(path).resolve()),
        )
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None
    return LoadedConfig(workload=workload, space=dict(space), search=dict(search))


_EXPECTED = {
    "dataset": "a torch.utils.data.Dataset",
    "model": "a torch.nn.Module",
}


def _import_config(path: Path) -> ModuleType:
    where = f"config {path}"
    if not path.exists():
        raise ConfigError(f"{where}: no such file.")
    if path.is_dir() or path.suffix != ".py":
        raise ConfigError(f"{where}: expected a Python file ending in .py.")
    resolved = path.resolve()
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:8]
    module_name = f"autotune_config_{_identifier(path.stem)}_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, resolved)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{where}: cannot be loaded as a Python module.")
    module = importlib.util.module_from_spec(spec)
    # Registered so that classes and functions defined in the config pickle by reference.
    sys.modules[module_name] = module
    # No __pycache__ beside the user's config: a search writes only its study.
    dont_write_before, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
    except SyntaxError as error:
        sys.modules.pop(module_name, None)
        raise ConfigError(f"{where}, line {error.lineno}: syntax error: {error.msg}.") from None
    except Exception as error:
        sys.modules.pop(module_name, None)
        raise ConfigError(
            f"{where} raised {type(error).__name__} while loading: {error}"
        ) from error
    finally:
        sys.dont_write_bytecode = dont_write_before
    return module


def _identifier(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text)


def ensure_picklable(workload: Workload) -> None:
    """Check that a Python-given workload can reach a probe process.

    Raises:
        ConfigError: naming the piece that cannot be pickled and what to do.
    """
    if workload.config_path is not None:
        return
    for piece in _CALLABLES:
        value = getattr(workload, piece)
        if value is None:
            continue
        try:
            pickle.dumps(value)
        except Exception as error:
            raise ConfigError(
                f"{piece}={value!r} cannot be sent to a probe process ({error}); define it "
                "at module level (not a lambda or a nested function), or use a config file."
            ) from None
