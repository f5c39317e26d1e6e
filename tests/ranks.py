"""Rank processes of a test, started together and never left behind."""

from __future__ import annotations

from multiprocessing.process import BaseProcess


def start_and_join(ranks: list[BaseProcess], timeout: float) -> list[int]:
    """Start ``ranks``, wait up to ``timeout`` seconds for each, kill those still running;
    returns the ranks that were still running (hung), so a test can fail on them."""
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(timeout=timeout)
    hung = [rank for rank, process in enumerate(ranks) if process.is_alive()]
    for process in ranks:
        if process.is_alive():
            process.kill()
            process.join()
    return hung
