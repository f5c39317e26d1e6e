"""autotune's exceptions, in one tree.

::

    AutotuneError                 anything autotune reports to a user as one line
    ├── ConfigError               the config file or the arguments of a call are wrong
    │   └── SpaceError            the knobs' values are out of range or contradict each other
    ├── WorkloadError             the user's dataset, model, loss or step failed
    ├── StudyError                a saved study cannot be opened, read or written
    └── MissingExtraError         an optional dependency is not installed

The CLI catches ``AutotuneError``, prints its message and exits with code 2;
``--debug`` shows the traceback as well.
"""

from __future__ import annotations


class AutotuneError(Exception):
    """Base class of every error autotune reports to its user."""


class ConfigError(AutotuneError):
    """The config file, or the arguments given to the API, are not what autotune expects."""


class SpaceError(ConfigError):
    """A knob's values are out of range, empty or contradictory."""


class WorkloadError(AutotuneError):
    """The user's own code (dataset, model, loss, step) failed in a way every config shares."""


class StudyError(AutotuneError):
    """A saved study cannot be created, opened or read."""


class MissingExtraError(AutotuneError):
    """An optional dependency is needed for what was asked but is not installed."""


class FingerprintWarning(UserWarning):
    """Settings are being used on a machine that differs from the one they were tuned on."""
