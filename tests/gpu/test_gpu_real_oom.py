"""On a real CUDA GPU: what the device raises when it is full is out of memory, a batch
too large for it is ruled out whatever loads it and never stops the search, the fork
server stays usable when a preloaded module queries CUDA, and a compute-bound probe
reads what a plain synchronised loop reads. Skipped without CUDA; run them on a GPU
machine with ``pytest -m gpu``."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import gpu_workloads
import pytest
import torch
from conftest import CHILD_PYTHONPATH, quick
from faults import study_trials

import autotune
from autotune.probe import ProbeRequest, WorkloadSource, run_probe
from autotune.settings._settings import Settings
from autotune.workload._workload import Workload

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def run_script(source: str, tmp_path: Path, timeout: float = 240.0) -> dict:
    """Run ``source`` in a fresh interpreter (its CUDA state its own); its last line of
    output, as JSON."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(source)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), CHILD_PYTHONPATH])},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_what_a_full_device_raises_is_classified_out_of_memory(tmp_path) -> None:
    # The caching allocator holds every byte it can get; then cuBLAS and cuDNN need
    # handles and workspaces of their own, in a process that has made none yet.
    result = run_script(
        """
        import json, torch
        from autotune.probe._failure import classify
        held = []
        for size in (2**34, 2**32, 2**30, 2**28, 2**26, 2**24, 2**22, 2**20):
            while True:
                try:
                    held.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
                except torch.OutOfMemoryError:
                    break
        kinds = {}
        attempts = {
            "matmul": lambda: torch.ones(512, 512, device="cuda").mm(torch.ones(512, 512).cuda()),
            "conv": lambda: torch.nn.functional.conv2d(
                torch.ones(8, 3, 64, 64, device="cuda"), torch.ones(16, 3, 3, 3, device="cuda")
            ),
            "tensor": lambda: torch.empty(2**30, dtype=torch.uint8, device="cuda"),
        }
        for name, attempt in attempts.items():
            try:
                attempt()
                torch.cuda.synchronize()
            except Exception as error:
                failure = classify(error, "model(batch)")
                kinds[name] = [failure.kind, failure.message]
        print(json.dumps(kinds))
        """,
        tmp_path,
    )
    assert "tensor" in result, result  # the device was full
    for name, (kind, message) in result.items():
        assert kind == "oom", (name, message)


def test_a_batch_too_large_for_the_device_is_not_run_again_with_another_loader(workdir) -> None:
    space = {"batch_size": [8, 16, 64], "num_workers": [0, 2], "amp": "off"}
    result = autotune.search(
        dataset=gpu_workloads.Features(length=1024),
        model=gpu_workloads.device_hog,
        batch_size=16,
        device="cuda",
        space=space,
        **quick(trials=6, seed=0),
    )
    assert result.study_path is not None
    trials = [t for t in study_trials(Path(result.study_path)) if t.role == "explore"]
    ooms = [t for t in trials if t.failure and t.failure.kind == "oom"]
    assert ooms, [t.failure for t in trials]
    assert all("CUDA out of memory" in t.failure.message for t in ooms)
    smallest = min(t.settings.batch_size for t in ooms)
    first = min(t.number for t in ooms)
    for trial in trials:
        if trial.number > first and trial.settings.batch_size >= smallest:
            assert trial.failure is not None and trial.failure.kind == "infeasible", trial
    assert result.settings.batch_size < smallest  # the search went on past the failures


def test_a_good_probe_after_a_device_out_of_memory_has_the_memory_back() -> None:
    def request(batch_size: int) -> ProbeRequest:
        workload = Workload(
            dataset=gpu_workloads.Features(length=512), model=gpu_workloads.device_hog
        )
        return ProbeRequest(
            source=WorkloadSource(pickled=pickle.dumps(workload)),
            settings=Settings(batch_size=batch_size),
            device="cuda",
            window_seconds=0.3,
            max_windows=2,
            warmup_seconds=0.2,
        )

    failed = run_probe(request(128))  # twice the device's memory
    assert failed.failure is not None and failed.failure.kind == "oom", failed.failure
    good = run_probe(request(32))  # half of it, which only a device given back can hold
    assert good.ok, good.failure


def test_a_preloaded_module_that_queries_cuda_leaves_the_probes_usable(tmp_path) -> None:
    (tmp_path / "queries_cuda.py").write_text(
        "import torch\nAVAILABLE = torch.cuda.is_available()\n"
    )
    result = run_script(
        """
        import json, pickle, warnings
        import gpu_workloads
        from autotune.probe import ProbeRequest, WorkloadSource, run_probe, _forkserver
        from autotune.settings._settings import Settings
        from autotune.workload._workload import Workload
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _forkserver.preload_in_probes(["queries_cuda"])
        workload = Workload(dataset=gpu_workloads.Features(length=512, width=256),
                            model=gpu_workloads.linear_model)
        result = run_probe(ProbeRequest(
            source=WorkloadSource(pickled=pickle.dumps(workload)),
            settings=Settings(batch_size=64), device="cuda",
            window_seconds=0.2, max_windows=2, warmup_seconds=0.1))
        print(json.dumps({
            "ok": result.ok, "failure": str(result.failure),
            "preloaded": "queries_cuda" in _forkserver._preload,
            "warned": [str(w.message) for w in caught],
        }))
        """,
        tmp_path,
    )
    assert result["ok"], result["failure"]
    assert not result["preloaded"]
    assert any("importing queries_cuda touches CUDA" in w for w in result["warned"])


def test_a_compute_bound_probe_reads_what_a_synchronised_loop_reads() -> None:
    dataset, settings = gpu_workloads.Features(), Settings(batch_size=512, pin_memory=True)
    workload = Workload(dataset=dataset, model=gpu_workloads.compute_bound_model)
    probed = run_probe(
        ProbeRequest(
            source=WorkloadSource(pickled=pickle.dumps(workload)),
            settings=settings,
            device="cuda",
            window_seconds=1.0,
            max_windows=3,
            warmup_seconds=1.0,
        )
    )
    assert probed.ok, probed.failure
    plain = gpu_workloads.plain_rate(dataset, gpu_workloads.compute_bound_model(), batch_size=512)
    torch.cuda.empty_cache()  # the memory back for the tests after this one
    # Unsynchronised edges would count the kernels queued, not those run: far above.
    assert 0.8 < probed.figures.samples_per_s / plain < 1.25, (probed.figures.samples_per_s, plain)
