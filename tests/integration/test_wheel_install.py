"""The built wheel, installed as an admin installs it on a compute node: a fresh venv,
``pip install coshare-*.whl`` (the base, no extras), then ``coshare deploy-files DIR``. A file
missing from the package, a dependency a node would not have, or a wrapper that runs a placed
job without coshare-launch fails here.

No scheduler daemons: the deployed job wrapper runs for real on ad files like the starter's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def sh(
    *argv: str | Path, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``argv``; by default in this environment less PYTHONPATH and VIRTUAL_ENV (the fresh
    venv must not see this tree's sources or the test's own venv)."""
    if env is None:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.setdefault("COSHARE_CONFIG", os.devnull)
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=600, check=check, env=env
    )


@pytest.fixture(scope="module")
def node_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv with the wheel built from this tree installed, extras left out."""
    tmp = tmp_path_factory.mktemp("wheel")
    # the release as docs/install.md builds it: make dist (into the repository's dist/), the
    # venv running the tests standing in for .venv (its stamp taken as up to date)
    venv = Path(sys.prefix)
    sh("make", "-s", "-C", ROOT, f"VENV={venv}", "-o", f"{venv}/.base", "dist")
    (built,) = (ROOT / "dist").glob("coshare-*.whl")
    assert list((ROOT / "dist").glob("coshare-*.tar.gz")), "make dist built no sdist"
    (tmp / "dist").mkdir()
    wheel = Path(shutil.copy(built, tmp / "dist"))
    sh(sys.executable, "-m", "venv", tmp / "venv")
    sh(tmp / "venv/bin/python", "-m", "pip", "install", "--quiet", wheel)
    yield tmp / "venv"


def documented_deploy_files() -> list[str]:
    """The files docs/install.md's "Deployment files" table names."""
    text = (ROOT / "docs/install.md").read_text()
    section = text.split("## Deployment files", 1)[1].split("\n## ", 1)[0]
    return sorted(re.findall(r"^\| `([^`]+)` \|", section, flags=re.M))


def test_the_wheel_deploys_every_documented_file(node_venv: Path, tmp_path: Path) -> None:
    out = tmp_path / "deploy"
    written = sh(node_venv / "bin/coshare", "deploy-files", out).stdout.split()
    names = sorted(Path(p).relative_to(out).as_posix() for p in written)
    documented = documented_deploy_files()
    assert "condor/coshare-launch" in documented and "node/coshare-launch" in documented
    assert names == documented
    for name in (
        "condor/coshare-job-wrapper",
        "condor/coshare-launch",
        "node/coshare-launch",
        "node/coshare-task-prolog",
    ):
        assert os.access(out / name, os.X_OK), name
    launcher = (ROOT / "common/coshare/node/control/launcher.py").read_bytes()
    assert (out / "condor/coshare-launch").read_bytes() == launcher


def test_the_wheel_installs_the_man_pages(node_venv: Path) -> None:
    pages = node_venv / "share/man"
    for page in (
        "man1/coshare.1",
        "man1/coshare-deploy-files.1",
        "man1/coshare-node-gate.1",
        "man5/coshare.yaml.5",
    ):
        assert (pages / page).read_text() == (ROOT / "man" / page).read_text(), page


def test_the_node_install_has_no_planner(node_venv: Path) -> None:
    python = node_venv / "bin/python"
    for module in ("numpy", "scipy", "matplotlib", "dask"):
        assert sh(python, "-c", f"import {module}", check=False).returncode == 1, module
    helped = sh(node_venv / "bin/coshare", "node", "--help")
    assert "gate" in helped.stdout
    planned = sh(node_venv / "bin/coshare", "plan", "-", check=False)
    assert planned.returncode == 1
    assert "pip install 'coshare[planner]'" in planned.stderr


def test_the_deployed_wrapper_refuses_a_placed_job_without_coshare_launch(
    node_venv: Path, tmp_path: Path
) -> None:
    out = tmp_path / "deploy"
    sh(node_venv / "bin/coshare", "deploy-files", out)
    (out / "condor/coshare-launch").unlink()
    (tmp_path / "job.ad").write_text(
        'CoshareManaged = true\nCosharePlacedNode = "n1"\nCosharePlacedDevices = "0"\n'
    )
    (tmp_path / "machine.ad").write_text('CoshareNodeName = "n1"\n')
    env = {
        "_CONDOR_JOB_AD": str(tmp_path / "job.ad"),
        "_CONDOR_MACHINE_AD": str(tmp_path / "machine.ad"),
        "_CONDOR_WRAPPER_ERROR_FILE": str(tmp_path / "error"),
        "PATH": "/usr/bin:/bin",
    }
    ran = sh(out / "condor/coshare-job-wrapper", "/bin/echo", "ran", env=env, check=False)
    assert ran.returncode == 1 and "ran" not in ran.stdout
    assert "coshare-launch is not installed" in (tmp_path / "error").read_text()


def test_the_startup_benchmark_measures_the_node_install_of_the_wheel(node_venv: Path) -> None:
    (wheel,) = (node_venv.parent / "dist").glob("coshare-*.whl")
    shown = sh(sys.executable, ROOT / "bench" / "startup.py", wheel).stdout
    assert f"wheel: {wheel.name}" in shown
    assert re.search(r"node install \(base, no extras\): \d+\.\d MiB over an empty venv", shown)
    for command in ("coshare --help", "coshare node --help"):
        assert re.search(rf"{command}: wall median \d+\.\d{{3}} s, CPU median", shown), shown
