"""The generalisation benchmark's files: the results JSON, its markdown (a table per
workload and the targets over all of them) and the plot beside it; and the merge of
several runs' JSON (one per workload, say) into one set of files."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.agreement._check import rate_text
from benchmarks.common._stage_times import TimedRow, times_table
from benchmarks.generalise._check import GridSpec
from benchmarks.generalise._device import assess_device, device_lines
from benchmarks.generalise._peer_report import budgeted_row, peer_lines, peer_row, side_by_side
from benchmarks.generalise._plot import svg
from benchmarks.generalise._targets import assess, vs_grid_text

HEADER = (
    "| config | settings | plain loop samples/s (spread) | × grid best | × grid best (first) | "
    "× first leader | × default | autotune printed | inside? | search s | × space cost |"
)
MODES = ("generalise", "generalise-rejudged")
"""The results files this module reads: a run's, and a run judged again (``--rejudge``)."""
TARGET_COLUMNS = (
    "median choice ≥ 0.97 × grid best",
    "worst ≥ 0.93",
    "≥ 0.98 × default",
    "search ≤ 0.10 × space cost",
    "inside printed interval",
    "choices / grid best",
    "checker vs itself",
)


def _reading(options: Mapping[str, Any]) -> str:
    """How to read the tables, for the options of the run."""
    grid = options["grid"]
    searches = f"{options['seeds']} time(s)" if options["seeds"] != 3 else "three times"
    budget = f"{options['trials']} trials" if options.get("trials") else "the default budget"
    return (
        f"""\
How to read it. Each workload was searched {searches} as a user runs it
(`autotune.search(config, seed=s)`, seeds 1-{options["seeds"]}, {budget}). The plain-loop
checker (`benchmarks/common/_checker.py`, which imports nothing of the probe or the search)
then measured, in one interleaved set of {options["rounds"]} rounds of {options["seconds"]:g} s
after {options["warmup"]:g} s of warm-up (and at least the batches the workers queued
while starting; where batches came in bursts, from the end of one wait for them to
the end of another at least that long after), the grid
(num_workers {_values(grid["num_workers"])}
× training threads {_values(grid["threads"])} × persistent_workers
{_values(grid["persistent_workers"])}, persistence only with workers, prefetch_factor at
the DataLoader's default{_worker_threads(grid)}) at the user's batch size without AMP
and at each other batch size and AMP a search chose, the default loader
(`DataLoader(ds, batch_size=B)`, threads left to torch) and each choice. Every figure
is the median of those rounds; spread is half their range over the median. "Grid best"
is the best grid point. "autotune printed" is what the search printed for its choice:
its samples/s with the 95% prediction interval of its confirming rounds (in runs saved
before autotune printed one, their lowest and highest), and its speedup; "inside?" asks
whether the plain loop's median falls within that samples/s interval. The space cost is
the configs in the space the search covered × the checker's rounds × the mean wall time
of one checker measurement in the same run: what measuring that whole space at the
checker's precision would take.
"""
        + _peer_reading(options)
        + _final_reading(options)
    )


def _peer_reading(options: Mapping[str, Any]) -> str:
    """How the peer is read, for a run that ran it."""
    if not options.get("peer"):
        return ""
    return """
The peer. loadtune, the tuner a user would pick instead, ran once per workload with its
own defaults (`loadtune.tune(workload)`: a baseline with no workers, then up to 6
heuristic trials of 100 steps, in its own process; it seeds torch with 0 before every
profile, but its pick rests on one timed run of each config). Its recommendation, as
the settings the checker can measure (what it cannot express is noted per workload), was
measured beside the choices in the same rounds and read as they are; its wall time is
its `tune` call's. It judges nothing.
"""


def _final_reading(options: Mapping[str, Any]) -> str:
    """How the final set is read, for a run that had one."""
    if not options.get("final_rounds"):
        return ""
    return f"""
The final set. Those rounds pick the {options["leaders"]} leading grid points; then the
checker measures them again beside the default loader, each choice and the default's twin
(the grid point with the default's settings and one training thread per CPU, what torch
takes when nobody sets them), in {options["final_rounds"]} interleaved rounds of their own,
and the verdicts are judged on those: "grid best" is the leader with the highest final
median, and "× grid best" and "× default" are the median over the final rounds of the two
configs' ratio within each round. The leaders are picked on other measurements than those
that grade them, and a ratio within a round about a minute long does not mix the
machine's states. "× grid best (first)" is the first set's reading: the choice's median
over the highest median of the grid. The grid best is picked and graded on the same final
rounds, so of leaders that train alike it reads a choice as fast as them below 1; "× first
leader" is the reading against the leader the first set ranked first, graded on rounds
that did not pick it (no winner's curse, but it errs for the search where the first set
ranked a lesser leader first; it judges nothing). "Checker vs itself" is the default
over its twin within each round: the same config measured as two, the distance at which
this checker reads two loaders that train alike apart.
"""


def _word(value: Any) -> str:
    if isinstance(value, bool):  # before the numbers: True == 1 and False == 0
        return "yes" if value else "no"
    return "every CPU" if value == "all" else str(value)


def _worker_threads(grid: Mapping[str, Any]) -> str:
    """The grid's cap on each worker's native threads, said in the report's words;
    nothing for a grid recorded before the cap existed (its workers ran as is)."""
    if "worker_threads" not in grid:
        return ""
    values = ", ".join("as is" if v is None else str(v) for v in grid["worker_threads"])
    return f", each worker's native threads: {values}"


def _values(values: Sequence[Any]) -> str:
    return ", ".join(_word(v) for v in values)


def departures(options: Mapping[str, Any]) -> list[str]:
    """How a run's options depart from the benchmark's protocol (none for a full run)."""
    found = []
    if options["seeds"] != 3:
        found.append(f"{options['seeds']} search(es) per workload, not 3")
    if options.get("trials"):
        found.append(f"{options['trials']} exploration trials, not the default budget")
    if options["grid"] != GridSpec().to_dict():
        found.append("a narrowed grid")
    return found


def _percent(value: float) -> str:
    return f"±{100 * value:.0f}%"


def _inside(choice: Mapping[str, Any]) -> str:
    """Whether the plain loop's figure lies in the samples/s interval autotune printed,
    and its speedup over the default in the printed speedup's interval (a ratio, which
    holds where the machine's speed moved between the search and the checker)."""
    gap = choice["outside_by"]
    if gap is None:
        text = "no interval"
    elif gap == 0.0:
        text = "yes"
    else:
        text = f"no, {abs(gap):.1%} {'below' if gap < 0 else 'above'}"
    speedup = choice.get("speedup_inside")
    if speedup is None:
        return text
    return f"{text}; speedup {'inside' if speedup else 'outside'}"


def _figure_cell(measurement: Mapping[str, Any] | None, value: float, final: bool) -> str:
    key = "final_spread" if final else "spread"
    spread = _percent(measurement[key]) if measurement else "-"
    return f"{rate_text(value)} ({spread})"


def _default_vs_grid(figures: Mapping[str, Any]) -> str:
    """The default loader over the grid best, read as the choices are (paired within the
    final rounds where there were some); the ratio of medians for results written before
    that figure was kept."""
    if "default_vs_grid" in figures:
        return f"{figures['default_vs_grid']:.3f}"
    best = figures["grid_best"]["samples_per_s"]
    return f"{figures['default_samples_per_s'] / best:.3f}" if best > 0 else "-"


def _rows(section: Mapping[str, Any]) -> list[list[str]]:
    figures = section["figures"]
    best, default = figures["grid_best"], figures["default_samples_per_s"]
    measurements = section["measurements"]
    best_row = next(
        (m for m in measurements if m["grid"] and m["settings"] == best["settings"]), None
    )
    default_row = next((m for m in measurements if m["default"]), None)
    by_seed = {seed: m for m in measurements for seed in m["seeds"]}
    final = figures.get("judged_on") == "final rounds"
    rows = [
        [
            "grid best",
            best["describe"] or "-",
            _figure_cell(best_row, best["samples_per_s"], final),
            "1.000",
            "",
            "",
            f"{best['samples_per_s'] / default:.2f}" if default > 0 else "-",
            *[""] * 4,
        ],
        [
            "default loader",
            default_row["describe"] if default_row else "-",
            _figure_cell(default_row, default, final),
            _default_vs_grid(figures),
            "",
            "",
            "1.00",
            *[""] * 4,
        ],
    ]
    searches = {s["seed"]: s for s in section["searches"]}
    for choice in figures["choices"]:
        search = searches[choice["seed"]]
        rows.append(
            [
                f"seed {choice['seed']}" + (" (the default)" if choice["is_default"] else ""),
                choice["describe"],
                _figure_cell(by_seed.get(choice["seed"]), choice["samples_per_s"], final),
                vs_grid_text(choice),
                f"{choice['first_vs_grid']:.3f}" if "first_vs_grid" in choice else "-",
                f"{choice['vs_first_leader']:.3f}" if "vs_first_leader" in choice else "-",
                f"{choice['vs_default']:.2f}",
                search["printed"] + ("" if search["confirmed"] else ", not confirmed"),
                _inside(choice),
                f"{choice['search_s']:.0f}",
                f"{choice['search_vs_space']:.3f}",
            ]
        )
    more = [row for row in (peer_row(section), budgeted_row(section)) if row is not None]
    return [*rows, *more]


def _table(header: str, rows: Sequence[Sequence[str]]) -> list[str]:
    columns = header.count("|") - 1
    return [header, "|" + " --- |" * columns] + ["| " + " | ".join(r) + " |" for r in rows]


def _grid_details(section: Mapping[str, Any]) -> list[str]:
    figures = section["figures"]
    best = figures.get("first_grid_best", figures["grid_best"])["samples_per_s"]
    grid = sorted((m for m in section["measurements"] if m["grid"]), key=lambda m: -m["median"])
    rows = [
        [
            m["describe"],
            rate_text(m["median"]),
            _percent(m["spread"]),
            f"{m['median'] / best:.3f}" if best > 0 else "-",
            _final_cell(m),
            "; ".join(m["errors"] + m.get("final_errors", [])) or "",
        ]
        for m in grid
    ]
    header = "| grid point | samples/s | spread | × grid best | final rounds | failures |"
    return [
        "<details><summary>every grid point</summary>",
        "",
        *_table(header, rows),
        "",
        "</details>",
    ]


def _final_cell(measurement: Mapping[str, Any]) -> str:
    """A leader's final median and spread; empty for a point the final set did not take."""
    if not measurement.get("final"):
        return ""
    return f"{rate_text(measurement['final_median'])} ({_percent(measurement['final_spread'])})"


def _verdict_line(verdict: Mapping[str, Any]) -> str:
    mark = "PASS" if verdict["passed"] else "FAIL"
    text = f"- {mark}  {verdict['target']}: {verdict['figure']:.3f} (bound {verdict['bound']:g})"
    return f"{text}; {verdict['detail']}" if verdict["detail"] else text


def markdown(section: Mapping[str, Any]) -> str:
    """One workload's table (or its error), in markdown."""
    title = f"### {section['name']}"
    if "error" in section:
        return f"{title}\n\nFAILED: {section['error']}\n"
    figures, checker = section["figures"], section["checker"]
    grids = ", ".join(
        f"batch {g['batch_size']}" + (f" amp={g['amp']}" if g["amp"] != "off" else "")
        for g in section["grids"]
    )
    lines = [
        title,
        "",
        f"{section['config']}: batch {section['user_batch']} on {section['device']}; "
        f"{figures['grid_points']} grid points ({grids}); the plain loop: "
        f"{checker['rounds']} interleaved rounds of {checker['seconds']:g} s "
        f"({checker['warmup']:g} s warm-up), {checker['measurements']} measurements of "
        f"{checker['mean_measurement_s']:.1f} s on average{_final_line(checker)}.",
        "",
        *_table(HEADER, _rows(section)),
        "",
        _cost_line(section),
        "",
        *peer_lines(section),
        *_twin_line(figures),
        *[_verdict_line(v) for v in section["verdicts"]],
        "",
        *device_lines(section),
        *_grid_details(section),
    ]
    return "\n".join(lines) + "\n"


def _final_line(checker: Mapping[str, Any]) -> str:
    if not checker.get("final_measurements"):
        return ""
    return (
        f"; then the final set: {checker['final_measurements'] // checker['final_rounds']} "
        f"configs in {checker['final_rounds']} rounds ({checker['final_wall_s'] / 60:.1f} min)"
    )


def _cost_line(section: Mapping[str, Any]) -> str:
    figures, checker = section["figures"], section["checker"]
    if not figures["choices"]:
        return "No search finished."
    sizes = "/".join(str(s) for s in sorted({c["space_size"] for c in figures["choices"]}))
    costs = "/".join(f"{c:,.0f}" for c in sorted({c["space_cost_s"] for c in figures["choices"]}))
    against_grid = "/".join(f"{r:.2f}" for r in figures["search_vs_grid"])
    return (
        f"Choices: {figures['spread']['low']:.3f}-{figures['spread']['high']:.3f} of the grid "
        f"best. Space cost: {sizes} configs × {checker['rounds']} rounds × "
        f"{checker['mean_measurement_s']:.2f} s = {costs} s. For scale, not judged: the "
        f"{figures['grid_points']} grid points alone cost {figures['grid_cost_s']:,.0f} s at "
        f"that rate, and each search took {against_grid} × that."
    )


def _cell(verdict: Mapping[str, Any], text: str) -> str:
    return f"{'PASS' if verdict['passed'] else 'FAIL'} {text}"


def _twin_cell(twin: Mapping[str, Any] | None) -> str:
    """The default over its twin, with the rounds it comes from; "-" without a twin."""
    if not twin:
        return "-"
    where = "final" if twin["judged_on"] == "final rounds" else "first"
    return f"{twin['ratio']:.3f} ({twin['rounds']} {where} rounds)"


def _twin_line(figures: Mapping[str, Any]) -> list[str]:
    """A section's sentence on the checker set against itself; none without a twin."""
    twin = figures.get("twin")
    if not twin:
        return []
    return [
        f"The checker against itself: the default loader over its twin in the grid "
        f"({twin['describe']}, the same config), within each of the {twin['rounds']} "
        f"{twin['judged_on']}: {twin['ratio']:.3f}.",
        "",
    ]


def targets_table(sections: Sequence[Mapping[str, Any]]) -> list[str]:
    """The targets over every workload: one row each, PASS or FAIL with its figure."""
    rows = []
    for section in sections:
        if "error" in section:
            rows.append([section["name"], *["FAILED"] * (len(TARGET_COLUMNS) - 2), "-", "-"])
            continue
        median, worst, default, cost, inside = section["verdicts"]
        choices = section["figures"]["choices"]
        spread = section["figures"]["spread"]
        rows.append(
            [
                section["name"],
                _cell(median, f"{median['figure']:.3f}"),
                _cell(worst, f"{worst['figure']:.3f}"),
                _cell(default, f"{default['figure']:.2f}"),
                _cell(cost, f"{cost['figure']:.3f}"),
                _cell(inside, f"{sum(c['inside'] for c in choices)}/{len(choices)}"),
                f"{spread['low']:.3f}-{spread['high']:.3f}",
                _twin_cell(section["figures"].get("twin")),
            ]
        )
    header = "| workload | " + " | ".join(TARGET_COLUMNS) + " |"
    return _table(header, rows)


def times_lines(sections: Sequence[Mapping[str, Any]]) -> list[str]:
    """The searches' time by stage beside their median choice, a row per workload whose
    searches kept their time; none when no search did."""
    rows = [
        TimedRow(
            workload=section["name"],
            quality=f"{section['verdicts'][0]['figure']:.3f}",
            times=[s["search_time"] for s in section["searches"] if s.get("search_time")],
        )
        for section in sections
        if "error" not in section
    ]
    table = times_table(rows, "median choice × grid best")
    if not table:
        return []
    intro = (
        "Search time by stage: the mean of each workload's searches, in seconds, by the "
        "search's own clock (a stage a search skipped counts 0 s; workers: the sweep of "
        "worker counts)."
    )
    return ["", intro, "", *table]


def _commit(run: Mapping[str, Any]) -> str:
    return (run.get("commit") or "?")[:7] + ("+dirty" if run.get("dirty") else "")


def _wall(results: Mapping[str, Any], runs: int) -> str:
    minutes = f"{results.get('wall_s', 0) / 60:.0f} min"
    if "rejudged_from" in results:
        return f"the final set of rounds {minutes}"
    return f"{minutes} in all" + (f" over {runs} runs" if runs > 1 else "")


def _header(results: Mapping[str, Any]) -> list[str]:
    machine, options = results["machine"], results["options"]
    versions = results.get("versions", {})
    budget = f"{options['trials']} trials" if options.get("trials") else "the default budget"
    runs = results.get("rejudged_from") or results.get("merged_from") or [results]
    commits = sorted({_commit(r) for r in runs})
    if "rejudged_from" in results:
        commits.append(f"judged again with a final set of rounds at {_commit(results)}")
    gpus = ", ".join(machine.get("gpus") or []) or "no GPU"
    merged = results.get("merged_from") or []
    hosts = _machines(merged)
    where = (
        f"{machine['cpus']} CPUs, {gpus}, on {len(hosts)} machines ({'; '.join(hosts)})"
        if len(hosts) > 1
        else f"{machine['cpus']} CPUs ({machine['cpu_model']}), {gpus}"
    )
    return [
        f"{_days(merged or [results])}, {results['host']}: {where}; "
        f"torch {versions.get('torch', '?')}, autotune at {', '.join(commits)}; "
        f"{options['seeds']} search(es) per workload ({budget}); the plain loop "
        f"{options['rounds']} rounds of {options['seconds']:g} s; "
        + _wall(results, len(runs))
        + ".",
    ]


def _days(runs: Sequence[Mapping[str, Any]]) -> str:
    """The day the ``runs`` started, or the first and the last of their days."""
    days = sorted({str(r.get("started") or "")[:10] for r in runs} - {""})
    return days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}"


def _machines(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each machine the ``runs`` of a merge ran on (its CPU model, and whether it has bf16)
    with the workloads judged there, in the runs' order; none where a run does not say."""
    if not runs or any("machine" not in r for r in runs):
        return []
    on: dict[str, list[str]] = {}
    for run in runs:
        machine = run["machine"]
        bf16 = "with" if machine.get("cpu_bf16") else "without"
        on.setdefault(f"{machine['cpu_model']} {bf16} bf16", []).extend(run["workloads"])
    return [f"{label}: {', '.join(names)}" for label, names in on.items()]


def _rejudged_note(results: Mapping[str, Any]) -> list[str]:
    if "rejudged_from" not in results:
        return []
    return [
        "> Judged again: the searches and the first set of rounds are an earlier run's, the "
        "final set was measured now. The samples/s interval each search printed comes from "
        'the machine\'s state at that earlier time, so "inside?" compares figures taken hours '
        "apart; the speedup over the default, a ratio, is the comparable check.",
        "",
    ]


def _departure_note(options: Mapping[str, Any]) -> list[str]:
    found = departures(options)
    if not found:
        return []
    departed = "; ".join(found)
    return [f"> Not the benchmark's protocol: {departed}. Its verdicts judge this run only.", ""]


def document(results: Mapping[str, Any], json_name: str, svg_name: str) -> str:
    """The whole markdown: header, plot, targets, a section per workload."""
    sections = results["workloads"]
    lines = [
        "## Generalisation: searches judged by the plain loop on workloads nobody tuned for",
        "",
        *_header(results),
        f"Every figure is in [{json_name}]({json_name}).",
        "",
        *_departure_note(results["options"]),
        *_rejudged_note(results),
        f"![each choice against the grid]({svg_name})",
        "",
        _reading(results["options"]),
        "### Targets",
        "",
        *targets_table(sections),
        *times_lines(sections),
        *side_by_side(sections),
        "",
    ]
    return "\n".join(lines) + "\n" + "\n".join(markdown(s) for s in sections)


def write(results: Mapping[str, Any], path: Path) -> tuple[Path, Path, Path]:
    """The JSON at ``path``, and beside it the markdown and the plot (same stem)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    md_path, svg_path = path.with_suffix(".md"), path.with_suffix(".svg")
    path.write_text(json.dumps(results, indent=2) + "\n")
    svg_path.write_text(svg(results["workloads"]))
    md_path.write_text(document(results, path.name, svg_path.name))
    return path, md_path, svg_path


def _judged_again(section: dict[str, Any]) -> dict[str, Any]:
    """The figures and verdicts of a section, recomputed from its measured rounds with
    this version's rules (nothing is measured again)."""
    if "error" in section:
        return section
    checker = section["checker"]
    judged = assess(
        section["measurements"],
        section["searches"],
        rounds=checker["rounds"],
        measurement_s=checker["mean_measurement_s"],
        cpus=section["cpus"],
    )
    judged.update(
        assess_device(section["measurements"], section["searches"], section.get("data_ceiling"))
    )
    return {**section, **judged}


def merge(paths: Sequence[Path]) -> dict[str, Any]:
    """Several runs' results as one: the first run's header, started when the earliest
    run did, every run's workloads in order (a workload run twice: the later run's)
    judged again by this version's rules, and where each came from.

    Raises:
        ValueError: a file that is not a generalisation run's results.
    """
    runs = []
    for path in paths:
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not JSON ({error}); expected a results file.") from None
        if not isinstance(data, dict) or data.get("mode") not in MODES:
            mode = data.get("mode") if isinstance(data, dict) else None
            raise ValueError(f"{path} holds mode {mode!r}; expected one of {', '.join(MODES)}.")
        runs.append((path, data))
    sections: dict[str, dict[str, Any]] = {}
    for _, data in runs:
        for section in data["workloads"]:
            sections.pop(section["name"], None)
            sections[section["name"]] = _judged_again(section)
    merged = dict(runs[0][1])
    merged["workloads"] = list(sections.values())
    merged["wall_s"] = sum(data.get("wall_s", 0.0) for _, data in runs)
    starts = [str(data["started"]) for _, data in runs if data.get("started")]
    if starts:
        merged["started"] = min(starts)  # ISO times: the earliest sorts first
    merged["merged_from"] = [
        {
            "path": str(path),
            "commit": data.get("commit"),
            "dirty": data.get("dirty"),
            "started": data.get("started"),
            "machine": data.get("machine"),
            "workloads": [s["name"] for s in data["workloads"]],
        }
        for path, data in runs
    ]
    return merged
