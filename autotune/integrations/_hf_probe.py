"""The pieces of a search built from a Hugging Face ``Trainer`` that run in probes.

A probe is a new process, so what it runs travels pickled: small objects of
module-level classes that carry only what they need. Never the ``Trainer`` itself:
its accelerator and callbacks belong to the process that made it, and its model and
dataset travel separately.
"""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from collections.abc import Mapping
from typing import Any

import torch

from autotune._errors import ConfigError

_LEFT_BEHIND = frozenset(
    {
        # The probe builds its own model, data and optimizer from the workload.
        "model",
        "model_wrapped",
        "train_dataset",
        "eval_dataset",
        "data_collator",
        "optimizer",
        "lr_scheduler",
        # Bound to the process and the run that made them.
        "accelerator",
        "gather_function",
        "deepspeed",
        "callback_handler",
        "state",
        "control",
        "_memory_tracker",
    }
)
"""Trainer attributes a probe does not get."""

_NEEDED = ("args", "compute_loss_func", "label_smoother")
"""Trainer attributes that ``Trainer.compute_loss`` reads: without them the loss would differ."""


class ProbeAccelerator:
    """Stands in for the Trainer's accelerator in a probe: one process, nothing wrapped.

    ``Trainer.compute_loss`` asks the accelerator for its parallelism config and to
    unwrap the model; a probe trains one plain model in one process.
    """

    parallelism_config = None
    num_processes = 1
    process_index = 0

    def unwrap_model(self, model: Any, *args: Any, **kwargs: Any) -> Any:
        """The model itself: a probe's model is never wrapped."""
        return model


class TrainerLoss:
    """``step(model, batch) -> loss`` through the Trainer's own ``compute_loss``.

    The method is the Trainer class's, so an override in a subclass is what the probe
    measures. It runs on a stand-in instance of that class (made without ``__init__``)
    holding the trainer's attributes that pickle, less the model, the data and the
    process-bound ones.

    Args:
        trainer_class: the Trainer's class; must be importable (defined at module level).
        state: the attributes its ``compute_loss`` may read.
    """

    def __init__(self, trainer_class: type, state: Mapping[str, Any]) -> None:
        self.trainer_class = trainer_class
        self.state = dict(state)
        self._trainer: Any = None

    @classmethod
    def of(cls, trainer: Any) -> TrainerLoss:
        """The loss step of ``trainer``.

        Raises:
            ConfigError: an attribute ``compute_loss`` needs (``args``, ``compute_loss_func``,
                ``label_smoother``) cannot be sent to a probe process.
        """
        state = {}
        for name, value in vars(trainer).items():
            if name in _LEFT_BEHIND:
                continue
            try:
                pickle.dumps(value)
            except Exception as error:
                if name in _NEEDED:
                    raise ConfigError(
                        f"the trainer's {name}={value!r} cannot be sent to a probe process "
                        f"({error}); define it at module level (not a lambda or a nested "
                        "function)."
                    ) from None
                continue  # an attribute of the user's that compute_loss may not need
            state[name] = value
        return cls(type(trainer), state)

    def __getstate__(self) -> dict[str, Any]:
        # The stand-in trainer is rebuilt in each process; it is not sent.
        return {"trainer_class": self.trainer_class, "state": self.state}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.trainer_class = state["trainer_class"]
        self.state = state["state"]
        self._trainer = None

    def __call__(self, model: torch.nn.Module, batch: Any) -> Any:
        trainer = self._stand_in()
        trainer.model = trainer.model_wrapped = model
        # compute_loss may pop the labels; the probe may train on a batch again (echo).
        inputs = dict(batch) if isinstance(batch, Mapping) else batch
        loss = trainer.compute_loss(model, inputs)
        return loss[0] if isinstance(loss, tuple) else loss

    def _stand_in(self) -> Any:
        if self._trainer is None:
            trainer: Any = object.__new__(self.trainer_class)
            vars(trainer).update(self.state)
            trainer.accelerator = ProbeAccelerator()
            self._trainer = trainer
        return self._trainer


@dataclasses.dataclass(frozen=True)
class TrainerOptimizer:
    """``optimizer(params)``: the optimizer class and keywords the Trainer trains with.

    Args:
        optimizer_class: a ``torch.optim.Optimizer`` subclass.
        kwargs: its keywords besides the parameters.
    """

    optimizer_class: type[torch.optim.Optimizer]
    kwargs: Mapping[str, Any]

    def __call__(self, params: Any) -> torch.optim.Optimizer:
        return self.optimizer_class(params, **self.kwargs)

    @classmethod
    def of(cls, trainer: Any) -> TrainerOptimizer:
        """The optimizer of ``trainer``: the one it was given (same class, same defaults),
        else the one ``Trainer.create_optimizer`` would make from its arguments, else
        AdamW with the arguments' learning rate and weight decay."""
        given = getattr(trainer, "optimizer", None)
        if isinstance(given, torch.optim.Optimizer):
            return cls.accepting(type(given), given.defaults)
        args = trainer.args
        chosen = getattr(trainer, "optimizer_cls_and_kwargs", None)
        if chosen is None:
            try:
                chosen = trainer.get_optimizer_cls_and_kwargs(args)
            except Exception:  # an optimizer whose package is missing here, say
                chosen = None
        if chosen is not None:
            optimizer_class, kwargs = chosen
            # Factories (Muon...) and optimizers that bring their own parameter groups
            # (GaLore) need the model, which optimizer(params) does not get.
            plain = isinstance(optimizer_class, type) and issubclass(
                optimizer_class, torch.optim.Optimizer
            )
            if plain and not {"params", "model"} & set(kwargs):
                return cls.accepting(optimizer_class, {"weight_decay": args.weight_decay, **kwargs})
        return cls(torch.optim.AdamW, {"lr": args.learning_rate, "weight_decay": args.weight_decay})

    @classmethod
    def accepting(
        cls, optimizer_class: type[torch.optim.Optimizer], kwargs: Mapping[str, Any]
    ) -> TrainerOptimizer:
        """``optimizer_class`` with those of ``kwargs`` its constructor takes (an
        optimizer's ``defaults`` hold entries that are not constructor keywords)."""
        parameters = inspect.signature(optimizer_class).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
            return cls(optimizer_class, dict(kwargs))
        return cls(optimizer_class, {k: v for k, v in kwargs.items() if k in parameters})
