"""How long a search took, stage by stage: what a user waited for its answer."""

from __future__ import annotations

import dataclasses
from typing import Any

from autotune._format import format_seconds, format_wall
from autotune._stages import Stage


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchTime:
    """The wall seconds of one search and of each stage it ran, in the order they ran.

    The stages are those the search announced, in the order they ran; one it skipped
    is absent. They add up to at most
    ``total_s``: the setup before the preflight belongs to no stage.
    """

    total_s: float
    """From the call to the result, every stage included."""
    stages: tuple[tuple[Stage, float], ...] = ()
    """(stage, seconds) for each stage that ran."""
    continued: bool = False
    """The search continued a study that earlier searches began: the time is this
    search's alone, not the study's, since it reused what they measured."""

    def seconds(self, stage: Stage) -> float | None:
        """The seconds ``stage`` took; None when it did not run."""
        return dict(self.stages).get(stage)

    def describe(self) -> str:
        """ "4 min 10 s (preflight 1.0 s, bounds 73 s, explore 84 s, confirm 108 s)"."""
        parts = ", ".join(f"{Stage(s).label} {format_seconds(t)}" for s, t in self.stages)
        text = format_wall(self.total_s) + (f" ({parts})" if parts else "")
        if self.continued:
            text += "; this search only, which continued the study's earlier ones"
        return text

    def to_dict(self) -> dict[str, Any]:
        """JSON types; the stages as pairs, so that their order survives sorted keys."""
        return {
            "total_s": self.total_s,
            "stages": [[stage, seconds] for stage, seconds in self.stages],
            "continued": self.continued,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchTime:
        """Rebuild from :meth:`to_dict`."""
        return cls(
            total_s=float(data["total_s"]),
            stages=tuple((Stage(stage), float(seconds)) for stage, seconds in data["stages"]),
            continued=bool(data.get("continued", False)),
        )
