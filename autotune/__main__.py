"""``python -m autotune``: the same as the ``autotune`` command."""

from autotune.cli import entry

entry()
