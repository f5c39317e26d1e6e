"""The command line: exit codes, one-line messages, and the study it writes."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from faults import one_error_line

from autotune.cli import main
from autotune.decide import RUNOFF
from autotune.pipeline._costs import ProbeCost
from autotune.pipeline._dry_run import PROBE_START_S

QUICK_SEARCH = """
search = {"window_seconds": 0.1, "max_windows": 3, "warmup_seconds": 0.05, "ceilings": False,
          "trials": 4, "seed": 0, "rounds": 1, "finalists": 1}
space = {"num_workers": [0, 1], "threads": 1, "batch_size": 8, "amp": "off"}
"""

GOOD = (
    """
from workloads import linear_model, sleepy_dataset
dataset = sleepy_dataset
model = linear_model
batch_size = 8
"""
    + QUICK_SEARCH
)


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_search_show_export_and_resume(capsys, write_config, workdir) -> None:
    config = write_config(GOOD, "good.py")
    code, out, err = run(capsys, "search", str(config))
    assert code == 0, err
    assert out.startswith("best: workers=")
    assert "default DataLoader (num_workers=0, batch_size=8)" in out
    assert "speedup over the default" in out
    assert "diagnosis of the best: " in out and "diagnosis of the default loader: " in out
    assert "torch.utils.data.DataLoader(" in out and "\nsearch time: " in out
    assert "preflight:" in err and "trial #0" in err
    assert (workdir / "studies" / "good.db").exists()

    code, out, err = run(capsys, "show", "studies/good.db")
    assert code == 0, err
    assert "study 'good' in studies/good.db" in out
    assert "best: workers=" in out
    roles = {row.split()[2] for row in out.splitlines() if re.match(r" *\d+ [A-Z]+ ", row)}
    assert {"baseline", "explore", "confirm"} <= roles  # the trials table
    took = next(line for line in out.splitlines() if line.startswith("search time: "))
    assert re.search(r"\(preflight [\d.]+ s, bounds [\d.]+ s, .*explore [\d.]+ s, confirm ", took)
    assert "ceilings" not in took and "continued" not in took

    code, out, err = run(capsys, "export", "good", "-o", "settings.json")
    assert code == 0, err
    exported = json.loads((workdir / "settings.json").read_text())
    assert exported["dataloader"]["batch_size"] == 8
    assert exported["settings"]["num_workers"] in (0, 1)
    assert exported["baseline"]["settings"]["num_workers"] == 0

    code, out, err = run(capsys, "search", str(config), "--trials", "2", "--resume")
    assert code == 0, err
    code, out, _ = run(capsys, "show", "good")
    assert "this search only, which continued the study's earlier ones" in out
    # 4 + 2 explored trials probed; repeats of a measured config spend none of the budget
    explored = [line for line in out.splitlines() if re.match(r" *\d+ \w+ +explore ", line)]
    assert sum("same config as" not in line for line in explored) == 6, out


@pytest.mark.parametrize(
    ("pieces", "expected"),
    [
        (
            "from workloads import sleepy_dataset as dataset\n"
            "from torch import nn\ndef model(): return nn.Linear(5, 3)",
            "model(batch): RuntimeError: mat1 and mat2 shapes cannot be multiplied",
        ),
        (
            "from workloads import sleepy_dataset as dataset, linear_model as model\n"
            "def dataset(): raise OSError('bucket not reachable')",
            "dataset(): OSError: bucket not reachable",
        ),
        (
            "from workloads import sleepy_dataset as dataset, linear_model as model\n"
            "def loss(output, batch): return output",
            "loss(output, batch): the loss is Tensor[8, 3]; expected a scalar tensor",
        ),
    ],
)
def test_broken_workloads_are_one_line_naming_the_piece(capsys, write_config, pieces, expected):
    config = write_config(pieces + "\nbatch_size = 8\n" + QUICK_SEARCH)
    code, _, err = run(capsys, "search", str(config))
    assert code == 2
    assert expected in one_error_line(err)


def test_the_hint_for_models_with_several_inputs(capsys, write_config) -> None:
    source = (
        "from workloads import sleepy_dataset as dataset\n"
        "from torch import nn\n"
        "class TwoInputs(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__(); self.linear = nn.Linear(8, 3)\n"
        "    def forward(self, x, mask):\n"
        "        return self.linear(x * mask)\n"
        "def model(): return TwoInputs()\n" + QUICK_SEARCH
    )
    code, _, err = run(capsys, "search", str(write_config(source)))
    assert code == 2
    assert "define step(model, batch)" in one_error_line(err)


def test_debug_shows_the_traceback(capsys, write_config) -> None:
    config = write_config("def model(): pass")
    code, _, err = run(capsys, "search", str(config), "--debug")
    assert code == 2
    assert "Traceback" in err
    assert err.strip().splitlines()[-1].startswith("autotune: error: ")


def test_show_and_export_of_a_missing_study(capsys, workdir) -> None:
    for command in ("show", "export"):
        code, _, err = run(capsys, command, "nothing")
        assert code == 2
        assert "no study at studies/nothing.db" in one_error_line(err)


def test_the_installed_command_exits_2(write_config) -> None:
    config = write_config("def model(): pass")
    process = subprocess.run(
        [sys.executable, "-m", "autotune", "search", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert process.returncode == 2
    assert process.stderr.startswith("autotune: error: config ")
    assert process.stdout == ""


def test_dry_run_prints_the_plan_and_measures_nothing(capsys, write_config, workdir) -> None:
    config = write_config(GOOD)
    assert main(["search", str(config), "--dry-run", "--trials", "5", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert "dry run: nothing is measured and nothing is written" in out
    assert "num_workers: one of 0, 1" in out
    assert "pin_memory: left out: it needs an accelerator" in out
    assert "budget: 5 exploration trials" in out and "in 2 interleaved rounds" in out
    assert "and up to 3 more for those still within the noise of each other" in out
    assert "time: at most about" in out
    assert not (workdir / "studies").exists()
    # The runoff's rounds are a flag too, and count in the time the plan may take.
    assert main(["search", str(config), "--dry-run", "--trials", "5", "--runoff-rounds", "0"]) == 0
    without = capsys.readouterr().out
    assert "in 1 interleaved round\n" in without and "more for those" not in without
    # 3 runoff rounds, each one probe of RUNOFF finalists and the default in turns:
    # QUICK_SEARCH's 0.05 s of warm-up and windows of 0.1 s, after the probe's start.
    per_round = ProbeCost(start_s=PROBE_START_S, warmup_s=0.05, window_s=0.1).turns(RUNOFF + 1)
    runoff = 3 * per_round
    default = main(["search", str(config), "--dry-run", "--trials", "5"])
    with_runoff = capsys.readouterr().out
    assert default == 0
    assert _confirming_s(with_runoff) - _confirming_s(without) == pytest.approx(runoff, abs=1)


def _confirming_s(plan: str) -> int:
    """The seconds a dry run's plan gives confirming ("confirming 3:45")."""
    found = re.search(r"confirming (\d+(?::\d\d)+)", plan)
    assert found is not None, plan
    seconds = 0
    for part in found.group(1).split(":"):
        seconds = 60 * seconds + int(part)
    return seconds


def test_flags_win_over_the_config_and_bad_ones_are_one_line(capsys, write_config, workdir) -> None:
    config = write_config(GOOD)
    assert main(["search", str(config), "--tolerance", "1.5", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tolerance is 1.5" in err
    assert main(["search", str(config), "--memory-limit", "lots", "--dry-run"]) == 2
    assert "memory_limit" in capsys.readouterr().err
    assert main(["search", str(config), "--device", "cuda:7", "--dry-run"]) == 2
    assert "cuda" in capsys.readouterr().err


def test_search_help_has_examples(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["search", "--help"])
    out = capsys.readouterr().out
    assert "examples:" in out and "--dry-run" in out and "--window-seconds" in out
