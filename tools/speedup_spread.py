"""How much each finalist's per-round speedup over the default loader moved between
confirming rounds, taken two ways, in saved studies:

- ``beside``: against the geometric mean of the default's measurements nearest before
  and after it in the round, as the search judges
  (:func:`autotune.decide._rounds.gather`);
- ``end``: against the one default measurement at the end of the round's list, as the
  search judged before (the default was measured once a round, last in odd rounds and
  first in even ones).

For each study: the median over complete finalists of the relative spread of their
speedups (half the range over the median), both ways. A study whose confirming trials
carry no position (made before the search recorded positions) is skipped.

::

    python tools/speedup_spread.py studies/*.db
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import optuna

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune._noise import half_range
from autotune.decide._confirm import measured_rounds
from autotune.decide._rounds import gather
from autotune.settings._settings import Settings
from autotune.study import Attr


def spreads(study: optuna.Study) -> tuple[list[float], list[float]] | None:
    """The spread of each complete finalist's speedups, beside the default and against
    the list's last default; None when the study holds no positioned confirming round."""
    trials = [
        t
        for t in study.get_trials(deepcopy=False)
        if Attr.GROUP in t.user_attrs and isinstance(t.user_attrs.get(Attr.POSITION), int)
    ]
    if not trials:
        return None
    first: dict[str, int] = {}
    order: dict[int, Settings] = {}
    for trial in trials:
        group = str(trial.user_attrs[Attr.GROUP])
        first[group] = min(first.get(group, trial.number), trial.number)
        order[trial.user_attrs[Attr.POSITION]] = Settings.from_dict(trial.user_attrs[Attr.SETTINGS])
    groups = sorted(first, key=first.__getitem__)
    layout = [order[p] for p in range(max(order) + 1)]
    found = measured_rounds(study, groups, len(layout))
    finalists, _ = gather(layout, found)
    last = found[-1]
    beside, end = [], []
    for rounds in finalists:
        if not rounds.complete:
            continue
        if (spread := half_range(rounds.speedups)) is not None:
            beside.append(spread)
        ratios = [
            m.samples_per_s / d.samples_per_s
            for m, d in zip(rounds.measurements, last, strict=True)
            if m is not None and d is not None and d.samples_per_s > 0
        ]
        if (spread := half_range(ratios)) is not None:
            end.append(spread)
    return beside, end


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("studies", nargs="+", type=Path, help="study files (SQLite)")
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    print("| study | finalists | spread beside the default | spread against the list's end |")
    print("| --- | --- | --- | --- |")
    for path in args.studies:
        storage = f"sqlite:///{path}"
        for summary in optuna.get_all_study_summaries(storage):
            study = optuna.load_study(study_name=summary.study_name, storage=storage)
            found = spreads(study)
            if found is None or not found[0] or not found[1]:
                continue
            beside, end = found
            print(
                f"| {path.name} | {len(beside)} | {statistics.median(beside):.3f} "
                f"| {statistics.median(end):.3f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
