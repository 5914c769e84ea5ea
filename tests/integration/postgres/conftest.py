"""The real PostgreSQL of the coordination tests: one server per session (started with
deploy/postgres/local-postgres, stopped by its pid file at the end), a fresh schema per
test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.postgres import Postgres, running_postgres


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Postgres]:
    if os.geteuid() != 0:
        pytest.fail(
            "the PostgreSQL tests install PostgreSQL with apt-get when it is missing and "
            "run it as the postgres user; run them as root"
        )
    with running_postgres() as server:
        yield server


@pytest.fixture
def dsn(postgres_server: Postgres) -> str:
    """A fresh schema on the session's server (its DSN)."""
    return postgres_server.new_database()
