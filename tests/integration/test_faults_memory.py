"""Out of memory (the host's RAM limit; CUDA's out-of-memory error, faked on CPU) and
shared memory too small for the batches in flight (a real, tiny /dev/shm)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from functools import cache

import pytest
import workloads
from conftest import CHILD_PYTHONPATH
from fake_clock import FakeTime
from faults import Case, drive, probe_request, study_trials

import autotune
from autotune.probe import ProbeResult, run_probe, shm_shortfall
from autotune.settings import Settings

BATCHES = {"num_workers": 0, "threads": 1, "amp": "off", "batch_size": [8, 16, 32]}


def probe(model, *, batch_size: int, **fields) -> ProbeResult:
    dataset = workloads.SleepyDataset()
    return run_probe(
        probe_request(dataset, model, batch_size=batch_size, window_seconds=0.1, **fields)
    )


def test_cuda_out_of_memory_is_recorded_as_out_of_memory() -> None:
    result = probe(workloads.oom_model, batch_size=16)  # raises torch.OutOfMemoryError above 8
    assert result.failure is not None
    assert result.failure.kind == "oom"
    assert result.failure.piece == "model(batch)"
    assert "CUDA out of memory" in result.failure.message


def test_the_memory_limit_stops_a_probe_that_grows() -> None:
    # 64 MiB a sample: 1 GiB a step. Each forward frees the last step's tensor and fills
    # a new one, so a sample of the tree's memory may land mid-fill: even half-filled,
    # the probe is over its 500 MiB limit (32 MiB a sample, 512 MiB, was not always).
    result = probe(workloads.BatchMemoryModel(mib=64), batch_size=16, memory_limit=500 * 2**20)
    assert result.failure is not None, result.figures
    assert result.failure.kind == "oom"
    assert "over the memory limit of 0.49 GiB (search option memory_limit)" in (
        result.failure.message
    )


@pytest.mark.parametrize(
    ("driver", "model", "options", "reason"),
    [
        ("cli", "batch_memory_model", {"memory_limit": "500MiB"}, "over the memory limit"),
        ("api", "oom_model", {}, "CUDA out of memory"),
    ],
    ids=["cli-host-memory", "api-cuda"],
)
def test_out_of_memory_rules_out_larger_batches(
    driver, model, options, reason, workdir, capsys
) -> None:
    case = Case(model=model, space=BATCHES, options={"trials": 8, **options})
    outcome = drive(driver, case, workdir, capsys)
    assert outcome.code == 0, outcome.error
    explored = [t for t in outcome.trials() if t.role == "explore"]
    probed = [t for t in explored if not (t.failure and t.failure.kind == "infeasible")]
    ooms = [t for t in probed if t.failure and t.failure.kind == "oom"]
    assert ooms and all(reason in t.failure.message for t in ooms)
    assert all(t.settings.batch_size > 8 for t in ooms)
    for oom in ooms:  # nothing as large was run after it
        later = [t for t in probed if t.number > oom.number]
        assert all(t.settings.batch_size < oom.settings.batch_size for t in later)
    blocked = [t for t in explored if t.failure and t.failure.kind == "infeasible"]
    for trial in blocked:
        assert trial.figures is None  # not run
        assert re.fullmatch(
            r"not run: batch (\d+ > batch )?\d+(, which)? ran out of (device )?memory with the "
            r"same (settings|AMP) in trial #\d+",
            trial.failure.message,
        )
    chosen = autotune.load(outcome.study).settings.batch_size
    assert chosen < min(t.settings.batch_size for t in ooms)


# ------------------------------------------------------------------ shared memory
def test_batches_in_flight_are_checked_against_free_shared_memory() -> None:
    mib = 2**20
    fits = shm_shortfall(num_workers=2, prefetch_factor=2, batch_bytes=mib, free_bytes=5 * mib)
    assert fits is None
    short = shm_shortfall(num_workers=4, prefetch_factor=4, batch_bytes=mib, free_bytes=5 * mib)
    assert short is not None and short.kind == "shm"
    assert short.message.startswith(
        "not run: 17 batches in flight (4 workers x prefetch 4, + 1) of 1.0 MiB need 17.0 MiB "
        "of shared memory (/dev/shm), and 5.0 MiB is free"
    )
    assert "docker run --shm-size" in short.message
    assert shm_shortfall(num_workers=0, prefetch_factor=None, batch_bytes=mib, free_bytes=0) is None


@cache
def private_shm_command() -> list[str] | None:
    """``unshare`` arguments that give a command a /dev/shm of its own, or None when this
    machine does not allow it (no mount namespaces for this user)."""
    if shutil.which("unshare") is None or not os.path.isdir("/dev/shm"):
        return None
    for flags in (["--mount"], ["--map-root-user", "--mount"]):
        probe = ["unshare", *flags, "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"]
        if subprocess.run(probe, capture_output=True).returncode == 0:
            return ["unshare", *flags]
    return None


_IN_A_TINY_SHM = """
import json, pickle, sys
import autotune, workloads
from autotune.probe import ProbeRequest, WorkloadSource, run_probe
from autotune.settings._settings import Settings
from autotune.workload._workload import Workload
from autotune.cli import main

report = {}
report["cli"] = main(["search", "cli/fault.py", "--study", "cli/studies/fault.db"])
autotune.search(**json.loads(sys.argv[1]), dataset=workloads.big_items_dataset,
                model=workloads.big_items_model, study="api/studies/fault.db")
report["api"] = 0
# A probe told to run with workers anyway: shared memory runs out for real.
workload = Workload(dataset=workloads.BigItemsDataset(), model=workloads.big_items_model,
                    batch_size=8)
result = run_probe(ProbeRequest(
    source=WorkloadSource(pickled=pickle.dumps(workload)),
    settings=Settings(batch_size=8, num_workers=2, prefetch_factor=2), device="cpu",
    window_seconds=0.1, max_windows=2, warmup_seconds=0.05, stall_timeout=20))
report["probe"] = result.failure.to_dict() if result.failure else None
with open("report.json", "w") as file:
    json.dump(report, file)
"""


def test_shared_memory_too_small_for_the_batches(workdir) -> None:
    """A real 4 MiB /dev/shm (a tmpfs in a mount namespace of the test's own); batches of
    2 MiB, so one worker with prefetch 2 (3 batches in flight) cannot fit."""
    command = private_shm_command()
    if command is None:
        pytest.skip("this machine gives no mount namespace to mount a small /dev/shm in")
    case = Case(dataset="big_items_dataset", model="big_items_model")
    for where in ("cli", "api"):
        (workdir / where).mkdir()
    (workdir / "cli" / "fault.py").write_text(case.config())
    keywords = {k: v for k, v in case.api_kwargs().items() if k not in ("dataset", "model")}
    script = textwrap.dedent(_IN_A_TINY_SHM)
    shell = (
        'mount -t tmpfs -o size=4m tmpfs /dev/shm && "$@"; code=$?; ls -A /dev/shm > left.txt; '
        "exit $code"
    )
    run = subprocess.run(
        [*command, "sh", "-c", shell, "sh", sys.executable, "-c", script, json.dumps(keywords)],
        cwd=workdir,
        env={**os.environ, "PYTHONPATH": CHILD_PYTHONPATH},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert (workdir / "left.txt").read_text() == "", "left behind in /dev/shm"
    report = json.loads((workdir / "report.json").read_text())
    assert report["cli"] == 0 and report["api"] == 0

    # The search refuses the config with workers up front, naming shared memory and the fix.
    for where in ("cli", "api"):
        study = workdir / where / "studies" / "fault.db"
        refused = [t for t in study_trials(study) if t.state == "FAIL"]
        assert refused and all(t.settings.num_workers == 1 for t in refused)
        for trial in refused:
            assert trial.failure.kind == "shm"
            assert "need 6.0 MiB of shared memory (/dev/shm), and 4.0 MiB is free" in (
                trial.failure.message
            )
            assert "docker run --shm-size" in trial.failure.message
        assert autotune.load(study).settings.num_workers == 0

    # A probe that runs anyway fails when shared memory runs out, with the same advice.
    # How is a race: the worker's error reaches the loader (No space left on device), or
    # the worker cannot hand a batch over, drops it, and the loader waits for it until the
    # stall timeout (torch's queue prints that error and carries on); then the half-made
    # batch file the worker left in /dev/shm says why.
    failure = report["probe"]
    assert failure["kind"] == "shm", failure["message"]
    assert "No space left on device" in failure["message"] or (
        "no first batch within 20 s" in failure["message"]
        and "half-made in /dev/shm" in failure["message"]
    )
    assert "shared memory (/dev/shm) is too small" in failure["message"]
    assert "docker run --shm-size" in failure["message"]


@pytest.mark.parametrize(
    ("then", "allocated", "kind", "first"),
    [
        ("hang", False, "shm", "no first batch within 2 s"),
        ("exit", False, "shm", "RuntimeError: DataLoader worker (pid"),
        ("hang", True, "timeout", "no first batch within 2 s"),
    ],
    ids=["dropped-batch", "dead-worker", "hang-with-whole-files"],
)
def test_a_worker_that_left_half_made_batch_files_ran_out_of_shared_memory(
    then: str,
    allocated: bool,
    kind: str,
    first: str,
    tmp_path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker that could not allocate a batch in /dev/shm may hang the loader or die
    without saying why; the batch file it left half-made says it, and goes."""
    from autotune.probe import _shm

    monkeypatch.setattr(_shm, "_SHM_DIR", tmp_path)
    dataset = workloads.HalfMadeShmDataset(str(tmp_path), then, allocated=allocated)
    settings = Settings(batch_size=4, num_workers=1, prefetch_factor=1)
    # A hang needs the stall timeout to end; a dead worker is reported by torch as soon as
    # it is seen, so its timeout is only a bound, wide enough for a slow worker start-up.
    stall_timeout = 2.0 if then == "hang" else 60.0
    result = run_probe(probe_request(dataset, settings=settings, stall_timeout=stall_timeout))
    assert result.failure is not None
    assert result.failure.kind == kind, result.failure.message
    assert result.failure.message.startswith(first), result.failure.message
    made = "a DataLoader worker could not hand its batches over: it left 1 batch file half-made"
    assert (made in result.failure.message) is (kind == "shm")
    # Removed, also when the worker died before the search listed the probe's processes:
    # the probe names its workers as it starts them.
    assert list(tmp_path.iterdir()) == []


def test_the_memory_watch_reads_proportional_sizes_only_when_due_or_over_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from autotune.probe import _memory_watch

    reads = {"rss": 0, "pss": 0}
    sizes = {"rss": 100, "pss": 60}

    def resident(process: object) -> int:
        reads["rss"] += 1
        return sizes["rss"]

    def proportional(process: object) -> int:
        reads["pss"] += 1
        return sizes["pss"]

    monkeypatch.setattr(_memory_watch, "_resident", resident)
    monkeypatch.setattr(_memory_watch, "_memory_of", proportional)
    clock = FakeTime()
    watch = _memory_watch.TreeWatch(os.getpid(), limit=5_000, interval=3600, clock=clock)
    try:
        tree = len(watch._processes())  # this process and its children (pytest's own)
        reads["rss"] = reads["pss"] = 0
        assert watch.sample() == 60 * tree  # the first sample reads the peak
        assert reads["pss"] == tree and watch.peak == 60 * tree
        for _ in range(4):  # 0.2 s apart: resident sizes only
            clock.t += 0.2
            assert watch.sample() == 100 * tree
        assert reads["pss"] == tree and reads["rss"] == 5 * tree
        clock.t += _memory_watch.PSS_SECONDS  # the peak is due again
        watch.sample()
        assert reads["pss"] == 2 * tree
        sizes["rss"], sizes["pss"] = 10_000, 9_000  # over the limit: read at once
        clock.t += 0.2
        assert watch.sample() == 9_000 * tree
        assert watch.exceeded_at == 9_000 * tree and watch.peak == 9_000 * tree
    finally:
        watch.stop()


def test_the_memory_watch_spaces_out_reads_that_cost_more_than_their_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each proportional read takes 50 ms of the clock per process (a tree of many workers
    # takes that in all): the peak's reads are spaced out beyond PSS_SECONDS.
    from autotune.probe import _memory_watch

    clock = FakeTime()
    reads: list[float] = []
    sizes = {"rss": 100, "pss": 60}

    def proportional(process: object) -> int:
        reads.append(clock.t)
        clock.t += 0.05
        return sizes["pss"]

    monkeypatch.setattr(_memory_watch, "_resident", lambda process: sizes["rss"])
    monkeypatch.setattr(_memory_watch, "_memory_of", proportional)
    watch = _memory_watch.TreeWatch(os.getpid(), limit=5_000, interval=3600, clock=clock)
    try:
        tree = len(watch._processes())
        reads.clear()
        watch.sample()
        cost = 0.05 * tree
        assert len(reads) == tree
        spacing = cost / _memory_watch.PEAK_SHARE
        assert spacing > _memory_watch.PSS_SECONDS
        clock.t = spacing * 0.99  # not yet: the read would take more than its share
        watch.sample()
        assert len(reads) == tree
        watch.sample(force=True)  # at a moment that is not measured: read whatever it costs
        assert len(reads) == 2 * tree
        clock.t = reads[-tree] + spacing
        watch.sample()
        assert len(reads) == 3 * tree
        # Over the limit by the resident sum: read again after cost / LIMIT_SHARE, sooner.
        sizes["rss"] = 10_000
        last = reads[-tree]  # when the last read began
        clock.t = last + cost / _memory_watch.LIMIT_SHARE * 0.99
        watch.sample()
        assert len(reads) == 3 * tree
        clock.t = last + cost / _memory_watch.LIMIT_SHARE * 1.01
        assert clock.t < last + spacing  # sooner than the peak's spacing
        watch.sample()
        assert len(reads) == 4 * tree
    finally:
        watch.stop()
