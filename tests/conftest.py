"""Shared pytest set-up: hypothesis profiles and the project root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"

# "ci" (the default) runs the property tests on a thousand or more random cases each;
# HYPOTHESIS_PROFILE=dev is quicker while editing.
settings.register_profile(
    "ci", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# pytest-xdist hands each worker the controller's terminal width as COLUMNS, and the tables'
# width rule reads COLUMNS: a worker would draw them narrower than a plain run does.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.pop("COLUMNS", None)


#: Tests that share one real pool, cluster or engine on fixed ports run in one worker, in
#: order (``make test`` runs two pytest-xdist workers with ``--dist loadgroup``).
SHARED_DAEMONS = ("slurm", "condor", "postgres")
FOLDER_GROUPS = (
    ("tests/integration/slurm/", "slurm"),
    ("tests/integration/postgres/", "postgres"),
    ("tests/integration/test_condor_", "condor"),
    ("tests/node/", "node"),
)


def worker_group(item: pytest.Item) -> str:
    """The group whose tests run in one worker, in order: the real daemons a test shares
    with others (Slurm before HTCondor: a job of both runs with its Slurm tests), the node
    tests (real cgroups), else the test's module (its module-scoped fixtures are made once)."""
    for name in SHARED_DAEMONS:
        if item.get_closest_marker(name) is not None:
            return name
    module = item.nodeid.split("::", 1)[0]
    # A test module that forgot its marker still shares its folder's daemons.
    for folder, group in FOLDER_GROUPS:
        if module.startswith(folder):
            return group
    return module


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.xdist_group(worker_group(item)))
