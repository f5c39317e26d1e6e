"""A throwaway PostgreSQL server on loopback for the tests: a cluster made by ``initdb`` in
a temporary folder, started with ``pg_ctl`` on a free port, password authentication on
TCP (so a wrong password is refused as on a real server), stopped at the end.

``.ci/run`` installs Debian's ``postgresql`` package and sets ``AUTOTUNE_REQUIRE_POSTGRES``,
so that there a server that cannot start fails the run; elsewhere the tests that need one
are skipped with the reason.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

USER = "autotune"
PASSWORD = "autotune-test"
REQUIRE = "AUTOTUNE_REQUIRE_POSTGRES"


def _binaries() -> Path | None:
    """The folder of ``initdb`` and ``pg_ctl``: on PATH, or where Debian installs them."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    folders = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[4]))
    return Path(folders[-1]) if folders and Path(folders[-1], "initdb").exists() else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Server:
    """One running cluster; :meth:`database` makes a fresh database for each test."""

    def __init__(self) -> None:
        binaries = _binaries()
        if binaries is None:
            raise RuntimeError("no PostgreSQL server is installed (initdb not found)")
        self._bin = binaries
        # Under /tmp itself: the tests' own temporary folder is root's alone, which the
        # `postgres` user could not enter (and a socket path must stay short).
        self.root = Path(tempfile.mkdtemp(prefix="autotune-pg-", dir="/tmp"))
        self.data = self.root / "data"
        self.port = _free_port()
        # PostgreSQL refuses to run as root: as root, the cluster belongs to `postgres`.
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            shutil.chown(self.root, "postgres")
        password = self.root / "password"
        password.write_text(PASSWORD + "\n")
        if self._as:
            shutil.chown(password, "postgres")
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            USER,
            f"--pwfile={password}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--encoding=UTF8",
            "--no-sync",
        )
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync=off"
        log = self.root / "server.log"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(log), "-o", options, "-w", "start")

    def _run(self, program: str, *args: str) -> None:
        # Without the test session's tag: the server outlives each test by design, and the
        # check for processes left behind looks for that tag.
        env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_TEST_SESSION"}
        done = subprocess.run(
            [*self._as, str(self._bin / program), *args], capture_output=True, text=True, env=env
        )
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed: {done.stderr.strip() or done.stdout.strip()}")

    def url(self, database: str = "postgres", *, password: str = PASSWORD) -> str:
        return f"postgresql://{USER}:{password}@127.0.0.1:{self.port}/{database}"

    def database(self) -> str:
        """The URL of a new, empty database of this server."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user=USER,
            password=PASSWORD,
            dbname="postgres",
            autocommit=True,
        ) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
