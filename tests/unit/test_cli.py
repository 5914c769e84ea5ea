"""The command line, through click's CliRunner: exit codes and what people read."""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli, collector_paused, example_snapshot
from coshare.schema import snapshot_to_dict

EXAMPLE = Path(__file__).resolve().parents[2] / "common/coshare/examples/paper-cluster.json"


@pytest.fixture(autouse=True)
def no_system_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("coshare.config.DEFAULT_CONFIG_PATH", tmp_path / "absent.yaml")
    for var in [v for v in os.environ if v.startswith("COSHARE_")]:
        monkeypatch.delenv(var)


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), input=stdin)
    return result.exit_code, result.stdout, result.stderr


def test_plan_json_follows_the_contract() -> None:
    code, out, _ = run("plan", str(EXAMPLE), "--output", "json")
    assert code == 0
    data = json.loads(out)
    assert data["policy"] == "sharepack"
    assert set(data) == {"policy", "assignments", "unplaced", "stats"}
    jobs = [a["job"] for a in data["assignments"]] + [u["job"] for u in data["unplaced"]]
    assert sorted(jobs) == sorted(j.id for j in example_snapshot().pending)
    assert data["stats"]["placed"] == len(data["assignments"])


def test_plan_table_shows_devices_and_reasons() -> None:
    code, out, _ = run("plan", str(EXAMPLE), "--policy", "exclusive")
    assert code == 0
    assert "Plan by policy exclusive" in out
    assert "phi02" in out and "never_fits" in out
    assert "device_memory_mib 20000 exceeds every device" in " ".join(out.split())


def test_plan_reads_stdin_and_flags_override_config(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("policy: {name: exclusive}\n")
    text = EXAMPLE.read_text()
    code, out, _ = run("--config", str(config), "plan", "-", "--output", "json", stdin=text)
    assert code == 0 and json.loads(out)["policy"] == "exclusive"
    code, out, _ = run(
        "--config", str(config), "plan", "-", "--policy", "random", "--output", "json", stdin=text
    )
    assert code == 0 and json.loads(out)["policy"] == "random"


def test_soft_threads_flag() -> None:
    snap = snapshot_to_dict(example_snapshot())
    code, strict, _ = run("plan", "-", "--output", "json", stdin=json.dumps(snap))
    code2, soft, _ = run(
        "plan", "-", "--output", "json", "--threads", "soft", stdin=json.dumps(snap)
    )
    assert code == code2 == 0
    assert json.loads(soft)["stats"]["placed"] >= json.loads(strict)["stats"]["placed"]


@pytest.mark.parametrize(
    ("args", "stdin", "expected"),
    [
        (["plan", "/no/such/file.json"], None, "/no/such/file.json: cannot read: No such file"),
        (["plan", "-"], "{", "<stdin>: not valid JSON"),
        (
            ["plan", "-"],
            '{"nodes": [], "pending": [{"id": "1", "device_memory_mib": "x"}]}',
            'pending job "1": field \'device_memory_mib\' is "x"',
        ),
        (
            ["plan", "-", "--policy", "best"],
            "{}",
            "--policy: unknown policy 'best' (did you mean bestfit? known: bestfit, collocate, "
            "cs, exclusive, fgd, knapsack, membw, random, sharepack, sns)",
        ),
    ],
)
def test_bad_input_gives_one_message_and_exit_2(
    args: list[str], stdin: str | None, expected: str
) -> None:
    code, out, err = run(*args, stdin=stdin)
    assert code == 2
    assert expected in err
    assert "Traceback" not in err + out


def test_bad_config_is_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("policy: {name: knapsack, colour: blue}\n")
    code, _, err = run("--config", str(bad), "plan", str(EXAMPLE))
    assert code == 2 and "unknown key 'colour'" in err
    code, _, err = run("config", "check", str(bad))
    assert code == 2 and "unknown key 'colour'" in err


def test_config_show_and_check(tmp_path: Path) -> None:
    code, out, _ = run("config", "show")
    assert code == 0 and "memory_grid_mib: 64" in out and "phi-5110p" in out
    good = tmp_path / "good.yaml"
    good.write_text(out)
    code, out, _ = run("config", "check", str(good))
    assert code == 0 and "ok" in out


def test_config_show_speaks_json_too(tmp_path: Path) -> None:
    # --output on every show. The JSON is the same configuration as the YAML, and
    # written back as a file (JSON is YAML) it checks.
    import yaml

    code, as_yaml, _ = run("config", "show")
    code_json, as_json, _ = run("config", "show", "--output", "json")
    assert code == code_json == 0
    assert json.loads(as_json) == yaml.safe_load(as_yaml)
    good = tmp_path / "good.yaml"
    good.write_text(as_json)
    assert run("config", "check", str(good))[0] == 0


def test_demo_reproduces_table2_then_plans_the_example() -> None:
    code, out, _ = run("demo", "--jobs", "150", "--nodes", "3")
    assert code == 0
    assert "Table II reproduction: 150 Table I jobs on 3 nodes" in " ".join(out.split())
    reproduction, _, example = out.partition("Live planning on the bundled example")
    rows = {
        line.split()[0]: line.split()
        for line in reproduction.splitlines()
        if line.strip().split(" ")[0] in ("exclusive", "random", "knapsack")
    }
    assert set(rows) == {"exclusive", "random", "knapsack"}
    makespans = {name: float(cells[1]) for name, cells in rows.items()}
    assert makespans["random"] < makespans["exclusive"]
    assert makespans["knapsack"] < makespans["exclusive"]
    assert "Plan by policy sharepack" in example  # the default policy's plan
    assert "Policies on this snapshot" in example


def test_help_lists_commands() -> None:
    code, out, _ = run("--help")
    assert code == 0 and "plan" in out and "demo" in out and "simulate" in out


def test_cycle_summary_lists_every_refused_skipped_and_failed_job() -> None:
    from coshare.cli.render import cycle_summary
    from coshare.cycle.run import ApplyReport, CycleReport, JobOutcome, Rejected
    from coshare.model import Plan, Unplaced

    report = CycleReport(
        plan=Plan("knapsack", (), (Unplaced("3", "waits"),)),
        apply=ApplyReport(
            applied=("1",),
            skipped=(JobOutcome("2", "ended before the edit"),),
            failed=(JobOutcome("4", "scontrol: Invalid job id"),),
            dry_run=True,
        ),
        rejected=(Rejected("5", "CoshareDeviceMemory='x' is not a number"),),
    )
    text = cycle_summary(report)
    assert "dry run" in text and "would write 1" in text
    assert "skipped 2: ended before the edit" in text
    assert "FAILED 4: scontrol: Invalid job id" in text
    assert "refused 5: CoshareDeviceMemory='x' is not a number" in text
    assert report.exit_status == 3


def test_the_plan_table_lists_every_waiting_job() -> None:
    # 40 jobs that fit nowhere: every id is in the table, none hidden behind "+N more".
    nodes = [
        {
            "name": "n1",
            "cores": 4,
            "memory_mib": 4096,
            "devices": [{"id": "0", "memory_mib": 1024, "threads": 60}],
        }
    ]
    pending = [{"id": f"{i}.0", "device_memory_mib": 2048, "device_threads": 10} for i in range(40)]
    code, out, _ = run("plan", "-", stdin=json.dumps({"nodes": nodes, "pending": pending}))
    assert code == 0 and "more" not in out
    flat = "".join(out.split())
    assert all(f"{i}.0," in flat or f"{i}.0" in flat for i in range(40))
    assert "39.0" in flat and "0.0,1.0,2.0" in flat


@pytest.mark.slow
def test_the_readme_shows_what_make_demo_prints() -> None:
    # The README's demo figures had drifted from the program (2408 vs 2412 s).
    # The simulated figures are deterministic per seed; planning times vary by machine.
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    code, out, _ = run("demo")
    assert code == 0

    def rows(text: str, names: tuple[str, ...], drop_last: bool) -> dict[str, list[str]]:
        found = {}
        for line in text.splitlines():
            cells = line.split()
            if cells and cells[0] in names and cells[0] not in found and len(cells) > 4:
                found[cells[0]] = cells[:-1] if drop_last else cells
        return found

    table2 = ("exclusive", "random", "knapsack")
    sim_readme, _, plan_readme = readme.partition("Then it plans")
    sim_out, _, plan_out = out.partition("Live planning on the bundled example")
    assert rows(sim_readme, table2, False) == rows(sim_out, table2, False)
    assert rows(plan_readme.split("## How it works")[0], table2, True) == rows(
        plan_out.split("Policies on this snapshot")[1], table2, True
    )


def test_config_check_lists_every_problem_and_an_unknown_policy(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("policy: {name: knapsak}\ncycle: {replan_after_s: -1}\n")
    code, _, err = run("config", "check", str(bad))
    assert code == 2
    assert err.startswith(f"coshare: error: {bad}: 2 problems:\n")
    assert "policy.name: unknown policy 'knapsak' (did you mean knapsack? known: " in err
    assert "cycle.replan_after_s: -1 is out of range" in err
    good = tmp_path / "good.yaml"
    good.write_text("policy: {name: random}\n")
    assert run("config", "check", str(good))[0] == 0


def test_plan_pauses_the_collector_only_while_it_runs() -> None:
    """``coshare plan`` pauses the cyclic collector and turns it on again after,
    also when the command fails; a collector someone else turned off stays off."""
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a failing plan")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
