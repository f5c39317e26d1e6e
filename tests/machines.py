"""Machines with known figures, for tests whose outcome must not depend on the machine
they run on."""

from __future__ import annotations

from autotune.machine import Machine

TWO_CPUS = Machine(
    cpus=2, cpu_model="t", memory_bytes=2**33, shm_bytes=2**30, accelerator="cpu", cpu_bf16=True
)
"""A 2-CPU machine with bf16 and no accelerator, 8 GiB of RAM and 1 GiB of /dev/shm."""
