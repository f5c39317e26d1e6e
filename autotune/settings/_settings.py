"""Settings: one complete choice of every knob, as a plain frozen value.

The same type describes a config a trial measures and the config a search
chooses; it turns itself into DataLoader keyword arguments, JSON, code, and a
tuned loader.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, Literal

from autotune._errors import ConfigError
from autotune.settings._allocator import AllocatorState, allocator_lines, calls_autotune
from autotune.settings._loader import build_loader

AmpMode = Literal["off", "bf16", "fp16"]
AMP_MODES: tuple[AmpMode, ...] = ("off", "bf16", "fp16")
TORCH_PREFETCH = 2
"""torch's DataLoader prefetch_factor when workers load and none is given."""
WORKER_THREADS = 1
"""The native threads per worker autotune's configs use unless the space says
otherwise: what torch already gives its own pool in a worker."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """Every knob autotune tunes, for one config."""

    batch_size: int
    """Samples per batch handed to the model."""
    num_workers: int = 0
    """DataLoader worker processes; 0 loads in the training process."""
    prefetch_factor: int | None = None
    """Batches each worker loads ahead; only with workers."""
    persistent_workers: bool = False
    """Keep workers alive between epochs; only with workers."""
    pin_memory: bool = False
    """Page-locked host memory for faster, asynchronous copies; only with an accelerator."""
    amp: AmpMode = "off"
    """Automatic mixed precision: off, bf16 or fp16 (fp16 uses a GradScaler)."""
    echo: int = 1
    """Data echoing: each batch is trained on this many times (1 = off)."""
    threads: int | None = None
    """torch.set_num_threads of the training process (CPU devices); None leaves torch's default."""
    worker_threads: int | None = None
    """Threads of the native pools (numpy's BLAS, OpenMP, torch's) in each DataLoader
    worker; None leaves them as the libraries start them (one per core, in every
    worker). Only with workers: without any it is None."""

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"batch_size is {self.batch_size}, but must be >= 1.")
        if self.num_workers < 0:
            raise ConfigError(f"num_workers is {self.num_workers}, but must be >= 0.")
        if self.num_workers == 0 and (self.prefetch_factor is not None or self.persistent_workers):
            raise ConfigError(
                "prefetch_factor and persistent_workers need num_workers > 0, but num_workers is 0."
            )
        if self.prefetch_factor is not None and self.prefetch_factor < 1:
            raise ConfigError(f"prefetch_factor is {self.prefetch_factor}, but must be >= 1.")
        if self.amp not in AMP_MODES:
            raise ConfigError(f"amp is {self.amp!r}, but must be one of {list(AMP_MODES)}.")
        if self.echo < 1:
            raise ConfigError(f"echo is {self.echo}, but must be >= 1.")
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"threads is {self.threads}, but must be >= 1 or None.")
        if self.worker_threads is not None and self.worker_threads < 1:
            raise ConfigError(f"worker_threads is {self.worker_threads}, but must be >= 1 or None.")
        if self.num_workers == 0 and self.worker_threads is not None:
            # No worker, no worker pools: one config, one key, whatever the cap says.
            object.__setattr__(self, "worker_threads", None)

    # ----------------------------------------------------------------- as data
    def to_dict(self) -> dict[str, Any]:
        """The settings as a dict of JSON types."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Settings:
        """Rebuild settings from :meth:`to_dict`'s output; unknown keys are an error."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown settings {unknown}; expected some of {sorted(known)}.")
        return cls(**dict(data))

    def key(self) -> str:
        """A canonical string identifying this config (equal settings, equal key)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    def dataloader_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``torch.utils.data.DataLoader`` (the loader knobs only)."""
        kwargs: dict[str, Any] = {
            "batch_size": self.batch_size,
            "num_workers": self.num_workers,
            "pin_memory": self.pin_memory,
        }
        if self.num_workers > 0:
            kwargs["persistent_workers"] = self.persistent_workers
            if self.prefetch_factor is not None:
                kwargs["prefetch_factor"] = self.prefetch_factor
        return kwargs

    @property
    def batches_ahead(self) -> int:
        """Batches the workers load ahead of the training, ``prefetch_factor`` (torch's
        default when unset) each: what they hand over at once when starting; 0 without
        workers."""
        return self.num_workers * (self.prefetch_factor or TORCH_PREFETCH)

    def started_worker_threads(self) -> int | None:
        """The cap on each worker's native threads once this config has workers: its own
        when it has some, :data:`WORKER_THREADS` for workers started from none (as the
        default space caps them)."""
        return self.worker_threads if self.num_workers else WORKER_THREADS

    def describe(self) -> str:
        """A short one-line description for progress lines and tables."""
        parts = [f"workers={self.num_workers}"]
        if self.num_workers > 0:
            parts.append(f"prefetch={self.prefetch_factor or TORCH_PREFETCH}")
            parts.append(f"persistent={'yes' if self.persistent_workers else 'no'}")
        if self.pin_memory:
            parts.append("pin")
        parts.append(f"batch={self.batch_size}")
        if self.amp != "off":
            parts.append(f"amp={self.amp}")
        if self.echo != 1:
            parts.append(f"echo={self.echo}")
        if self.threads is not None:
            parts.append(f"threads={self.threads}")
        if self.worker_threads is not None:
            parts.append(f"worker_threads={self.worker_threads}")
        return " ".join(parts)

    # ----------------------------------------------------------------- as code
    def to_code(
        self,
        *,
        dataset: str = "dataset",
        device: str = "cpu",
        allocator: AllocatorState | None = "fixed",
    ) -> str:
        """Python source that builds the tuned loader and applies the training knobs.

        Args:
            allocator: the C allocator's rule the settings were measured under
                (:func:`autotune.fix_allocator`'s answer; None: not recorded): "fixed"
                puts the call in the code, another rule a comment that names it.
        """
        imports = ["import threadpoolctl"] if self.worker_init_code() else []
        own = ["import autotune"] if calls_autotune(allocator) else []
        lines = [*own, *imports, "import torch", "", *allocator_lines(allocator)]
        lines += self.worker_init_code()
        if self.threads is not None:
            lines.append(f"torch.set_num_threads({self.threads})")
        lines.append("loader = torch.utils.data.DataLoader(")
        lines.append(f"    {dataset},")
        lines += self.loader_keyword_lines()
        lines.append("    shuffle=True,  # False for an IterableDataset")
        lines.append(")")
        return "\n".join(lines + self.training_notes(device)) + "\n"

    def worker_init_code(self) -> list[str]:
        """Code lines defining the ``worker_init_fn`` that caps each worker's native
        thread pools, when the settings cap them (it needs ``import threadpoolctl`` and
        ``import torch``); none otherwise."""
        if self.worker_threads is None:  # always None without workers
            return []
        return [
            "",
            "def worker_init_fn(worker_id: int) -> None:",
            "    # numpy's BLAS and OpenMP start a thread per core in every worker: cap them",
            f"    threadpoolctl.threadpool_limits(limits={self.worker_threads})",
            f"    torch.set_num_threads({self.worker_threads})",
            "",
            "",
        ]

    def loader_keyword_lines(self, comments: Mapping[str, str] | None = None) -> list[str]:
        """The DataLoader call's keyword lines (``worker_init_fn`` with the cap), each
        followed by its comment in ``comments``, if any."""
        comments = comments or {}
        lines = [
            f"    {name}={value!r},{comments.get(name, '')}"
            for name, value in self.dataloader_kwargs().items()
        ]
        if self.worker_init_code():
            lines.append("    worker_init_fn=worker_init_fn,")
        return lines

    def training_notes(self, device: str = "cpu") -> list[str]:
        """Code lines (echo) and comments (pinned copies, AMP) for the training loop."""
        lines = []
        device_type = device.split(":")[0]
        if self.echo > 1:
            lines.append(f"loader = autotune.EchoLoader(loader, {self.echo})")
        if self.pin_memory:
            lines.append("# copy batches with tensor.to(device, non_blocking=True)")
        if self.amp == "bf16":
            lines.append(
                f'# forward and loss under torch.autocast("{device_type}", dtype=torch.bfloat16)'
            )
        elif self.amp == "fp16":
            lines.append(
                f'# forward and loss under torch.autocast("{device_type}", dtype=torch.float16),'
            )
            lines.append(f'# backward and step through torch.amp.GradScaler("{device_type}")')
        return lines

    # ----------------------------------------------------------------- as a loader
    def loader(self, dataset: Any, **overrides: Any) -> Any:
        """A ``torch.utils.data.DataLoader`` over ``dataset`` with these settings.

        Args:
            dataset: a map-style or iterable dataset.
            **overrides: any DataLoader keyword (``collate_fn``, ``sampler``, ``drop_last``,
                ``shuffle``...); they win over the tuned values. A ``worker_init_fn`` runs
                after the cap of :attr:`worker_threads`.

        Returns:
            A plain DataLoader, or an :class:`EchoLoader` around one when ``echo > 1``.
        """
        return build_loader(
            dataset,
            self.dataloader_kwargs(),
            echo=self.echo,
            worker_threads=self.worker_threads,
            **overrides,
        )
