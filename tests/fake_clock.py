"""A clock the test moves by hand: ``clock.t += 0.5``; calling it reads ``t``."""

from __future__ import annotations


class FakeTime:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t
