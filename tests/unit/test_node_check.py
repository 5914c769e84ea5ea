"""``coshare node check | probe membw | facts | freeze | thaw``: what each says, against temp
dirs with the kernel's layouts (no root needed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli
from coshare.ledger.facts import JobCopy, JobLoad, MembwFacts, NodeFacts, format_facts
from coshare.node.check import counter_capability, wait_capability

from tests.unit.fake_resctrl import make_resctrl

ONE_CORE = min(os.sched_getaffinity(0))


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "c.yaml").write_text("")
    cgroup = tmp_path / "cgroup"
    for controller in ("freezer", "cpuset", "memory"):  # no cpuacct: no load facts
        (cgroup / controller).mkdir(parents=True)
        (cgroup / controller / "cgroup.procs").write_text("")
    (cgroup / "cpuset" / "cpuset.effective_cpus").write_text(f"{ONE_CORE}\n")
    make_resctrl(tmp_path / "resctrl", mba=False)
    for key, value in {
        "CONFIG": tmp_path / "c.yaml",
        "NODE_CGROUP_ROOT": cgroup,
        "NODE_STATE_DIR": tmp_path / "state",
        "NODE_RESCTRL_ROOT": tmp_path / "resctrl",
        "NODE_CONTROL_SOCKET": tmp_path / "none.sock",
    }.items():
        monkeypatch.setenv(f"COSHARE_{key}", str(value))
    return tmp_path


def test_check_lists_every_capability_with_where_it_looked(env: Path) -> None:
    result = CliRunner().invoke(cli, ["node", "check", "--output", "json"])
    assert result.exit_code == 0, result.output
    caps = {c["name"]: c for c in json.loads(result.output)["capabilities"]}
    assert caps["cgroups"]["status"] == "found"
    assert caps["freezer"] == {
        "name": "freezer",
        "status": "found",
        "where": str(env / "cgroup" / "freezer"),
        "detail": "available",
    }
    assert caps["cpu accounting"]["status"] == "missing"
    assert "no cgroup v1 cpuacct hierarchy" in caps["cpu accounting"]["detail"]
    assert caps["L3 cache ways (CAT)"]["status"] == "found"
    assert caps["L3 cache ways (CAT)"]["detail"].startswith("20 ways (0-19), 20 free, at least 1")
    mba = caps["memory bandwidth allocation (MBA)"]
    assert (mba["status"], mba["where"]) == ("missing", str(env / "resctrl/info/MB/min_bandwidth"))
    assert "perf_event_open(2)" in caps["hardware counters"]["where"]
    assert caps["run-queue delay"]["where"] == f"/proc/{os.getpid()}/schedstat"
    assert caps["NVML"]["status"] in ("found", "missing")  # found where a GPU is lent
    pcie = caps["NVML PCIe throughput"]  # the GPU jobs' copy bandwidth (Wu & Hong III-B3)
    assert pcie["where"] == "libnvidia-ml.so.1 (pynvml)"
    if caps["NVML"]["status"] == "missing":  # never pretended: no NVML, no copy facts
        assert pcie["status"] == "missing" and pcie["detail"].startswith("unsupported: ")
        assert "no copy_mbps facts, the planner uses jobs' CoshareCopyBandwidth" in pcie["detail"]
    assert caps["membw baseline"]["status"] == "missing"
    assert "--init" in caps["membw baseline"]["detail"]
    assert caps["node facts"]["where"] == str(env / "state" / "facts")
    table = CliRunner().invoke(cli, ["node", "check"])
    assert table.exit_code == 0 and "found" in table.output and "missing" in table.output


def test_no_resctrl_and_no_counters_are_missing_with_the_path(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COSHARE_NODE_RESCTRL_ROOT", str(env / "no-resctrl"))
    caps = {
        c["name"]: c
        for c in json.loads(CliRunner().invoke(cli, ["node", "check", "--output", "json"]).output)[
            "capabilities"
        ]
    }
    cat = caps["L3 cache ways (CAT)"]
    assert cat["status"] == "missing" and cat["where"] == str(env / "no-resctrl/info/L3/cbm_mask")
    assert cat["detail"] == "unsupported: resctrl is not mounted there"
    mba = caps["memory bandwidth allocation (MBA)"]
    assert mba["where"] == str(env / "no-resctrl/info/MB/min_bandwidth")
    assert mba["detail"] == "unsupported: resctrl is not mounted there"
    odd = counter_capability(machine="sparc64")
    assert odd.status == "missing" and "no perf_event_open system call number" in odd.detail


def test_probe_names_cores_outside_the_set_and_says_to_init_first(env: Path) -> None:
    runner = CliRunner()
    outside = runner.invoke(cli, ["node", "probe", "membw", "--cpus", f"{ONE_CORE + 64}"])
    assert outside.exit_code == 2
    assert f"cores {ONE_CORE + 64} are not in this node's allowed set {ONE_CORE}" in outside.output
    no_base = runner.invoke(cli, ["node", "probe", "membw"])
    assert no_base.exit_code == 2
    assert "run `coshare node probe membw --init` on an idle node" in no_base.output
    made = runner.invoke(
        cli,
        ["node", "probe", "membw", "--init", "--output", "json"],
        env={"COSHARE_NODE_PROBE_ARRAY_MIB": "8"},
    )
    assert made.exit_code == 0, made.output
    data = json.loads(made.output)
    assert data["probe"]["available"] == 1.0 and data["baseline"]["entries"][0]["cpus"] == str(
        ONE_CORE
    )
    again = runner.invoke(
        cli,
        ["node", "probe", "membw", "--cpus", str(ONE_CORE)],
        env={"COSHARE_NODE_PROBE_ARRAY_MIB": "8"},
    )
    assert again.exit_code == 0 and f"membw on cores {ONE_CORE}: " in again.output
    assert f"(baseline of cpus {ONE_CORE})" in again.output


def test_facts_shows_what_the_daemon_wrote(env: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(cli, ["node", "facts"])
    assert (
        missing.exit_code == 1
        and "is the node daemon (coshare node gate) running?" in missing.output
    )
    (env / "state").mkdir()
    facts = NodeFacts(
        1_700_000_000.0,
        MembwFacts(3.0, 6.0, 1, 1_700_000_000.0),
        20,
        16,
        (JobLoad("12", 0.5, 0.25, 1.0, 120.0),),
        (JobCopy("12", 312.5),),
    )
    (env / "state" / "facts").write_text(format_facts(facts) + "\n")
    table = runner.invoke(cli, ["node", "facts"])
    assert table.exit_code == 0
    assert "50% of the idle 6.00 GB/s" in table.output and "16 of 20 free" in table.output
    assert "12" in table.output and "0.50" in table.output
    assert "copy bandwidth (NVML PCIe): 12 312.5 MB/s" in table.output
    data = json.loads(runner.invoke(cli, ["node", "facts", "--output", "json"]).output)
    assert data["loads"][0] == {
        "job": "12",
        "mean_cores": 0.5,
        "last_cores": 0.25,
        "max_cores": 1.0,
        "window_s": 120.0,
    }
    assert data["copies"] == [{"job": "12", "mbps": 312.5}]
    (env / "state" / "facts").write_text("coshare-facts;v=9\n")
    bad = runner.invoke(cli, ["node", "facts"])
    assert bad.exit_code == 1 and "unreadable: is version '9'" in bad.output


def test_freeze_without_a_daemon_says_where_it_looked(env: Path) -> None:
    result = CliRunner().invoke(cli, ["node", "freeze", "--job", "7"])
    assert result.exit_code == 1
    assert f"unreachable: no coshare node daemon at {env / 'none.sock'}" in result.output
    bad = CliRunner().invoke(cli, ["node", "thaw", "--job", "../x"])
    assert bad.exit_code == 2 and "job id '../x' is not usable" in bad.output


def test_lend_and_reclaim_refuse_bad_input_before_they_ask_the_daemon(env: Path) -> None:
    runner = CliRunner()
    for args, message in [
        (["lend", "--job", "7", "--to", "8", "--cpus", "1-x"], "cpu list '1-x' is not usable"),
        (["lend", "--job", "7", "--to", "../8", "--cpus", "1"], "job id '../8' is not usable"),
        (["reclaim", "--job", "7", "--from", "8", "--cpus", "9-3"], "range '9-3' is empty"),
    ]:
        result = runner.invoke(cli, ["node", *args])
        assert result.exit_code == 2 and message in result.output, result.output
    result = runner.invoke(cli, ["node", "reclaim", "--job", "7", "--from", "8"])
    assert result.exit_code == 1
    assert f"unreachable: no coshare node daemon at {env / 'none.sock'}" in result.output


def test_the_run_queue_delay_is_found_only_where_the_kernel_counts_it(tmp_path: Path) -> None:
    real = wait_capability()  # this machine's kernel (Linux with CONFIG_SCHED_INFO)
    assert real.where == f"/proc/{os.getpid()}/schedstat"
    if Path(real.where).exists():
        assert real.status == "found" and "per task" in real.detail, real
    else:
        assert real.status == "missing" and real.detail.startswith("unsupported: "), real
    (tmp_path / "5").mkdir()
    missing = wait_capability(tmp_path, 5)
    assert (missing.status, missing.where) == ("missing", str(tmp_path / "5" / "schedstat"))
    assert missing.detail.startswith("unsupported: ") and "CONFIG_SCHED_INFO" in missing.detail
    (tmp_path / "5" / "schedstat").write_text("0 0 0\n")  # accounting off (older kernels)
    off = wait_capability(tmp_path, 5)
    assert off.status == "missing" and "shows no CPU time" in off.detail
    (tmp_path / "5" / "schedstat").write_text("12 7000000 3\n")
    found = wait_capability(tmp_path, 5)
    assert found.status == "found" and "waited 7.0 ms" in found.detail


@pytest.mark.parametrize("missing", ["cpuset", "memory"])
def test_check_exits_1_when_a_capability_that_enforcement_needs_is_missing(
    env: Path, missing: str
) -> None:
    # A node whose jobs would run without their own cores or memory limit is not ready for
    # coshare's jobs, whatever else it has.
    for name in ("cgroup.procs", "cpuset.effective_cpus"):
        (env / "cgroup" / missing / name).unlink(missing_ok=True)
    (env / "cgroup" / missing).rmdir()
    table = CliRunner().invoke(cli, ["node", "check"])
    assert table.exit_code == 1, table.output
    assert "coshare: error: this node cannot enforce jobs' limits (" in table.output
    assert "missing): jobs placed here would run without them" in table.output
    as_json = CliRunner().invoke(cli, ["node", "check", "--output", "json"])
    assert as_json.exit_code == 1
    document = json.loads(as_json.stdout)
    assert document["enforcement"] == "missing"


def test_check_exits_1_without_cgroups(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COSHARE_NODE_CGROUP_ROOT", str(env / "no-cgroups"))
    result = CliRunner().invoke(cli, ["node", "check", "--output", "json"])
    assert result.exit_code == 1
    caps = {c["name"]: c for c in json.loads(result.stdout)["capabilities"]}
    assert caps["cgroups"]["status"] == "missing"
    assert "(cgroups missing)" in result.stderr
