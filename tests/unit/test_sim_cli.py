"""``coshare simulate`` and the demo, through click's CliRunner: exit codes, tables, JSON."""

from __future__ import annotations

import builtins
import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli


@pytest.fixture(autouse=True)
def no_system_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("coshare.config.DEFAULT_CONFIG_PATH", tmp_path / "absent.yaml")
    for var in [v for v in os.environ if v.startswith("COSHARE_")]:
        monkeypatch.delenv(var)


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_simulate_json_gives_makespan_and_footprint_per_policy() -> None:
    code, out, err = run(
        "simulate",
        "--workload",
        "table1",
        "--jobs",
        "150",
        "--nodes",
        "3",
        "--policies",
        "exclusive,random,knapsack",
        "--footprint",
        "--output",
        "json",
    )
    assert code == 0, err
    data = json.loads(out)
    table1 = data["comparisons"]["table1"]
    summary = {row["policy"]: row for row in table1["summary"]}
    assert set(summary) == {"exclusive", "random", "knapsack"}
    assert all(row["makespan_s"] > 0 for row in summary.values())
    assert summary["exclusive"]["utilization"] == pytest.approx(0.5, abs=0.15)
    footprints = {f["policy"]: f for f in table1["footprints"]}
    assert set(footprints) == {"random", "knapsack"}
    for f in footprints.values():
        assert 1 <= f["nodes"] <= 3
        assert f["makespans_s"][str(f["nodes"])] <= f["target_makespan_s"]
    assert {r["seed"] for r in table1["runs"]} == {0}
    assert data["setup"]["threads"] == "soft"


def test_simulate_table_names_the_setup_and_the_policies() -> None:
    code, out, _ = run(
        "simulate",
        "--workload",
        "high-skew",
        "--jobs",
        "60",
        "--nodes",
        "2",
        "--seeds",
        "2",
        "--sizes",
        "1-2",
        "--threads",
        "strict",
        "--offload-share",
        "0.8",
    )
    assert code == 0
    title = "high-skew: 60 jobs on 2 nodes, seeds 0, 1 (threads strict, cycle delay 1 s, "
    assert title + "offload share 0.800)" in " ".join(out.split())
    assert "makespan against cluster size" in out
    for name in ("exclusive", "random", "knapsack"):
        assert name in out


def test_pressure_runs_jobs_per_node_over_sizes() -> None:
    code, out, _ = run(
        "simulate",
        "--workload",
        "pressure",
        "--jobs",
        "12",
        "--sizes",
        "2-3",
        "--policies",
        "random,knapsack",
        "--output",
        "json",
        "--offload-share",
        "0.7",
    )
    assert code == 0
    rows = json.loads(out)["sweeps"]["pressure (normal)"]
    assert sorted((r["policy"], r["size"], r["jobs"]) for r in rows) == [
        ("knapsack", 2, 24),
        ("knapsack", 3, 36),
        ("random", 2, 24),
        ("random", 3, 36),
    ]


def test_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    target = tmp_path / "fig.png"
    code, _, err = run(
        "simulate",
        "--workload",
        "uniform",
        "--jobs",
        "40",
        "--nodes",
        "2",
        "--sizes",
        "1-2",
        "--plot",
        str(target),
        "--offload-share",
        "0.8",
    )
    assert code == 0, err
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    code, out, err = run("simulate", "--jobs", "10", "--plot", "x.png")
    assert code == 1  # a missing extra, as every command's help says
    assert err == (
        "coshare: error: --plot needs the 'plot' extra (module 'matplotlib' is not "
        "installed): pip install 'coshare[plot]'\n"
    )
    assert out == ""  # said before the simulation, not after


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workload", "table9"], "unknown workload 'table9'"),
        (["--policies", "exclusive,best"], "unknown policy 'best'"),
        (["--sizes", "2-x"], "--sizes '2-x'"),
        (["--workload", "trace:nowhere.csv"], "only SWF logs"),
    ],
)
def test_bad_input_is_one_message_and_exit_2(args: list[str], message: str) -> None:
    code, _, err = run("simulate", *args)
    assert code == 2
    assert message in err and "Traceback" not in err


def alibaba_folder(root: Path) -> Path:
    folder = root / "alibaba-gpu-v2023"
    folder.mkdir()
    nodes = ["sn,cpu_milli,memory_mib,gpu,model"] + [
        f"n{i},32000,131072,{2 if i % 2 else 4},T4" for i in range(6)
    ]
    (folder / "openb_node_list_gpu_node.csv").write_text("\n".join(nodes) + "\n")
    pods = [
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time"
    ]
    shares = [(1, 470), (1, 1000), (1, 230), (2, 1000), (0, 0), (1, 810)]
    for i in range(30):
        count, share = shares[i % len(shares)]
        pods.append(f"p{i},{4000 + 1000 * (i % 3)},8192,{count},{share},,LS,Running,0,,0")
    (folder / "openb_pod_list_default.csv").write_text("\n".join(pods) + "\n")
    return root


def test_alibaba_benchmark_reports_both_protocols_labelled(tmp_path: Path) -> None:
    data = alibaba_folder(tmp_path)
    code, out, err = run(
        "simulate",
        "--workload",
        "alibaba-2023",
        "--data",
        str(data),
        "--seeds",
        "2",
        "--batch",
        "5",
        "--workers",
        "2",
    )
    assert code == 0, err
    text = " ".join(out.split())  # titles wrap
    assert "online protocol: one pod per cycle" in text
    assert "batch protocol: a cycle plans many pending pods" in text
    for name in ("exclusive", "random", "knapsack", "bestfit", "fgd"):
        assert name in out
    code, out, _ = run(
        "simulate",
        "--workload",
        "alibaba-2023",
        "--data",
        str(data),
        "--protocol",
        "online",
        "--policies",
        "fgd",
        "--output",
        "json",
    )
    result = json.loads(out)["results"]
    assert [(r["protocol"], r["policy"]) for r in result] == [("online", "fgd")]
    assert set(result[0]["unallocated_gpu_pct"]) == {"90", "100", "110", "120", "130"}


def test_swf_replay_runs_every_job_multi_node_included(tmp_path: Path) -> None:
    log = tmp_path / "tiny.swf"
    log.write_text(
        "; SWF\n"
        + "".join(
            f"{i + 1} {10 * i} 0 {50 + i} {1 + i % 3} -1 -1 {1 + i % 3} 100 "
            "-1 1 1 1 -1 -1 1 -1 -1\n"
            for i in range(9)
        )
    )
    (tmp_path / "tiny.swf.machines").write_text("0 seth 3 2 1 1048576\n")
    code, out, err = run(
        "simulate",
        "--workload",
        f"trace:{log}",
        "--policies",
        "exclusive,random",
        "--output",
        "json",
    )
    assert code == 0, err
    runs = {r["policy"]: r for r in json.loads(out)["runs"]}
    assert all(r["not_run"] == 0 for r in runs.values())  # 3 processors: a gang
    assert runs["random"]["makespan_s"] <= runs["exclusive"]["makespan_s"]


def test_a_workload_is_one_registry_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    from coshare.sim import runners

    def tiny(request: runners.Request) -> runners.Outcome:
        return runners.Outcome(f"tiny on {request.nodes} nodes\n", {"jobs": request.jobs})

    monkeypatch.setitem(runners.WORKLOADS, "tiny", tiny)
    code, out, _ = run("simulate", "--workload", "tiny", "--nodes", "3")
    assert (code, out) == (0, "tiny on 3 nodes\n")
    code, out, _ = run("simulate", "--workload", "tiny", "--jobs", "5", "--output", "json")
    assert json.loads(out)["jobs"] == 5 and json.loads(out)["workload"] == "tiny"


def test_a_plot_into_a_missing_folder_is_refused_before_the_simulation(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    code, out, err = run(
        "simulate",
        "--workload",
        "table1",
        "--jobs",
        "50",
        "--nodes",
        "2",
        "--policies",
        "exclusive",
        "--plot",
        str(tmp_path / "no" / "x.png"),
    )
    assert code == 2
    assert (
        err == f"coshare: error: --plot {tmp_path / 'no' / 'x.png'}: no such folder "
        f"{tmp_path / 'no'}\n"
    )
    assert out == ""  # nothing was simulated: no table


def test_the_trace_folder_does_not_depend_on_where_coshare_is_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from coshare.sim.trace_files import ALIBABA_DIR, data_dir

    here = data_dir()
    monkeypatch.chdir(tmp_path)
    assert data_dir() == here
    code, _, err = run(
        "simulate",
        "--workload",
        "alibaba-2023",
        "--policies",
        "fgd",
        "--data",
        str(tmp_path / "none"),
    )
    assert code == 2
    assert err == (
        f"coshare: error: no Alibaba trace folder at {tmp_path / 'none' / ALIBABA_DIR}"
        ": pass --data DIR (or set COSHARE_TRACE_DIR) to the folder that holds "
        f"{ALIBABA_DIR}/\n"
    )
