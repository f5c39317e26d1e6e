"""The public surface: everything re-exported is listed, and nothing private leaks."""

from __future__ import annotations

import types

import autotune


def test_all_is_complete_and_sorted() -> None:
    public = {name for name in dir(autotune) if not name.startswith("_")}
    # The stage packages and the CLI are submodules, reached by importing them; the API is
    # what autotune/__init__.py re-exports from them.
    modules = {name for name in public if isinstance(getattr(autotune, name), types.ModuleType)}
    assert {"inloop", "pipeline", "probe", "settings"} <= modules
    assert public - modules <= set(autotune.__all__)
    assert set(autotune.__all__) <= set(dir(autotune))
    assert autotune.__all__ == sorted(autotune.__all__)


def test_errors_share_one_base() -> None:
    for name in ("ConfigError", "SpaceError", "StudyError", "WorkloadError", "MissingExtraError"):
        assert issubclass(getattr(autotune, name), autotune.AutotuneError)
