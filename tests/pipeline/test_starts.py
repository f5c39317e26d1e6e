"""Which earlier studies lend a new study their finalists (autotune.pipeline._starts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import optuna

from autotune.pipeline._starts import warm_from_studies
from autotune.study import Attr, locate


def test_an_empty_warm_from_looks_at_no_other_study_of_the_storage(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'team.db'}"
    # A neighbour this autotune cannot read: it is passed over with a line, never judged.
    earlier = optuna.create_study(study_name="earlier", storage=url)
    earlier.set_user_attr(Attr.META, {"format": 99})
    new = optuna.create_study(study_name="new", storage=url)

    def notes(named: tuple[str, ...] | None) -> tuple[str, ...]:
        found = warm_from_studies(
            named,
            study=new,
            where=locate(url, None, name="new"),
            info={},
            machine=cast(Any, None),  # neither call gets as far as the machines
            space=cast(Any, None),
            most=2,
        )
        assert found.seeds == () and found.sources == ()
        return found.notes

    (line,) = notes(None)  # by default, the other studies of the same storage
    assert line.startswith("study 'earlier' in ") and "written by a newer autotune" in line
    assert notes(()) == ()  # asked for none: none looked at
