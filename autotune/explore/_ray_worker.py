"""The worker's side of a Ray trial: one probe in a Ray worker, each window reported to Tune.

This module runs on every node of the cluster. It gets the config file by
value (its text travels with the trial), so a node need not share the driver's
disk for the config itself; the modules the config imports and the data its
dataset reads must be reachable on every node.

Each window's report carries the figures so far (every window, start-up, peak
memory), because a trial the driver prunes is ended by Ray at once: the driver records
it from its last report. A probe that fails reports its failure as a last result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import socket
import tempfile
from pathlib import Path
from typing import Any

import psutil

from autotune.probe import Figures, ProbeRequest, Window, WorkloadSource, run_probe
from autotune.settings import Settings

METRIC = "samples_per_s"
"""What Tune's searcher and scheduler maximise: the trial's samples/s so far."""
TIME_ATTR = "windows"
"""Windows measured so far: the step at which the driver reports the trial's throughput."""
SETTINGS_KEY = "settings"
NUMBER_KEY = "number"
"""The Optuna trial number, in each Tune trial's config."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrialSpec:
    """What every trial of one Tune run shares, sent once through Ray's object store."""

    template: ProbeRequest
    config_text: str | None
    """The config file's text, when the workload comes from one."""
    memory_share: float | None
    """With no memory_limit given: the share of its node's available memory a trial may
    use (the default share, split among the trials that fit on a node)."""
    niceness: int = 0
    """The driver's scheduling niceness: a trial probes at it, as the user's training
    would run, not at the lower priority Ray gives its workers."""


def run_trial(config: dict[str, Any], spec: TrialSpec) -> None:
    """Tune's function trainable: probe ``config["settings"]`` and report each window."""
    from ray import tune

    settings = Settings.from_dict(config[SETTINGS_KEY])
    request = dataclasses.replace(on_this_node(spec), settings=settings, mode="train")
    node = {**node_info(), "niceness": match_niceness(spec.niceness)}

    def report(figures: Figures, **extra: Any) -> None:
        # Blocks until the driver has read it; ASHA's stop ends this thread here.
        tune.report(
            {
                METRIC: figures.samples_per_s,
                TIME_ATTR: len(figures.windows),
                "figures": figures.to_dict(),
                "node": node,
                **extra,
            }
        )

    def on_window(window: Window, so_far: Figures) -> bool:
        report(so_far)
        return True

    result = run_probe(request, on_window=on_window)
    if result.failure is not None:
        # A result, not an exception: the worker (and its fork server) stays up for the
        # next trial. No new window, so ASHA has nothing new to decide on.
        report(result.figures, failure=result.failure.to_dict())


def match_niceness(niceness: int) -> int:
    """Set this process's niceness to ``niceness`` where allowed; the niceness it has now.

    Ray starts its workers at niceness 15, so that on a busy node a probe would get a
    fraction of the CPU the user's training gets and read low; the probe's fork server
    and its DataLoader workers inherit what is set here. Lowering a niceness needs
    privilege (CAP_SYS_NICE or RLIMIT_NICE): without it the worker keeps Ray's, and the
    driver says so.
    """
    with contextlib.suppress(OSError):
        if os.getpriority(os.PRIO_PROCESS, 0) != niceness:
            os.setpriority(os.PRIO_PROCESS, 0, niceness)
    return os.getpriority(os.PRIO_PROCESS, 0)


def on_this_node(spec: TrialSpec) -> ProbeRequest:
    """The probe request as this node runs it: its copy of the config file, its GPU, its
    share of memory."""
    request = spec.template
    if spec.config_text is not None and request.source.config_path is not None:
        path = local_config(Path(request.source.config_path), spec.config_text)
        request = dataclasses.replace(request, source=WorkloadSource(config_path=str(path)))
    if request.device.startswith("cuda"):
        request = _on_ray_gpu(request)
    if spec.memory_share is not None:
        limit = int(psutil.virtual_memory().available * spec.memory_share)
        request = dataclasses.replace(request, memory_limit=limit)
    return request


def _on_ray_gpu(request: ProbeRequest) -> ProbeRequest:
    """The request pinned to the GPU Ray gave this trial (its CUDA_VISIBLE_DEVICES), as a
    one-rank slot: cuda:0 in the probe, watched through NVML by its UUID."""
    from autotune.machine import discover
    from autotune.probe import Slot

    gpus = discover().gpus
    if len(gpus) == 1:
        return Slot(index=0, device="cuda:0", cpus=None, gpu=gpus[0]).apply(request)
    env = dict(request.env)  # not seen through NVML: pass Ray's choice on as it is
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
    return dataclasses.replace(
        request, device="cuda:0", cpus=None, env=tuple(env.items()), monitor_gpus=()
    )


def local_config(path: Path, text: str) -> Path:
    """The config file at ``path`` if this node has it with the same text, else a copy of
    ``text`` under the temporary directory (same file name, so error messages match)."""
    try:
        if path.read_text() == text:
            return path
    except OSError:
        pass
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    copy = Path(tempfile.gettempdir()) / "autotune-configs" / digest / path.name
    if not copy.exists():
        copy.parent.mkdir(parents=True, exist_ok=True)
        partial = copy.with_name(f".{copy.name}.{os.getpid()}")
        partial.write_text(text)
        partial.replace(copy)  # atomic: concurrent trials on a node never read half a file
    return copy


def node_info() -> dict[str, Any]:
    """Where this trial runs: the host, and Ray's id of the node."""
    import ray

    return {"hostname": socket.gethostname(), "node_id": ray.get_runtime_context().get_node_id()}
