"""docs/benchmarks.md's figures are the committed results file's (bench/results_page.py)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _page_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "results_page", ROOT / "bench" / "results_page.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


results_page = _page_module()


def _run() -> dict[str, Any]:
    return {
        "commit": "0123456789abcdef",
        "date": "2026-11-28T17:00:00+00:00",
        "command": "python bench/grid.py --quick",
        "quick": True,
        "load_before": [1.5, 1.0, 0.5],
        "load_after": [2.25, 1.0, 0.5],
        "wall_s": 12.0,
    }


def _plan_row(policy: str, **fields: Any) -> dict[str, Any]:
    row = {"mix": "phi", "jobs": 1000, "devices": 1000, "scenario": "idle", "running": 0}
    return {**row, "policy": policy, "timed_out": False, **fields}


@pytest.mark.parametrize("page_path", results_page.PAGES, ids=lambda path: path.name)
def test_each_page_is_the_committed_results_file_rendered(page_path: Path) -> None:
    page = page_path.read_text()
    results = json.loads((ROOT / "bench" / "results" / "grid.json").read_text())
    assert "<!-- bench:" in page
    assert results_page.render(page, results) == page, (
        f"{page_path.name} differs from bench/results/grid.json: run bench/results_page.py"
    )


def test_check_names_a_stale_page_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- bench:alibaba -->\n| typed by hand |\n<!-- /bench:alibaba -->\n")
    results = ROOT / "bench" / "results" / "grid.json"
    assert results_page.main(["--results", str(results), "--page", str(page), "--check"]) == 1
    assert "page.md differs" in capsys.readouterr().out
    assert results_page.main(["--results", str(results), "--page", str(page)]) == 0
    assert "typed by hand" not in page.read_text()
    assert results_page.main(["--results", str(results), "--page", str(page), "--check"]) == 0


def test_every_block_of_the_page_is_known_and_filled() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    names = re.findall(r"<!-- bench:([a-z0-9-]+) -->", page)
    assert sorted(names) == sorted(results_page.BLOCKS)
    for name in names:
        body = page.split(f"<!-- bench:{name} -->\n", 1)[1].split(f"<!-- /bench:{name} -->")[0]
        assert "Command: `" in body or "Not in" in body, name


def test_a_case_past_its_timeout_shows_the_limit_and_the_rest_their_figures() -> None:
    results = {
        "machine": {"cpu_model": "Test CPU", "cores": 2, "memory_mib": 8192},
        "plan": {
            "run": _run(),
            "timeout_s": 30.0,
            "rows": [
                _plan_row("fgd", timed_out=True, timeout_s=30.0),
                _plan_row("sharepack", placed=1000, cpu_s=0.714, wall_s=1.5),
            ],
        },
    }
    page = "intro\n<!-- bench:plan-phi-idle -->\nold 9.99\n<!-- /bench:plan-phi-idle -->\nend\n"
    out = results_page.render(page, results)
    assert "| fgd | > 30 s |" in out
    assert "| sharepack | 0.71 / 1.50 (1,000) |" in out
    assert "old 9.99" not in out
    assert out.startswith("intro\n") and out.endswith("<!-- /bench:plan-phi-idle -->\nend\n")
    assert "`python bench/grid.py --quick`" in out and "Test CPU, 2 cores, 8 GiB" in out
    assert "load average 1.5 before, 2.25 after" in out
    assert results_page.render(out, results) == out  # rendering twice changes nothing


def test_a_section_not_run_says_how_to_run_it() -> None:
    page = "<!-- bench:slurm -->\n<!-- /bench:slurm -->\n"
    assert "--sections slurm" in results_page.render(page, {"machine": {}})
    skipped = {"machine": {}, "slurm": {"run": _run(), "skipped": "needs root"}}
    assert "Not measured: needs root" in results_page.render(page, skipped)


def test_an_unknown_marker_is_refused() -> None:
    with pytest.raises(ValueError, match="plan-typo"):
        results_page.render("<!-- bench:plan-typo -->\n<!-- /bench:plan-typo -->", {})
