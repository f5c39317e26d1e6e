"""A search's time budget as it ran: the plan that fitted its stages into it, and what
was left out to get there."""

from __future__ import annotations

import dataclasses
from typing import Any

from autotune._format import count, format_duration
from autotune._stages import Stage

CEILINGS = "the ceilings"
"""What :attr:`BudgetPlan.left_out` calls the ceilings stage."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class BudgetPlan:
    """The budget a search was given, the stages it planned to fit in it (estimates from
    the preflight's probe), and what it gave up, in the plan or later, to keep to it."""

    seconds: float
    """The budget: what the whole search was to take."""
    planned_s: float
    """What the planned stages add up to, the time spent before the plan included."""
    stages: tuple[tuple[Stage, float], ...] = ()
    """(stage, planned seconds) in the order they run; a stage left out is absent."""
    trials: int = 0
    """Exploration trials planned (fewer run when exploring reaches its deadline first)."""
    rounds: int = 0
    """Confirming rounds planned."""
    left_out: tuple[str, ...] = ()
    """What was left out or shortened, one phrase each, as the last plan left it: the
    first, planned again before each later stage into the time then left."""
    fits: bool = True
    """False when even the least search (a few trials and one confirming round) was
    planned to take longer than the budget; that least search ran all the same."""

    @property
    def left_out_ceilings(self) -> bool:
        """Whether the plan left the ceilings out (the diagnosis then says why it lacks
        them)."""
        return CEILINGS in self.left_out

    def planned(self, stage: Stage) -> float | None:
        """The seconds planned for ``stage``; None when it was left out."""
        return dict(self.stages).get(stage)

    def describe(self) -> str:
        """One line: "budget 1:00: planned 0:57 (preflight 0:02, explore 0:20, confirm
        0:35), 6 trials and 1 confirming round; left out: the ceilings, the runoff"."""
        stages = ", ".join(f"{name} {format_duration(s)}" for name, s in self.stages)
        text = f"budget {format_duration(self.seconds)}: planned {format_duration(self.planned_s)}"
        text += f" ({stages})" if stages else ""
        text += f", {count(self.trials, 'trial')} and {count(self.rounds, 'confirming round')}"
        if not self.fits:
            text += "; even the least search does not fit, so it runs that"
        if self.left_out:
            text += "; left out: " + ", ".join(self.left_out)
        return text

    def to_dict(self) -> dict[str, Any]:
        """JSON types; the stages as pairs, so that their order survives sorted keys."""
        return {
            "seconds": self.seconds,
            "planned_s": self.planned_s,
            "stages": [[name, seconds] for name, seconds in self.stages],
            "trials": self.trials,
            "rounds": self.rounds,
            "left_out": list(self.left_out),
            "fits": self.fits,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BudgetPlan:
        """Rebuild from :meth:`to_dict`."""
        return cls(
            seconds=float(data["seconds"]),
            planned_s=float(data["planned_s"]),
            stages=tuple((Stage(name), float(seconds)) for name, seconds in data.get("stages", ())),
            trials=int(data.get("trials", 0)),
            rounds=int(data.get("rounds", 0)),
            left_out=tuple(str(phrase) for phrase in data.get("left_out", ())),
            fits=bool(data.get("fits", True)),
        )
