"""Figures for people: throughputs and durations as the terminal, the report and the
export print them."""

from __future__ import annotations


def format_rate(value: float | None) -> str:
    """samples/s for humans: 3 significant figures."""
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def format_duration(seconds: float) -> str:
    """0:42, 12:05, 1:02:03."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def sentence(text: str) -> str:
    """``text`` as a sentence: its first letter upper case, a full stop at the end."""
    return f"{text[:1].upper()}{text[1:]}."


def count(number: int, noun: str) -> str:
    """ "1 worker", "0 workers", "8 workers": ``number`` and ``noun``, plural unless one."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def format_seconds(seconds: float) -> str:
    """ "0.4 s", "73 s", "108 s": tenths below ten seconds, so that a short stage does not
    read as none; whole seconds above, so that stages side by side compare at a glance."""
    if seconds < 9.95:
        return f"{max(0.0, seconds):.1f} s"
    return f"{round(seconds)} s"


def format_wall(seconds: float) -> str:
    """ "42 s", "4 min 10 s", "1 h 2 min": a wall time in words."""
    whole = round(seconds)
    if whole < 60:
        return format_seconds(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"
