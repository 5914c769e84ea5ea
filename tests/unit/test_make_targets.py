"""The Makefile's targets the guides name, run as make runs them: ``make docs`` and ``make
man`` (the generated reference, written in a scratch directory and compared with the
committed pages), ``make demo`` (the README's first command) and ``make test`` (what CI's
``.ci/run`` runs, with the test venv it builds first: ``make .venv/.test``), whose recipe
make's own dry run prints. The venv running the tests stands in for ``.venv``; its stamps are
taken as up to date (``make -o``), so nothing is installed."""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.prefix)


def outside_make() -> dict[str, str]:
    """This environment less what a make that runs the suite passes to its children (the
    suite runs under `make test`: an inner make would print its level's directory lines
    and take the outer one's flags)."""
    inherited = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")
    return {k: v for k, v in os.environ.items() if k not in inherited}


def make(where: Path, *targets: str, dry_run: bool = False) -> str:
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, where / name)
    stamps = ("-o", f"{VENV}/.base", "-o", f"{VENV}/.test")
    argv = ["make", "-s", f"VENV={VENV}", *stamps, *(["-n"] if dry_run else []), *targets]
    env = {**outside_make(), "COSHARE_CONFIG": os.devnull}
    done = subprocess.run(
        argv, cwd=where, capture_output=True, text=True, env=env, check=True, timeout=300
    )
    return done.stdout


def test_make_docs_and_make_man_write_the_committed_reference(tmp_path: Path) -> None:
    make(tmp_path, "docs", "man")
    written = sorted(p.name for p in (tmp_path / "docs").iterdir())
    assert written == ["cli.md", "config.md", "environment.md"]
    for name in written:
        assert (tmp_path / "docs" / name).read_text() == (ROOT / "docs" / name).read_text(), name
    for section in ("man1", "man5"):
        pages = sorted(p.name for p in (ROOT / "man" / section).iterdir())
        assert pages and pages == sorted(p.name for p in (tmp_path / "man" / section).iterdir())
        _, differ, missing = filecmp.cmpfiles(
            ROOT / "man" / section, tmp_path / "man" / section, pages, shallow=False
        )
        assert not differ and not missing, (differ, missing)


def test_make_demo_runs_the_main_job_on_the_bundled_example(tmp_path: Path) -> None:
    shown = make(tmp_path, "demo")
    assert "sharepack" in shown and "knapsack" in shown, shown[-2000:]


def test_make_test_builds_the_test_venv_then_checks_and_runs_the_suite(tmp_path: Path) -> None:
    assert (ROOT / ".ci" / "run").read_text().strip().endswith("exec make test")
    fresh = tmp_path / "fresh"
    done = subprocess.run(
        ["make", "-n", f"VENV={fresh}", "test"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=outside_make(),
        check=True,
    )
    steps = done.stdout.splitlines()
    install = f"{fresh}/bin/python -m pip install -q --disable-pip-version-check -e '.[test,"
    assert any(s.startswith(install) for s in steps), steps  # make .venv/.test
    for step in ("ruff check .", "ruff format --check .", "mypy", "mkdocs build --strict"):
        assert any(step in s for s in steps), (step, steps)
    assert steps[-1] == f"{fresh}/bin/python scripts/run_tests.py"
