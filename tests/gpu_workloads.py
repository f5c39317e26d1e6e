"""Workloads for the real-GPU checks (the ``gpu`` tests and ``tools/gpu_check.py``): a
model that really runs the device out of memory above a batch size, one whose step is
compute-bound even on the largest GPUs, and a plain synchronised loop to hold a probe's
figure against. Importable by name, so that probes can unpickle them."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

CLASSES = 3


class Features(Dataset):
    """``length`` rows of ``width`` random features made in advance (loading costs a copy)."""

    def __init__(self, length: int = 4096, width: int = 1024) -> None:
        generator = torch.Generator().manual_seed(0)
        self.inputs = torch.randn(length, width, generator=generator)
        self.targets = torch.arange(length) % CLASSES

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[index], self.targets[index]


class Indexed(Dataset):
    """``dataset``'s items with their index appended: a loop can check that an epoch
    gave every sample exactly once."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> tuple[Any, ...]:
        return (*self.dataset[index], index)


def compute_bound_model(inputs: int = 1024, width: int = 8192, depth: int = 12) -> nn.Module:
    """``inputs`` features widened to ``depth`` square layers of ``width``: at batch 512,
    about 2.5 TFLOP a training step on 2 MiB of input, so even an H200 computes for
    milliseconds under AMP (tens in float32) where the batch loads in about one."""
    layers: list[nn.Module] = [nn.Linear(inputs, width), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, CLASSES))


class DeviceHog(nn.Module):
    """Holds ``share`` of the device's memory per sample while its step runs: a batch of
    more than ``1 / share`` samples runs the device out of memory for real (CUDA's own
    torch.OutOfMemoryError), a smaller one fits and gives it all back."""

    def __init__(self, share: float = 1 / 64) -> None:
        super().__init__()
        self.share = share
        self.head = nn.Linear(1024, CLASSES)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        total = torch.cuda.get_device_properties(inputs.device).total_memory
        held = torch.empty(
            (inputs.shape[0], int(total * self.share)), dtype=torch.uint8, device=inputs.device
        )
        return self.head(inputs) + held[:, :1].float() * 0


def linear_model(width: int = 256) -> nn.Module:
    """Next to no compute: a probe of it measures the loader and the copy."""
    return nn.Linear(width, CLASSES)


def device_hog() -> nn.Module:
    return DeviceHog()


def plain_rate(
    dataset: Dataset,
    model: nn.Module,
    *,
    batch_size: int,
    amp: str = "off",
    pin_memory: bool = True,
    seconds: float = 3.0,
    warmup_steps: int = 5,
) -> float:
    """Samples/s of a plain loop on ``cuda``: the probe's default optimizer and loss, the
    loss read back every step (the device synchronised), so the figure is the device's."""
    device = torch.device("cuda")
    model = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda") if amp == "fp16" else None
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, pin_memory=pin_memory)

    def step(batch: Any) -> None:
        inputs, targets = (t.to(device, non_blocking=True) for t in batch)
        autocast = (
            torch.autocast("cuda", dtype=dtypes[amp]) if amp in dtypes else contextlib.nullcontext()
        )
        with autocast:
            loss = nn.functional.cross_entropy(model(inputs).float(), targets)
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        loss.item()

    samples, steps, started = 0, 0, None
    while started is None or time.perf_counter() - started < seconds:
        for batch in loader:
            step(batch)
            steps += 1
            if steps == warmup_steps:
                torch.cuda.synchronize()
                started = time.perf_counter()
            elif started is not None:
                samples += len(batch[0])
                if time.perf_counter() - started >= seconds:
                    break
    assert started is not None
    return samples / (time.perf_counter() - started)
