"""The C allocator's thresholds: fixed by every loader autotune builds, the user's choice kept.

glibc's rule is per process and cannot be undone, so each case runs in a new interpreter.
Whether the thresholds took is read from glibc itself: with the mmap threshold at 32 MiB
a 16 MiB ``malloc`` comes from the heap; under glibc's starting rule (128 KiB) it gets
a mapping of its own, which ``mallinfo2().hblks`` counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autotune.machine import detect_machine
from autotune.probe import Figures
from autotune.result import DdpResult, SearchResult
from autotune.result._launch import torchrun_line
from autotune.settings import Settings, _allocator

ROOT = Path(__file__).resolve().parents[2]
glibc_only = pytest.mark.skipif(_allocator._glibc() is None, reason="glibc's malloc only")

PROBE = """
import ctypes, json, os, sys

class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd",
        "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Mallinfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]

def mapped_by_a_16_mib_malloc():
    before = libc.mallinfo2().hblks
    block = libc.malloc(16 * 2**20)
    mapped = libc.mallinfo2().hblks - before
    libc.free(block)
    return mapped

{body}
print(json.dumps({{
    "state": state,
    "mapped": mapped_by_a_16_mib_malloc(),
    "env": {{k: os.environ.get(k) for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")}},
}}))
"""


def run(body: str, *, path: Path = ROOT, **env: str) -> dict[str, object]:
    """Run ``body`` (which sets ``state``) in a new interpreter with ``env`` on top of a
    clean environment; returns what glibc says of a 16 MiB malloc after it."""
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in {*_allocator.ENVIRONMENT, _allocator.SWITCH, "GLIBC_TUNABLES"}
    }
    base["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([str(ROOT), str(path)]))
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(body=textwrap.dedent(body))],
        env={**base, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    found: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


FIX = """
import autotune
state = autotune.fix_allocator()
"""


@glibc_only
def test_fixing_moves_a_16_mib_malloc_into_the_heap_and_sets_the_variables() -> None:
    left = run("state = None")
    assert left["mapped"] == 1, "glibc's starting rule maps it"
    fixed = run(FIX)
    assert fixed == {
        "state": "fixed",
        "mapped": 0,
        "env": {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "67108864"},
    }


@glibc_only
def test_a_tuned_loader_fixes_them_as_it_is_built() -> None:
    found = run(
        """
        from autotune.settings._settings import Settings
        loader = Settings(batch_size=4).loader(list(range(8)))
        from autotune.settings._allocator import fix_allocator
        state = fix_allocator()  # again: nothing more to do
        """
    )
    assert found["state"] == "fixed" and found["mapped"] == 0


@glibc_only
def test_the_switch_leaves_glibc_s_rule() -> None:
    found = run(FIX, AUTOTUNE_FIX_ALLOCATOR="0")
    assert found == {
        "state": "off",
        "mapped": 1,
        "env": {"MALLOC_MMAP_THRESHOLD_": None, "MALLOC_TRIM_THRESHOLD_": None},
    }


@glibc_only
@pytest.mark.parametrize(
    "env",
    [
        {"MALLOC_MMAP_THRESHOLD_": "65536"},
        {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536"},
    ],
)
def test_the_user_s_thresholds_win(env: dict[str, str]) -> None:
    found = run(FIX, **env)
    assert found["state"] == "user's"
    assert found["mapped"] == 1, "the user's 64 KiB threshold still maps it"
    assert found["env"] == {
        "MALLOC_MMAP_THRESHOLD_": env.get("MALLOC_MMAP_THRESHOLD_"),
        "MALLOC_TRIM_THRESHOLD_": None,
    }


@glibc_only
def test_a_process_started_with_autotune_s_rule_counts_as_fixed() -> None:
    found = run(FIX, **_allocator.ENVIRONMENT)
    assert found["state"] == "fixed" and found["mapped"] == 0


@glibc_only
def test_a_spawned_worker_inherits_the_rule(tmp_path: Path) -> None:
    # A spawned worker imports the dataset's class by name: it lives in a module.
    (tmp_path / "environment_dataset.py").write_text(
        textwrap.dedent(
            """
            import os

            import torch


            class Environment(torch.utils.data.Dataset):
                def __len__(self):
                    return 1

                def __getitem__(self, index):
                    return os.environ.get("MALLOC_MMAP_THRESHOLD_", "")
            """
        )
    )
    found = run(
        """
        from autotune.settings._settings import Settings
        from environment_dataset import Environment

        loader = Settings(batch_size=1, num_workers=1).loader(
            Environment(), multiprocessing_context="spawn", collate_fn=list
        )
        state = next(iter(loader))[0]
        """,
        path=tmp_path,
    )
    assert found["state"] == "33554432"


def test_elsewhere_than_glibc_nothing_is_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*_allocator.ENVIRONMENT, _allocator.SWITCH, "GLIBC_TUNABLES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(_allocator, "_fixed", False)
    monkeypatch.setattr(_allocator, "_glibc", lambda: None)
    assert _allocator.fix_allocator() == "not glibc"
    assert not set(_allocator.ENVIRONMENT) & set(os.environ)


def test_the_code_and_the_launch_line_carry_the_rule() -> None:
    code = Settings(batch_size=32, num_workers=2).to_code()
    compile(code, "<tuned code>", "exec")
    lines = code.splitlines()
    assert lines[0] == "import autotune"
    call = "autotune.fix_allocator()  # glibc malloc's thresholds fixed, as measured"
    assert lines[lines.index("import torch") + 2] == call
    assert lines.index(call) < lines.index("loader = torch.utils.data.DataLoader(")
    line = torchrun_line(world_size=2, device_type="cpu", visible=None, threads=1)
    assert "MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=67108864 torchrun" in line


@pytest.mark.parametrize(
    ("measured_under", "says"),
    [
        ("user's", "# measured under your own malloc thresholds"),
        ("off", "(AUTOTUNE_FIX_ALLOCATOR=0)"),
        (None, "(by an autotune from before it fixed them)"),
    ],
)
def test_figures_measured_under_another_rule_are_not_sold_as_the_fixed_one(
    measured_under: _allocator.AllocatorState | None, says: str
) -> None:
    settings = Settings(batch_size=32, num_workers=2)
    code = settings.to_code(allocator=measured_under)
    compile(code, "<tuned code>", "exec")
    lines = code.splitlines()
    assert "import autotune" not in lines and "fix_allocator" not in code
    rule = lines[lines.index("import torch") + 2]
    assert rule.startswith("# measured under") and says in rule
    line = torchrun_line(
        world_size=2, device_type="cpu", visible=None, threads=1, allocator=measured_under
    )
    assert line == "OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 train.py"


def test_off_glibc_the_code_says_nothing_of_the_allocator() -> None:
    code = Settings(batch_size=32).to_code(allocator="not glibc")
    assert "malloc" not in code and "autotune" not in code
    assert code.splitlines()[:2] == ["import torch", ""]


def result_measured_under(info: dict[str, object]) -> SearchResult:
    return SearchResult(
        settings=Settings(batch_size=32, num_workers=2),
        figures=Figures(),
        device="cpu",
        machine=detect_machine(None),
        tolerance=0.03,
        confirmed=True,
        user_batch_size=32,
        workload=info,
    )


def test_a_result_emits_the_rule_its_probes_recorded() -> None:
    fixed = result_measured_under({"allocator": "fixed"})
    assert "autotune.fix_allocator()" in fixed.to_code()
    # a study saved before the probes recorded a rule: measured under glibc's own
    older = SearchResult.from_dict(json.loads(json.dumps(result_measured_under({}).to_dict())))
    assert "fix_allocator" not in older.to_code()
    assert "by an autotune from before it fixed them" in older.to_code()


def test_a_ddp_result_launches_under_the_rule_its_probes_ran_under() -> None:
    fields = {
        "world_size": 2,
        "backend": "gloo",
        "device_type": "cpu",
        "settings": Settings(batch_size=32, num_workers=1),
        "kwargs": {},
        "rank_cpus": 1,
        "user_batch_size": 64,
    }
    fixed = DdpResult(**fields, allocator="fixed")  # type: ignore[arg-type]
    assert "MALLOC_MMAP_THRESHOLD_=33554432" in fixed.torchrun()
    assert "autotune.fix_allocator()" in fixed.to_code()
    saved = fixed.to_dict()
    assert DdpResult.from_dict(saved) == fixed
    del saved["allocator"]  # as a study written before the rule was recorded
    older = DdpResult.from_dict(saved)
    assert older.torchrun() == "OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 train.py"
    assert "fix_allocator" not in older.to_code() and "import autotune" not in older.to_code()
