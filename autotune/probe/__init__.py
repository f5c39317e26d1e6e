"""The probe: one short real training run of one config, in its own process."""

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
from autotune.probe._runner import OnWindow, run_probe

__all__ = [
    "Failure",
    "Figures",
    "Measurement",
    "Mode",
    "OnWindow",
    "ProbeRequest",
    "ProbeResult",
    "Window",
    "WorkloadSource",
    "reference_windows",
    "run_probe",
]
