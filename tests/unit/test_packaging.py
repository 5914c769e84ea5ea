"""What the package ships: the license, the JSON Schemas and the deploy/ files as
package data, written out by `coshare deploy-files DIR`; metadata an index shows."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import tomllib
from click.testing import CliRunner
from coshare.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_package_data_covers_the_schemas_and_every_deploy_file() -> None:
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["coshare"]
    package = ROOT / "common" / "coshare"
    assert (package / "deploy").resolve() == (ROOT / "deploy").resolve()  # one copy: a link
    shipped = [p.relative_to(package).as_posix() for p in (package / "schemas").glob("*")]
    shipped += [
        f"deploy/{p.relative_to(ROOT / 'deploy').as_posix()}"
        for p in (ROOT / "deploy").rglob("*")
        if p.is_file()
    ]
    assert len(shipped) > 15
    for rel in shipped:
        assert any(
            fnmatch.fnmatch(rel, pattern) and rel.count("/") == pattern.count("/")
            for pattern in patterns
        ), f"{rel} is not package data"


def test_metadata() -> None:
    project = PYPROJECT["project"]
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")
    # An SPDX expression and the file, as PEP 639 has them (no license classifier beside).
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert not any(c.startswith("License ::") for c in project["classifiers"])
    assert "license-files" not in PYPROJECT["tool"]["setuptools"]
    assert project["optional-dependencies"]["condor"] == ["htcondor>=23.0,<26"]
    assert "jsonschema>=4.18" in project["optional-dependencies"]["test"]


def test_the_version_has_one_place() -> None:
    import coshare

    assert PYPROJECT["project"]["dynamic"] == ["version"] and "version" not in PYPROJECT["project"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "coshare.__version__"}
    assert f"## {coshare.__version__} " in (ROOT / "CHANGELOG.md").read_text()


def test_a_compute_nodes_install_has_no_planner() -> None:
    # numpy and scipy come with the extras that plan and bound, and with the tests' install.
    project = PYPROJECT["project"]
    base = " ".join(project["dependencies"]).lower()
    for heavy in ("numpy", "scipy", "matplotlib", "dask"):
        assert heavy not in base
    extras = project["optional-dependencies"]
    assert extras["planner"] == ["numpy>=1.24"]
    assert "scipy>=1.10" in extras["bound"] and "scipy>=1.10" not in extras["planner"]
    assert {"numpy>=1.24", "scipy>=1.10"} <= set(extras["test"])


def test_deploy_files_writes_what_deploy_holds(tmp_path: Path) -> None:
    target = tmp_path / "out"
    result = CliRunner().invoke(cli, ["deploy-files", str(target)])
    assert result.exit_code == 0, result.output
    written = sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file())
    expected = sorted(
        [
            *(
                p.relative_to(ROOT / "deploy").as_posix()
                for p in (ROOT / "deploy").rglob("*")
                if p.is_file()
            ),
            "condor/coshare-launch",
            "node/coshare-launch",
        ]
    )
    assert written == expected and len(result.stdout.splitlines()) == len(expected)
    # coshare-launch next to the job wrapper and the TaskProlog, which run it from there.
    launcher = (ROOT / "common/coshare/node/control/launcher.py").read_bytes()
    for place in ("condor", "node"):
        assert (target / place / "coshare-launch").read_bytes() == launcher
        assert os.access(target / place / "coshare-launch", os.X_OK)
    wrapper = target / "condor" / "coshare-job-wrapper"
    assert wrapper.read_bytes() == (ROOT / "deploy/condor/coshare-job-wrapper").read_bytes()
    assert os.access(wrapper, os.X_OK)
    assert not os.access(target / "slurm" / "slurm.conf.snippet", os.X_OK)
    again = CliRunner().invoke(cli, ["deploy-files", str(target)])
    assert again.exit_code == 2 and "nothing written (--force overwrites them)" in again.stderr
    assert CliRunner().invoke(cli, ["deploy-files", str(target), "--force"]).exit_code == 0
