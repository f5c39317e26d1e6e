"""Where a study is kept: an SQLite file (the embedded default) or a database named by an
Optuna storage URL, and the study's name inside it.

Every entry point (search, load, show, report, export, the online recorder) reads
``--study`` through :func:`locate`, so a path and a URL mean the same everywhere.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

from autotune._errors import StudyError

DEFAULT_DIR = Path("studies")
DIALECTS = ("postgresql", "mysql", "sqlite")
"""The databases a study URL may name: Optuna's RDB storage supports these three."""
_DRIVERS = {"postgresql": ("psycopg2", "psycopg"), "mysql": ("MySQLdb", "pymysql")}
"""For a URL without a driver (``postgresql://``): SQLAlchemy's default driver module,
then the one autotune's extra installs, which the URL is given when the default is absent."""
_EXTRAS = {"postgresql": "postgres", "mysql": "mysql"}


@dataclasses.dataclass(frozen=True)
class StudyLocation:
    """A study's storage and its name there.

    Exactly one of ``path`` (an SQLite file, also for a ``sqlite:///`` URL) and ``url``
    (another database) is set. ``name`` None means the one study the storage holds, or,
    when a search creates the study, the name the search gives.
    """

    name: str | None
    path: Path | None = None
    url: str | None = None

    def __post_init__(self) -> None:
        if (self.path is None) == (self.url is None):
            raise ValueError("a StudyLocation has a path or a URL, not both nor neither")

    @property
    def is_file(self) -> bool:
        return self.path is not None

    @property
    def storage_url(self) -> str:
        """The URL SQLAlchemy opens: the file's as ``sqlite:///ABSOLUTE``, or the URL given
        with a driver it can import (``postgresql://`` -> ``postgresql+psycopg://`` when
        only psycopg 3 is installed)."""
        if self.path is not None:
            return f"sqlite:///{self.path.resolve()}"
        assert self.url is not None
        return _with_driver(self.url)

    @property
    def dialect(self) -> str:
        """``sqlite``, ``postgresql`` or ``mysql``."""
        return "sqlite" if self.path is not None else _dialect(str(self.url))

    def named(self, name: str) -> StudyLocation:
        """The same storage, the study ``name`` in it."""
        return dataclasses.replace(self, name=name)

    def exists(self) -> bool:
        """Whether a file study's file exists; a database is taken to exist (opening it
        says otherwise, in one line)."""
        return self.path.exists() if self.path is not None else True

    def __str__(self) -> str:
        """The file's path, or the URL with its password hidden: what a line shows."""
        if self.path is not None:
            return str(self.path)
        return redact(str(self.url))


def is_url(text: str) -> bool:
    """Whether ``--study`` names a storage URL rather than a file or a study name."""
    return "://" in text


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***``, as a line or a saved result shows it."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def locate(
    study: str | Path | StudyLocation | None,
    default_name: str | None,
    *,
    name: str | None = None,
) -> StudyLocation:
    """The storage and study that ``--study`` and ``--study-name`` mean.

    A bare name means ``studies/NAME.db``; anything with a path separator or a ``.db``
    suffix is a file, whose study is named after its stem; a URL is a database, whose study
    is ``name`` or ``default_name`` (the config's name). ``name`` wins wherever given.

    Raises:
        StudyError: a URL of a database Optuna cannot store studies in, or one that cannot
            be parsed.
    """
    if isinstance(study, StudyLocation):
        return study if name is None else study.named(name)
    text = "" if study is None else str(study)
    if text == "":
        chosen = name or default_name or "study"
        return StudyLocation(name=chosen, path=DEFAULT_DIR / f"{chosen}.db")
    if is_url(text):
        dialect = _dialect(text)
        if dialect not in DIALECTS:
            raise StudyError(
                f"--study {redact(text)}: {dialect!r} is not a database a study can be kept "
                f"in; expected a .db path or a URL of {', '.join(d + '://' for d in DIALECTS)}"
                " (sqlite:///PATH for a file). Nothing was written."
            )
        if dialect == "sqlite":
            return StudyLocation(name=name, path=_sqlite_file(text))
        return StudyLocation(name=name or default_name, url=text)
    if "/" in text or "\\" in text or text.endswith(".db"):
        path = Path(text)
        return StudyLocation(name=name or path.stem, path=path)
    return StudyLocation(name=name or text, path=DEFAULT_DIR / f"{text}.db")


def _dialect(url: str) -> str:
    return url.split("://", 1)[0].split("+", 1)[0].lower()


def _sqlite_file(url: str) -> Path:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        database = make_url(url).database
    except ArgumentError:
        database = None
    if not database or database == ":memory:":
        raise StudyError(
            f"--study {url}: expected sqlite:///PATH naming a file (an in-memory database "
            "keeps nothing); give a path such as sqlite:///studies/NAME.db."
        )
    return Path(database)


def _with_driver(url: str) -> str:
    scheme, rest = url.split("://", 1)
    dialect = scheme.lower()
    if "+" in dialect or dialect not in _DRIVERS:
        return url
    default, ours = _DRIVERS[dialect]
    if importlib.util.find_spec(default) is None and importlib.util.find_spec(ours) is not None:
        return f"{dialect}+{ours}://{rest}"
    return url


def missing_driver(location: StudyLocation) -> str | None:
    """What to install when no driver for ``location``'s database is importable; None
    when one is (or for a file)."""
    if location.url is None:
        return None
    dialect = location.dialect
    scheme = location.storage_url.split("://", 1)[0]
    module = scheme.split("+", 1)[1] if "+" in scheme else _DRIVERS[dialect][0]
    if importlib.util.find_spec(module) is not None:
        return None
    return (
        f"no driver for {dialect} is installed (the URL asks for {module}); install it with "
        f"`pip install 'autotune[{_EXTRAS.get(dialect, dialect)}]'`"
    )
