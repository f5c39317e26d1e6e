"""Check autotune's real GPU paths on a lent GPU machine in one command, and print JSON.

::

    python tools/gpu_check.py [--out benchmarks/results/gpu-check-<date>.json]
                              [--parts copy oom ...] [--wheels DIR]

Each part runs in a process of its own, under its own time limit, so that a hang, a
crash or a failure in one is recorded in the JSON and the next part still runs; the
whole check fits in :data:`BUDGET_S` (8.5 minutes on one GPU with 16 cores):

- ``gpu_tests``: the ``gpu`` test tier (``pytest -m gpu`` of ``tests/gpu/test_gpu_real*.py``),
  its counts and failures;
- ``copy``: pinned and pageable probes with 0 and 4 workers: their wait and copy
  shares of the step, and the sum of the two (at most 1 when the edges are right);
- ``turns``: the same four configs, and fp16 and bf16 beside each other, measured in
  turns in one probe process on the device (the way a confirming round measures):
  each config's samples/s and shares, to read against ``copy``'s probes of their own;
- ``compute``: a compute-bound probe against a plain synchronised loop (their ratio);
- ``oom``: a probe that runs the device out of memory for real, then a good probe
  once the memory is back;
- ``ddp``: a DDP probe of world size 1 over NCCL;
- ``online``: the online loader feeding a model on CUDA for 40 s, no sample lost or
  repeated;
- ``search``: a 6-trial search of ``examples/gpu_vision.py``.

On a machine without CUDA it says so in one line and exits 0.

A bare GPU machine may lack what autotune and its tests need beside torch (optuna and
its dependencies, threadpoolctl, psutil, Pillow for the example). Download the wheels
on a machine with a network, for the GPU machine's Python::

    pip download --only-binary=:all: --python-version 3.12 --implementation cp \\
        --abi cp312 --abi abi3 --platform manylinux2014_x86_64 \\
        --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \\
        -d .gpu-wheels optuna threadpoolctl psutil pillow

(about 29 MiB: optuna, alembic, sqlalchemy, Mako, MarkupSafe, colorlog, tqdm, PyYAML,
packaging, numpy, typing_extensions, threadpoolctl, psutil, Pillow) and carry the
folder with the checkout. When an import fails, this tool installs them from
``--wheels`` (default: ``wheels/``, then ``.gpu-wheels/``) with
``pip install --no-index --find-links DIR``; it never installs torch (the machine's
own build is the one to check) and imports autotune from this checkout. By hand::

    pip install --no-index --find-links .gpu-wheels optuna threadpoolctl psutil pillow
    pip install --no-deps -e .
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import importlib.util
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
BUDGET_S = 510.0
"""The whole check's time limit."""
LIMITS_S: dict[str, float] = {
    "gpu_tests": 170.0,
    "copy": 40.0,
    "turns": 30.0,
    "compute": 35.0,
    "oom": 30.0,
    "ddp": 35.0,
    "online": 55.0,
    "search": 115.0,
}
"""Each part's own time limit, in the order the parts run."""
ONLINE_S = 40.0
NEEDED = {
    "optuna": "optuna",
    "threadpoolctl": "threadpoolctl",
    "psutil": "psutil",
    "numpy": "numpy",
    "PIL": "pillow",
}
"""Modules the check imports beside torch, and the distribution that has each."""
WHEEL_DIRS = (ROOT / "wheels", ROOT / ".gpu-wheels")


# ----------------------------------------------------------------- the driver
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where to write the JSON (default: dated)")
    parser.add_argument("--parts", nargs="+", choices=list(LIMITS_S), default=list(LIMITS_S))
    parser.add_argument("--wheels", type=Path, help="a folder of wheels to install from")
    parser.add_argument("--part", choices=list(LIMITS_S), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.part is not None:  # one part, in its own process: its JSON on the last line
        print(json.dumps(PARTS[args.part]()))
        return 0
    absent = cuda_absent()
    if absent is not None:
        print(f"gpu_check: {absent}; nothing to check")
        return 0
    installed = install_missing(args.wheels)
    started = time.monotonic()
    parts = check(args.parts)
    report = {
        "machine": machine(),
        "installed": installed,
        "seconds": round(time.monotonic() - started, 1),
        "failed_parts": [name for name, part in parts.items() if not part["ok"]],
        "parts": parts,
    }
    out = args.out or ROOT / "benchmarks" / "results" / f"gpu-check-{datetime.date.today()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


def cuda_absent() -> str | None:
    """Why there is no CUDA device to check here; None when there is one."""
    try:
        import torch
    except ImportError:
        return "no torch installed"
    if torch.version.cuda is None:
        return f"no CUDA here (torch {torch.__version__} is a CPU-only build)"
    if not torch.cuda.is_available():
        return f"no CUDA device visible (torch {torch.__version__}, CUDA {torch.version.cuda})"
    return None


def install_missing(wheels: Path | None) -> list[str]:
    """Install what the check imports and this machine lacks, from a folder of wheels
    (never torch, never from a network); the distributions installed."""
    missing = [dist for module, dist in NEEDED.items() if importlib.util.find_spec(module) is None]
    if not missing:
        return []
    folder = wheels or next((d for d in WHEEL_DIRS if d.is_dir()), None)
    if folder is None:
        raise SystemExit(
            f"gpu_check: {', '.join(missing)} not installed and no wheels folder "
            f"(--wheels, or {' or '.join(str(d) for d in WHEEL_DIRS)}); see this tool's "
            "docstring for how to carry them"
        )
    command = [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(folder)]
    done = subprocess.run([*command, *missing], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(
            f"gpu_check: pip could not install {', '.join(missing)} from {folder}: "
            f"{_tail(done.stderr or done.stdout, 3)}"
        )
    importlib.invalidate_caches()
    return missing


def machine() -> dict[str, Any]:
    import torch

    return {
        "gpu": torch.cuda.get_device_name(0),
        "gpus": torch.cuda.device_count(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        "cpus": len(os.sched_getaffinity(0)),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def check(
    names: Sequence[str],
    *,
    limits: Mapping[str, float] = LIMITS_S,
    budget: float = BUDGET_S,
    run: Callable[[str, float], dict[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Run each part in turn, each under its own limit and what is left of ``budget``;
    a part that fails or runs out of time is recorded and the next one runs."""
    run = run or run_part
    deadline = time.monotonic() + budget
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        left = deadline - time.monotonic()
        if left < 5.0:
            results[name] = {"ok": False, "error": f"not run: {left:.0f} s left of {budget:g}"}
            continue
        results[name] = run(name, min(limits[name], left))
    return results


def run_part(name: str, limit: float) -> dict[str, Any]:
    """Part ``name`` in a process of its own (its own process group, and a temporary
    directory, both ended with it), killed after ``limit`` seconds: its result, or why
    there is none."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"gpu-check-{name}-") as scratch:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]),
            "TMPDIR": scratch,
        }
        process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--part", name],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = process.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            _kill_tree(process.pid)
            out, err = process.communicate()
            error = f"timed out after {limit:.0f} s; last output: {_tail(err or out)}"
            return {"ok": False, "seconds": round(time.monotonic() - started, 1), "error": error}
    seconds = round(time.monotonic() - started, 1)
    lines = out.strip().splitlines()
    if process.returncode != 0 or not lines:
        error = f"exited with code {process.returncode}: {_tail(err)}"
        return {"ok": False, "seconds": seconds, "error": error}
    return {"ok": True, "seconds": seconds, **json.loads(lines[-1])}


def _kill_tree(pid: int) -> None:
    """End a part's process, its group, and what left the group (probes lead their own)."""
    import psutil

    with contextlib.suppress(psutil.Error):
        descendants = psutil.Process(pid).children(recursive=True)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        for child in descendants:
            with contextlib.suppress(psutil.Error):
                child.kill()


def _tail(text: str, lines: int = 6) -> str:
    return " | ".join(line for line in text.strip().splitlines()[-lines:])


# ----------------------------------------------------------------- the parts
def gpu_tests() -> dict[str, Any]:
    """``pytest -m gpu`` as this machine can run it: no xdist, none of the suite's own
    addopts (they ask for it), and only the files of the tier (``test_gpu_real*.py``):
    the others import what a bare GPU machine lacks (ray, hypothesis)."""
    files = sorted(
        str(path.relative_to(ROOT)) for path in (TESTS / "gpu").glob("test_gpu_real*.py")
    )
    with tempfile.TemporaryDirectory() as scratch:
        junit = Path(scratch) / "junit.xml"
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:xdist", "-p",
             "no:cacheprovider", "-o", "addopts=", "-q", "--continue-on-collection-errors",
             f"--junitxml={junit}", *files],
            cwd=ROOT, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if not junit.exists():
            return {"exit_code": done.returncode, "output": _tail(done.stdout + done.stderr, 20)}
        suite = ElementTree.parse(junit).getroot()
        suite = suite if suite.tag == "testsuite" else suite[0]
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    failed = []
    for case in suite.iter("testcase"):
        for outcome in (*case.findall("failure"), *case.findall("error")):
            message = (outcome.get("message") or "").splitlines()[:1]
            failed.append(f"{case.get('name')}: {' '.join(message)}"[:300])
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {"exit_code": done.returncode, "passed": passed, **counts, "failed": failed}


def _probe(workload: Any, settings: Any, **fields: Any) -> Any:
    """One probe on GPU 0, placed as a search places it (CUDA_VISIBLE_DEVICES pinned,
    NVML watching); a DDP probe (``mode="ddp"``) as given."""
    from autotune.machine._gpus import discover
    from autotune.machine._machine import usable_cpus
    from autotune.probe import ProbeRequest, WorkloadSource, run_probe
    from autotune.probe._placement import Placement

    request = ProbeRequest(
        source=WorkloadSource(pickled=pickle.dumps(workload)),
        settings=settings,
        device="cuda",
        **{"window_seconds": 0.5, "max_windows": 3, "warmup_seconds": 0.5, **fields},
    )
    if request.mode != "ddp":
        placement = Placement.plan(
            device="cuda",
            gpus="0",
            ranks=None,
            discovery=discover(),
            cpus=sorted(os.sched_getaffinity(0)),
            usable=usable_cpus(),
        )
        (slot,) = placement.slots()
        request = slot.apply(request)
    return run_probe(request)


def _figures(result: Any) -> dict[str, Any]:
    if not result.ok:
        return {"ok": False, "failure": f"{result.failure.kind}: {result.failure.message}"}
    figures = result.figures
    wait, copy = figures.wait_fraction, figures.copy_fraction
    monitor = figures.monitor
    gpus = monitor.gpus if monitor is not None else ()
    return {
        "ok": True,
        "samples_per_s": round(figures.samples_per_s, 1),
        "wait_share": round(wait, 4),
        "copy_share": round(copy, 4),
        "wait_plus_copy": round(wait + copy, 4),
        "startup_s": figures.startup_s,
        "gpu_utilization_percent": gpus[0].utilization_percent if gpus else None,
        "gpu_memory_used_bytes": gpus[0].memory_used_bytes if gpus else None,
    }


def copy_shares() -> dict[str, Any]:
    from autotune import Settings, Workload

    workloads = importlib.import_module("workloads")
    workload = Workload(dataset=workloads.ImageLikeDataset(), model=workloads.image_linear_model)
    configs = {}
    for workers in (0, 4):
        for pinned in (False, True):
            settings = Settings(batch_size=64, num_workers=workers, pin_memory=pinned)
            name = f"workers={workers} {'pinned' if pinned else 'pageable'}"
            configs[name] = _figures(_probe(workload, settings))
    return {"configs": configs}


def in_turns() -> dict[str, Any]:
    from autotune import Settings, Workload

    workloads = importlib.import_module("workloads")
    workload = Workload(dataset=workloads.ImageLikeDataset(), model=workloads.image_linear_model)
    loaders = [
        Settings(batch_size=64, num_workers=workers, pin_memory=pinned)
        for workers in (0, 4)
        for pinned in (False, True)
    ]
    precisions = [Settings(batch_size=64, pin_memory=True, amp=amp) for amp in ("fp16", "bf16")]
    found = {}
    for name, configs in (("loaders", loaders), ("amp", precisions)):
        result = _probe(workload, configs[0], turns=tuple(configs))
        found[name] = {
            "whole": "ok" if result.ok else f"{result.failure.kind}: {result.failure.message}",
            "configs": {
                settings.describe(): _figures(part)
                for settings, part in zip(configs, result.turns, strict=True)
            },
        }
    return found


def compute_ratio() -> dict[str, Any]:
    from autotune import Settings, Workload

    gpu_workloads = importlib.import_module("gpu_workloads")
    dataset = gpu_workloads.Features()
    workload = Workload(dataset=dataset, model=gpu_workloads.compute_bound_model)
    settings = Settings(batch_size=512, pin_memory=True)
    probed = _figures(_probe(workload, settings, window_seconds=1.0, warmup_seconds=1.0))
    plain = gpu_workloads.plain_rate(dataset, gpu_workloads.compute_bound_model(), batch_size=512)
    ratio = probed["samples_per_s"] / plain if probed["ok"] else None
    return {"probe": probed, "plain_samples_per_s": round(plain, 1), "probe_over_plain": ratio}


def out_of_memory() -> dict[str, Any]:
    from autotune import Settings, Workload

    gpu_workloads = importlib.import_module("gpu_workloads")
    workload = Workload(dataset=gpu_workloads.Features(length=512), model=gpu_workloads.device_hog)
    failed = _probe(workload, Settings(batch_size=128), max_windows=2)  # twice the device
    failure = failed.failure
    good = _probe(workload, Settings(batch_size=32), max_windows=2)  # half of it
    return {
        "oom": {
            "kind": failure.kind if failure else None,
            "on_device": failure.on_device() if failure else None,
            "message": failure.message[:300] if failure else None,
        },
        "after": _figures(good),
    }


def ddp_probe() -> dict[str, Any]:
    from autotune import Settings, Workload
    from autotune.probe._protocol import DdpSpec, RankPlace

    gpu_workloads = importlib.import_module("gpu_workloads")
    workload = Workload(dataset=gpu_workloads.Features(), model=gpu_workloads.compute_bound_model)
    spec = DdpSpec(backend="nccl", ranks=(RankPlace(device="cuda:0"),))
    result = _probe(workload, Settings(batch_size=256, pin_memory=True), mode="ddp", ddp=spec)
    return {"info": dict(result.info or {}), **_figures(result)}


def online_loader() -> dict[str, Any]:
    import torch

    import autotune

    gpu_workloads = importlib.import_module("gpu_workloads")
    vision = _example("gpu_vision")
    model = vision.model().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    dataset = gpu_workloads.Indexed(vision.dataset())
    loader = autotune.online(dataset, batch_size=64, device="cuda")
    steps, complete, broken, epoch = 0, 0, 0, 0
    started = time.monotonic()
    with loader:
        while time.monotonic() - started < ONLINE_S:
            loader.set_epoch(epoch)
            seen: list[int] = []
            for images, labels, indices in loader:
                loss = torch.nn.functional.cross_entropy(
                    model(images.cuda(non_blocking=True)), labels.cuda(non_blocking=True)
                )
                optimizer.zero_grad(set_to_none=True)
                loss.backward()  # type: ignore[no-untyped-call]
                optimizer.step()
                seen += indices.tolist()
                steps += 1
                if time.monotonic() - started >= ONLINE_S:
                    break
            else:  # a whole epoch: every sample exactly once
                complete += 1
                broken += sorted(seen) != list(range(len(dataset)))
            epoch += 1
        torch.cuda.synchronize()
    return {
        "seconds": round(time.monotonic() - started, 1),
        "steps": steps,
        "epochs_complete": complete,
        "epochs_lost_or_repeated": broken,
        "settled_on": loader.settings.describe(),
        "still_tuning": loader.tuning,
    }


def search_example() -> dict[str, Any]:
    import autotune

    with tempfile.TemporaryDirectory() as scratch:
        result = autotune.search(
            ROOT / "examples" / "gpu_vision.py",
            device="cuda",
            trials=6,
            seed=0,
            study=str(Path(scratch) / "gpu_vision.db"),
            max_windows=3,
            rounds=1,
            runoff_rounds=1,
            timeout=60.0,
        )
    baseline = result.baseline
    return {
        "chosen": result.settings.describe(),
        "samples_per_s": round(result.samples_per_s, 1),
        "default_samples_per_s": round(baseline.samples_per_s, 1) if baseline else None,
        "wait_share": round(result.figures.wait_fraction, 4),
        "is_default": result.is_default,
    }


def _example(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # the loader's workers unpickle its dataset by name
    spec.loader.exec_module(module)
    return module


PARTS: dict[str, Callable[[], dict[str, Any]]] = {
    "gpu_tests": gpu_tests,
    "copy": copy_shares,
    "turns": in_turns,
    "compute": compute_ratio,
    "oom": out_of_memory,
    "ddp": ddp_probe,
    "online": online_loader,
    "search": search_example,
}

if __name__ == "__main__":
    sys.exit(main())
