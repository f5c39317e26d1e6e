"""A failure every config shares: the user's code is broken, not the configs.

A failed trial is recorded with its reason and the search goes on. But when
:data:`FATAL_REPEATS` trials of a search have failed the same way (the same
error, whatever indices and pids it names, and not out of memory) and none has
succeeded, no config will: the search stops with that one error rather than trying them all.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from autotune.probe import Failure
from autotune.study import TrialRecord

FATAL_REPEATS = 3
"""Identical failures, with no success, after which a search stops."""
_NOT_THE_USERS_FAULT = ("infeasible", "interrupted", "oom")
"""Failures of a config, not of the code: ruled out, cut short, or too large to fit
(out of memory at one batch size says nothing of a smaller one)."""


def failure_signature(failure: Failure) -> str:
    """Equal for one error met in different configs (indices and pids differ)."""
    return re.sub(r"\d+", "#", failure.signature())


def counts_against_the_code(record: TrialRecord) -> bool:
    """Whether a finished trial's failure may be the user's code failing: not a config
    ruled out or cut short, and not a repeat of a failure already counted."""
    return (
        record.failure is not None
        and record.failure.kind not in _NOT_THE_USERS_FAULT
        and record.duplicate_of is None
    )


def fatal_failure(successes: int, failures: Sequence[Failure]) -> Failure | None:
    """The failure that every config shares, once ``failures`` (oldest first) show it
    for certain; None while a config may still succeed."""
    if successes == 0 and len(failures) >= FATAL_REPEATS:
        signatures = {failure_signature(f) for f in failures}
        if len(signatures) == 1:
            return failures[0]
    return None


class FailureWatch:
    """Counts the successes and the user's failures of a search's trials as they end."""

    def __init__(self) -> None:
        self.successes = 0
        self.failures: list[Failure] = []

    def observe(self, record: TrialRecord) -> Failure | None:
        """Count a finished trial; the failure every config shares, once it is certain."""
        if record.state in ("COMPLETE", "PRUNED"):
            self.successes += 1
        elif record.failure is not None and counts_against_the_code(record):
            self.failures.append(record.failure)
        return fatal_failure(self.successes, self.failures)
