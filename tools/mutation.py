"""Mutation testing of the decision code: each module against its own unit tests only.

    python tools/mutation.py                 # every module below
    python tools/mutation.py rounds choose   # some of them
    python tools/mutation.py --jobs 4        # mutants tested in parallel (default: the CPUs)

For each (module, tests) pair, mutmut 3 runs in a scratch copy of the project,
mutants/<name>/, whose pyproject.toml gets a [tool.mutmut] table naming that module
and those tests (mutmut reads one configuration per directory). mutmut then runs, for
each mutant, the tests of that file that call the mutated function. The copy stays
there after the run: `cd mutants/rounds && mutmut show <mutant>` (or `mutmut browse`).

mutmut mutates code inside functions only: module-level constants (the thresholds
and minimums the decisions rest on) are never changed by it. So each module-level
number is also nudged here, one at a time (floats by 10% either way, integers by 1),
and the module's tests must fail on every nudge: a threshold is pinned by a test on
each side of it.

Survivors that change nothing observable are listed, each with its reason, in
tools/mutation_exclusions.toml; they are matched by the lines a mutant changes, not
by mutmut's numbering. A module's score is (killed + timeout) / (mutants - excluded):
a mutant with no test to run counts against it. Exit status 1 when a module scores
under --min-score or a constant survives a nudge.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # mutmut itself reads its configuration with toml there
    import toml as tomllib

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "mutants"
TEMP = WORK / "tmp"
"""TMPDIR of every test run: mutmut ends each mutant's forked test process with os._exit,
past the tests' removal of their own temp directory, so those are left here and removed
with it at the end, not in the system's temp folder."""
EXCLUSIONS = ROOT / "tools" / "mutation_exclusions.toml"
COPIED = ("autotune", "tests", "pyproject.toml")
PYTEST_ARGS = ["-n0", "-p", "no:cacheprovider"]
"""The project's addopts run tests in two xdist workers; mutmut needs them in-process."""

PAIRS = {
    "confirm": ("autotune/decide/_confirm.py", "tests/decide/test_confirm.py"),
    "rounds": ("autotune/decide/_rounds.py", "tests/decide/test_rounds.py"),
    "choose": ("autotune/decide/_choose.py", "tests/decide/test_choose.py"),
    "diagnosis": ("autotune/decide/_diagnosis.py", "tests/decide/test_diagnosis.py"),
    "space": ("autotune/space/_space.py", "tests/space/test_space.py"),
    "timing": ("autotune/probe/_timing.py", "tests/probe/test_timing.py"),
    "predict": ("autotune/result/_predict.py", "tests/result/test_predict.py"),
}

KILLED = ("killed", "timeout")
"""timeout: the mutant made the tests hang or loop, which a test run notices too."""


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    status: str
    function: str = ""
    original: str = ""
    """The lines the mutant changes, stripped, one per line."""
    mutated: str = ""
    """What it changes them to."""
    diff: str = ""


@dataclasses.dataclass(frozen=True)
class Exclusion:
    module: str
    function: str
    original: str
    mutated: str
    reason: str
    context: str = ""
    """A line near the change, where the same change could be made in two places."""

    def matches(self, module: str, mutant: Mutant) -> bool:
        return (
            self.module == module
            and self.function == mutant.function
            and self.original == mutant.original
            and self.mutated == mutant.mutated
            and self.context in mutant.diff
        )


@dataclasses.dataclass(frozen=True)
class Nudge:
    """A module-level number changed for one test run."""

    constant: str
    old: str
    new: str
    killed: bool


@dataclasses.dataclass
class Report:
    name: str
    module: str
    mutants: list[Mutant]
    excluded: list[tuple[Mutant, Exclusion]]
    nudges: list[Nudge]

    def count(self, *statuses: str) -> int:
        return sum(m.status in statuses for m in self.mutants)

    @property
    def left(self) -> list[Mutant]:
        """Not killed and not excluded."""
        excluded = {m.name for m, _ in self.excluded}
        return [m for m in self.mutants if m.status not in KILLED and m.name not in excluded]

    @property
    def score(self) -> float:
        counted = len(self.mutants) - len(self.excluded)
        return 100.0 * self.count(*KILLED) / counted if counted else 100.0


def environment() -> dict[str, str]:
    """This environment without PYTHONPATH (the tests must import the mutated copy), its
    TMPDIR :data:`TEMP`."""
    return {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "TMPDIR": str(TEMP)}


def scratch_copy(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, directory / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, directory / name)


def mutmut_config(module: str, tests: str) -> str:
    # JSON strings are TOML strings.
    return (
        "\n[tool.mutmut]\n"
        'source_paths = ["autotune"]\n'
        f"only_mutate = [{json_str(module)}]\n"
        f"pytest_add_cli_args_test_selection = [{json_str(tests)}]\n"
        f"pytest_add_cli_args = [{', '.join(json_str(a) for a in PYTEST_ARGS)}]\n"
        "use_git_change_detection = false\n"
    )


def json_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def find_mutmut() -> str | None:
    """The mutmut beside this Python (its virtual environment's), else the one on PATH."""
    return shutil.which("mutmut", path=str(Path(sys.executable).parent)) or shutil.which("mutmut")


def mutmut(directory: Path, *args: str, log: Path | None = None) -> str:
    executable = find_mutmut() or "mutmut"
    with open(log or os.devnull, "w") as out:
        done = subprocess.run(
            [executable, *args],
            cwd=directory,
            env=environment(),
            stdout=subprocess.PIPE if log is None else out,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        where = f"; see {log}" if log else f":\n{done.stdout}"
        raise SystemExit(
            f"mutmut {' '.join(args)} failed (exit status {done.returncode}) in {directory}{where}"
        )
    return done.stdout or ""


def run_mutmut(name: str, module: str, tests: str, jobs: int) -> list[Mutant]:
    directory = WORK / name
    scratch_copy(directory)
    with open(directory / "pyproject.toml", "a") as config:
        config.write(mutmut_config(module, tests))
    run = ("run", "--max-children", str(jobs))
    try:
        mutmut(directory, *run, log=directory / "mutmut.log")
    except SystemExit as failed:  # seen once, with every mutant checked: try once more
        print(f"{failed}; running it again: mutmut goes on where it stopped", flush=True)
        mutmut(directory, *run, log=directory / "mutmut-again.log")
    mutants = []
    for line in mutmut(directory, "results", "--all", "true").splitlines():
        mutant_name, _, status = line.strip().rpartition(": ")
        if mutant_name:
            mutants.append(Mutant(mutant_name, status))
    if not mutants:
        raise SystemExit(f"mutmut made no mutants of {module}; see {directory / 'mutmut.log'}")
    if unchecked := [m.name for m in mutants if m.status == "not checked"]:
        raise SystemExit(f"mutmut did not check {len(unchecked)} mutant(s) of {module}")
    return [m if m.status in KILLED else described(directory, m) for m in mutants]


def described(directory: Path, mutant: Mutant) -> Mutant:
    """The mutant with its function and changed lines, from `mutmut show`."""
    diff = mutmut(directory, "show", mutant.name)
    body = [line for line in diff.splitlines() if not line.startswith(("---", "+++", "# "))]
    original = "\n".join(line[1:].strip() for line in body if line.startswith("-"))
    mutated = "\n".join(line[1:].strip() for line in body if line.startswith("+"))
    return dataclasses.replace(
        mutant, function=function_of(mutant.name), original=original, mutated=mutated, diff=diff
    )


def function_of(mutant_name: str) -> str:
    """'pkg.mod.xǁClassǁmethod__mutmut_3' -> 'Class.method'; 'pkg.mod.x_f__mutmut_1' -> 'f'."""
    mangled = re.sub(r"__mutmut_\d+$", "", mutant_name.rpartition(".")[2])
    if mangled.startswith("xǁ"):
        return ".".join(mangled[2:].split("ǁ"))
    return mangled.removeprefix("x_")


def load_exclusions() -> list[Exclusion]:
    data = tomllib.loads(EXCLUSIONS.read_text()) if EXCLUSIONS.exists() else {}
    return [
        Exclusion(
            module=entry["module"],
            function=entry["function"],
            original=entry["original"].strip(),
            mutated=entry["mutated"].strip(),
            reason=entry["reason"],
            context=entry.get("context", ""),
        )
        for entry in data.get("exclude", [])
    ]


def constants(source: str) -> Iterator[tuple[str, ast.Constant]]:
    """Each number of the module-level assignments, named NAME or NAME[key]."""
    for statement in ast.parse(source).body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, value = statement.targets[0], statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            target, value = statement.target, statement.value
        else:
            continue
        if isinstance(target, ast.Name):
            yield from _numbers(target.id, value)


def _numbers(name: str, node: ast.expr) -> Iterator[tuple[str, ast.Constant]]:
    if _is_number(node):
        assert isinstance(node, ast.Constant)
        yield name, node
    elif isinstance(node, ast.Tuple | ast.List):
        for i, item in enumerate(node.elts):
            yield from _numbers(f"{name}[{i}]", item)
    elif isinstance(node, ast.Dict):
        for key, item in zip(node.keys, node.values, strict=True):
            label = ast.literal_eval(key) if isinstance(key, ast.Constant) else "?"
            yield from _numbers(f"{name}[{label!r}]", item)


def _is_number(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    )


def nudged(node: ast.Constant) -> tuple[str, str]:
    """Integers by 1 either way, floats by 10%."""
    value = node.value
    if isinstance(value, int):
        return str(value - 1), str(value + 1)
    assert isinstance(value, float)
    return repr(round(value * 0.9, 10)), repr(round(value * 1.1, 10))


def replaced(source: str, node: ast.Constant, text: str) -> str:
    lines = source.splitlines(keepends=True)
    assert node.end_lineno == node.lineno and node.end_col_offset is not None
    line = lines[node.lineno - 1]
    lines[node.lineno - 1] = line[: node.col_offset] + text + line[node.end_col_offset :]
    return "".join(lines)


def nudge_constants(name: str, module: str, tests: str, jobs: int) -> list[Nudge]:
    """Each module-level number nudged both ways, and whether the tests caught it."""
    source = (ROOT / module).read_text()
    variants = [
        (label, ast.get_source_segment(source, node) or "", text, replaced(source, node, text))
        for label, node in constants(source)
        for text in nudged(node)
    ]

    def run(index: int) -> Nudge:
        label, old, new, text = variants[index] if index >= 0 else ("", "", "", source)
        directory = WORK / f"{name}-constants" / str(index)
        scratch_copy(directory)
        (directory / module).write_text(text)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", *PYTEST_ARGS, tests],
            cwd=directory,
            env=environment(),
            capture_output=True,
            text=True,
            check=False,
        )
        if index < 0 and done.returncode != 0:
            raise SystemExit(f"{tests} fail without a nudge, in {directory}:\n{done.stdout}")
        shutil.rmtree(directory)
        return Nudge(label, old, new, killed=done.returncode != 0)

    run(-1)  # the tests pass on the module as it is
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        nudges = list(pool.map(run, range(len(variants))))
    shutil.rmtree(WORK / f"{name}-constants")
    return nudges


def test_module(name: str, jobs: int, exclusions: Sequence[Exclusion], nudge: bool) -> Report:
    module, tests = PAIRS[name]
    print(f"{name}: mutating {module} against {tests} ...", flush=True)
    mutants = run_mutmut(name, module, tests, jobs)
    excluded = []
    for mutant in mutants:
        if mutant.status in KILLED:
            continue
        found = next((e for e in exclusions if e.matches(module, mutant)), None)
        if found is not None:
            excluded.append((mutant, found))
    nudges = nudge_constants(name, module, tests, jobs) if nudge else []
    return Report(name, module, mutants, excluded, nudges)


def print_reports(reports: Sequence[Report], exclusions: Sequence[Exclusion]) -> None:
    for report in reports:
        for mutant, exclusion in report.excluded:
            print(f"excluded {mutant.name}: {exclusion.reason}")
        for mutant in report.left:
            print("\n" + (mutant.diff.strip() or f"{mutant.status}: {mutant.name}"))
        for nudge in report.nudges:
            if not nudge.killed:
                print(f"\nsurvived: {report.module}: {nudge.constant} {nudge.old} -> {nudge.new}")
    used = {id(e) for r in reports for _, e in r.excluded}
    tested = {r.module for r in reports}
    for stale in (e for e in exclusions if e.module in tested and id(e) not in used):
        print(
            f"\nunused exclusion (the mutant was killed or is gone): {stale.module} "
            f"{stale.function}: {stale.original!r} -> {stale.mutated!r}"
        )
    header = ("module", "mutants", "killed", "timeout", "survived", "no tests", "excluded")
    print("\n" + "  ".join(f"{h:>9}" if i else f"{h:<32}" for i, h in enumerate(header)), end="")
    print(f"  {'score':>7}  {'constants':>9}")
    for r in reports:
        excluded = len(r.excluded)
        counts = Counter(m.status for m in r.left)
        cells = (
            len(r.mutants),
            r.count("killed"),
            r.count("timeout"),
            counts["survived"] + counts["suspicious"] + counts["segfault"],
            counts["no tests"],
            excluded,
        )
        pinned = f"{sum(n.killed for n in r.nudges)}/{len(r.nudges)}" if r.nudges else "-"
        print(f"{r.module:<32}" + "".join(f"  {c:>9}" for c in cells), end="")
        print(f"  {r.score:>6.1f}%  {pinned:>9}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"of {', '.join(PAIRS)}")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--min-score", type=float, default=90.0)
    parser.add_argument("--no-constants", action="store_true", help="skip the constant nudges")
    args = parser.parse_args(argv)
    if unknown := sorted(set(args.names) - set(PAIRS)):
        parser.error(f"unknown {unknown}; the modules are {list(PAIRS)}")
    if find_mutmut() is None:
        parser.error("mutmut not found: pip install -e '.[dev]' (it needs mutmut 3.8 or later)")
    exclusions = load_exclusions()
    names = args.names or list(PAIRS)
    TEMP.mkdir(parents=True, exist_ok=True)
    try:
        reports = [test_module(n, args.jobs, exclusions, not args.no_constants) for n in names]
    finally:
        shutil.rmtree(TEMP, ignore_errors=True)
    print_reports(reports, exclusions)
    failed = [r.module for r in reports if r.score < args.min_score]
    failed += [r.module for r in reports if not all(n.killed for n in r.nudges)]
    if failed:
        print(f"\nbelow {args.min_score:g}% or with an unpinned constant: {sorted(set(failed))}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
