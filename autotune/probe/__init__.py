"""The probe: one short real training run of one config, in its own process."""

from autotune.probe._failure import shm_shortfall
from autotune.probe._forkserver import preload_in_probes, start_probe_server
from autotune.probe._placement import PLACEMENT, Placement, Slot, SlotPool
from autotune.probe._protocol import (
    Failure,
    Figures,
    Measurement,
    Mode,
    ProbeRequest,
    ProbeResult,
    Window,
    WorkloadSource,
    reference_windows,
)
from autotune.probe._runner import refuse_while_bootstrapping, run_probe
from autotune.probe._steady import ends_steady, steady_share
from autotune.probe._turns import rewarm_seconds

__all__ = [
    "PLACEMENT",
    "Failure",
    "Figures",
    "Measurement",
    "Mode",
    "Placement",
    "ProbeRequest",
    "ProbeResult",
    "Slot",
    "SlotPool",
    "Window",
    "WorkloadSource",
    "ends_steady",
    "preload_in_probes",
    "reference_windows",
    "refuse_while_bootstrapping",
    "rewarm_seconds",
    "run_probe",
    "shm_shortfall",
    "start_probe_server",
    "steady_share",
]
