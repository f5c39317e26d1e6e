"""A progress display that keeps a search's messages, for tests that read them."""

from __future__ import annotations

from autotune import QuietProgress


class Messages(QuietProgress):
    """Keeps a search's messages in ``lines``."""

    def __init__(self, lines: list[str] | None = None) -> None:
        self.lines = [] if lines is None else lines

    def message(self, text: str) -> None:
        self.lines.append(text)
