"""A real PostgreSQL for the coordination tests: started by
deploy/postgres/local-postgres (Debian's package, installed with apt-get the first time) in a
directory of its own, stopped by its pid file. Each test gets a schema of its own."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tests.prometheus import free_port

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "deploy" / "postgres" / "local-postgres"
_NAMES = itertools.count()


@dataclass
class Postgres:
    """A started server: its directory (the unix socket's too) and port."""

    dir: Path
    port: int

    def dsn(self, database: str = "coshare", *, tcp: bool = True) -> str:
        host = "127.0.0.1" if tcp else str(self.dir)
        return f"host={host} port={self.port} dbname={database} user=postgres"

    def new_database(self) -> str:
        """A fresh, empty schema of the ``coshare`` database, first on the search path of
        the DSN returned (a schema, not a database: creating and checkpointing a database
        per test costs seconds, a schema nothing)."""
        name = f"t{os.getpid()}_{next(_NAMES)}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{name}"')
        return f"{self.dsn()} options='-c search_path={name}'"

    def script(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=300)

    def start(self) -> None:
        done = self.script(
            "start", str(self.dir), "--port", str(self.port), "--listen", "127.0.0.1"
        )
        if done.returncode != 0:
            raise RuntimeError(f"local-postgres start failed:\n{done.stderr}")

    def stop(self) -> None:
        self.script("stop", str(self.dir))

    def running(self) -> bool:
        """Whether the server runs (``local-postgres status``: by its pid file)."""
        return "running" in self.script("status", str(self.dir)).stdout


@contextmanager
def running_postgres() -> Iterator[Postgres]:
    """A PostgreSQL started for the block (root: it runs as the postgres user), stopped and
    removed afterwards."""
    # Not under pytest's private tmp (mode 700): the server runs as another user.
    directory = Path(tempfile.mkdtemp(prefix="coshare-pg-", dir="/var/tmp"))
    directory.chmod(0o755)
    server = Postgres(directory / "db", free_port())
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
