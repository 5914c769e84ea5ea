"""The real HTCondor pool, shared by the HTCondor integration modules (started once, on first
use; the Slurm cluster's fixtures are in slurm/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.condor_pool import Pool, start_pool


@pytest.fixture(scope="session")
def condor_pool() -> Iterator[Pool]:
    yield from start_pool()


@pytest.fixture
def live(condor_pool: Pool) -> Iterator[Pool]:
    """The pool with an empty queue before and after the test."""
    condor_pool.remove_all()
    yield condor_pool
    condor_pool.remove_all()
