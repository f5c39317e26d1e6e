"""The machine: CPUs, memory and GPUs (through NVML), its fingerprint, and the monitor
that samples what the devices do during a probe. Every machine fact lives here."""

from autotune.machine._gpus import Discovery, Gpu, GpuSpec, discover, parse_spec, select
from autotune.machine._machine import Machine, detect_machine, usable_cpus
from autotune.machine._monitor import Monitor, MonitorFigures
from autotune.machine._topology import FLAT, CpuTopology, format_cpulist, read_topology

__all__ = [
    "FLAT",
    "CpuTopology",
    "Discovery",
    "Gpu",
    "GpuSpec",
    "Machine",
    "Monitor",
    "MonitorFigures",
    "detect_machine",
    "discover",
    "format_cpulist",
    "parse_spec",
    "read_topology",
    "select",
    "usable_cpus",
]
