"""One real training step: forward, loss, backward, optimizer step, with AMP.

The default forward and loss, used when the config defines neither ``step``
nor ``loss``:

- batch ``(inputs, targets, ...)``: ``output = model(inputs)``; cross-entropy when
  the targets are integer class indices, mean squared error when they have the
  output's shape;
- batch a dict: ``output = model(**batch)``; the loss is ``output.loss`` or
  ``output["loss"]`` (Hugging Face style);
- batch a tensor: ``output = model(batch)``; the loss is ``output.float().mean()``
  (a stand-in: the probe measures speed, not learning).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from autotune.settings import AmpMode
from autotune.workload import Workload


class ContractError(TypeError):
    """A user's piece returned something of the wrong kind; the message says what and what
    was expected, so it is shown without the exception's type name."""


class PieceError(Exception):
    """An error in one of the user's pieces; ``piece`` names it for the message."""

    def __init__(self, piece: str, error: BaseException) -> None:
        super().__init__(str(error))
        self.piece = piece
        self.error = error


@contextlib.contextmanager
def blame(piece: str) -> Iterator[None]:
    """Attribute any exception raised inside to the user's ``piece``."""
    try:
        yield
    except PieceError:
        raise
    except Exception as error:
        raise PieceError(piece, error) from error


def to_device(batch: Any, device: torch.device, non_blocking: bool) -> Any:
    """Move every tensor in a (nested) batch to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        return {k: to_device(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(to_device(v, device, non_blocking) for v in batch))
    if isinstance(batch, list | tuple):
        return type(batch)(to_device(v, device, non_blocking) for v in batch)
    return batch


def _tensors(batch: Any) -> Iterator[torch.Tensor]:
    """The tensors of a (nested) batch, in order."""
    if isinstance(batch, torch.Tensor):
        yield batch
        return
    values = batch.values() if isinstance(batch, Mapping) else batch
    if isinstance(values, list | tuple) or isinstance(batch, Mapping):
        for value in values:
            yield from _tensors(value)


def batch_length(batch: Any) -> int | None:
    """Samples in a batch, guessed from its tensors: for batches no sampler counts (an
    IterableDataset's). The first tensor's leading dimension may be another axis (a
    ``(sequence, batch)`` tensor), so the guess is the first of the first tensor's
    dimensions that every tensor of the batch has; its leading one if none is shared.
    A batch of scalars is one sample; None where there is no tensor."""
    shapes = [tensor.shape for tensor in _tensors(batch)]
    if not shapes:
        return None
    shapes = [shape for shape in shapes if len(shape) > 0]
    if not shapes:
        return 1
    shared = set(shapes[0]).intersection(*(set(shape) for shape in shapes[1:]))
    return int(next((size for size in shapes[0] if size in shared), shapes[0][0]))


def describe_batch(batch: Any) -> str:
    """A short structural description: ``tuple(Tensor[32,3,64,64] uint8, Tensor[32] int64)``."""
    if isinstance(batch, torch.Tensor):
        dims = ",".join(str(d) for d in batch.shape)
        return f"Tensor[{dims}] {str(batch.dtype).removeprefix('torch.')}"
    if isinstance(batch, Mapping):
        inner = ", ".join(f"{k}: {describe_batch(v)}" for k, v in batch.items())
        return "{" + inner + "}"
    if isinstance(batch, list | tuple):
        inner = ", ".join(describe_batch(v) for v in batch)
        return f"{type(batch).__name__}({inner})"
    return type(batch).__name__


def batch_bytes(batch: Any) -> int:
    """Bytes of tensor data in a batch (what crosses shared memory from a worker)."""
    if isinstance(batch, torch.Tensor):
        return batch.element_size() * batch.nelement()
    values = batch.values() if isinstance(batch, Mapping) else batch
    if isinstance(values, list | tuple) or isinstance(batch, Mapping):
        return sum(batch_bytes(v) for v in values)
    return 0


def forward(model: nn.Module, batch: Any) -> Any:
    """The default forward: inputs first in a sequence, keywords from a dict."""
    if isinstance(batch, Mapping):
        return model(**batch)
    if isinstance(batch, list | tuple):
        return model(batch[0])
    return model(batch)


def default_loss(output: Any, batch: Any) -> torch.Tensor:
    """The default loss (see the module docstring)."""
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, Mapping):
        loss = output.get("loss")
    if isinstance(loss, torch.Tensor):
        return loss
    if isinstance(batch, Mapping):
        raise ContractError(
            "the batch is a dict and the model's output has no `loss`; define "
            "loss(output, batch) or step(model, batch) in the config"
        )
    if isinstance(output, list | tuple):
        output = next((o for o in output if isinstance(o, torch.Tensor)), output)
    if not isinstance(output, torch.Tensor):
        raise ContractError(
            f"the model returned {type(output).__name__}; the default loss needs a tensor. "
            "Define loss(output, batch) in the config"
        )
    if isinstance(batch, list | tuple) and len(batch) >= 2 and isinstance(batch[1], torch.Tensor):
        target = batch[1]
        if not target.is_floating_point() and output.dim() == target.dim() + 1:
            return F.cross_entropy(output.float(), target.long())
        if output.shape == target.shape:
            return F.mse_loss(output.float(), target.float())
        raise ContractError(
            f"the default loss cannot pair the model's output {list(output.shape)} with the "
            f"targets {list(target.shape)}; define loss(output, batch) in the config"
        )
    return output.float().mean()


def default_optimizer(params: Any) -> torch.optim.Optimizer:
    """SGD with momentum, the default optimizer."""
    return torch.optim.SGD(params, lr=0.01, momentum=0.9)


_AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class Trainer:
    """Runs training steps of one model on batches already on the device."""

    def __init__(self, workload: Workload, model: nn.Module, device: torch.device, amp: AmpMode):
        self.workload = workload
        self.model = model
        self.device = device
        self.amp = amp
        make_optimizer: Callable[[Any], Any] = workload.optimizer or default_optimizer
        with blame("optimizer(params)"):
            self.optimizer = make_optimizer(model.parameters())
            if not isinstance(self.optimizer, torch.optim.Optimizer):
                raise ContractError(
                    f"optimizer(params) returned {type(self.optimizer).__name__}; "
                    "expected a torch.optim.Optimizer"
                )
        self.scaler: torch.amp.GradScaler | None = None
        self.use_amp(amp)

    def use_amp(self, amp: AmpMode) -> None:
        """Train the next steps under ``amp``: configs measured in turns in one process
        share the model and its optimizer, each under its own precision."""
        self.amp = amp
        # fp16 gradients underflow without loss scaling; bf16 has fp32's range.
        wants_scaler = amp == "fp16" and self.device.type == "cuda"
        if not wants_scaler:
            self.scaler = None
        elif self.scaler is None:
            self.scaler = torch.amp.GradScaler(self.device.type)

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.amp == "off":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=_AMP_DTYPES[self.amp])

    def step(self, batch: Any) -> None:
        """One forward, backward and optimizer step."""
        with self._autocast():
            if self.workload.step is not None:
                piece = "step(model, batch)"
                with blame(piece):
                    loss = self.workload.step(self.model, batch)
            else:
                with blame("model(batch)"):
                    output = forward(self.model, batch)
                piece = "loss(output, batch)" if self.workload.loss else "the default loss"
                with blame(piece):
                    loss = (self.workload.loss or default_loss)(output, batch)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            got = (
                f"Tensor{list(loss.shape)}"
                if isinstance(loss, torch.Tensor)
                else type(loss).__name__
            )
            raise PieceError(piece, ContractError(f"the loss is {got}; expected a scalar tensor"))
        self.optimizer.zero_grad(set_to_none=True)
        with blame("backward and optimizer step"):
            if self.scaler is not None:
                self.scaler.scale(loss).backward()  # type: ignore[no-untyped-call]
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                loss.backward()  # type: ignore[no-untyped-call]
                self.optimizer.step()
