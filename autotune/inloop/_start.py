"""Where a climb starts: the default loader, or the choice saved in a study.

A study's choice is a good first guess, not the answer: it may have been tuned on
another machine or for another batch size. Only its loader knobs are taken (the
batch size and the training knobs are the user's loop's own), each checked, and the
climb goes on from there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autotune._errors import ConfigError
from autotune.decide import result_of
from autotune.result import SearchResult
from autotune.settings import Settings
from autotune.study import Attr, locate, open_study

StudySource = str | Path | SearchResult
"""A study file (or name) or storage URL, settings exported as JSON, or a SearchResult."""

_KNOB_TYPES: dict[str, tuple[type, ...]] = {
    "num_workers": (int,),
    "prefetch_factor": (int, type(None)),
    "persistent_workers": (bool,),
    "pin_memory": (bool,),
    "worker_threads": (int, type(None)),
}


def start_settings(
    source: StudySource | None, batch_size: int, *, pin_memory: bool
) -> tuple[Settings, str]:
    """The config a climb starts from, and a few words on where it came from.

    Args:
        source: a saved study or result; None starts from the default loader.
        batch_size: the user's batch size (kept whatever the study was tuned with).
        pin_memory: whether pinned memory may be used here (training on CUDA).

    Raises:
        ConfigError: a knob of the saved choice has a value Settings does not allow.
        StudyError: the study is missing or unreadable.
    """
    if source is None:
        return Settings(batch_size=batch_size), "the default loader"
    raw, origin = _saved_settings(source)
    settings = loader_settings(raw, batch_size, pin_memory=pin_memory, origin=origin)
    note = f"the choice in {origin}"
    tuned_at = raw.get("batch_size")
    if tuned_at != batch_size:
        note += f" (tuned at batch size {tuned_at}; this loader's {batch_size} kept)"
    return settings, note


def loader_settings(
    raw: dict[str, Any], batch_size: int, *, pin_memory: bool, origin: str
) -> Settings:
    """The loader knobs of saved settings at the user's batch size, checked.

    Persistence is left off: the climb decides it when it settles.

    Raises:
        ConfigError: a knob's value is of the wrong type or out of range, naming
            ``origin``, the value given and what is allowed.
    """
    for knob, types in _KNOB_TYPES.items():
        value = raw.get(knob, False if bool in types else None)
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            allowed = " or ".join("None" if t is type(None) else t.__name__ for t in types)
            raise ConfigError(
                f"{origin}: {knob} is {value!r} ({type(value).__name__}), but must be {allowed}."
            )
    try:
        Settings.from_dict(raw)  # every knob of the saved choice, as a search would check it
        workers = int(raw["num_workers"])
        return Settings(
            batch_size=batch_size,
            num_workers=workers,
            # torch's default depth written out, as the climb writes it
            prefetch_factor=(raw.get("prefetch_factor") or 2) if workers > 0 else None,
            pin_memory=bool(raw.get("pin_memory")) and pin_memory,
            worker_threads=raw.get("worker_threads"),
        )
    except (ConfigError, TypeError) as error:
        raise ConfigError(f"{origin}: {error}") from None


def _saved_settings(source: StudySource) -> tuple[dict[str, Any], str]:
    if isinstance(source, SearchResult):
        return source.settings.to_dict(), "the SearchResult given"
    if str(source).endswith(".json"):
        path = Path(source)
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise ConfigError(f"{path}: cannot read exported settings ({error}).") from None
        return _settings_of(data, str(path)), str(path)
    where = locate(source, None)
    study = open_study(where, create=False)
    saved = study.user_attrs.get(Attr.RESULT)
    if saved:
        # Read raw, not through SearchResult: a bad value is reported with its study.
        return _settings_of(saved, str(where)), str(where)
    return result_of(study, where=where).settings.to_dict(), str(where)


def _settings_of(data: Any, origin: str) -> dict[str, Any]:
    settings = data.get("settings") if isinstance(data, dict) else None
    if not isinstance(settings, dict) or "num_workers" not in settings:
        raise ConfigError(f"{origin}: holds no chosen settings (no 'settings' with num_workers).")
    return settings
