"""Replaying a cluster's own history (``coshare simulate --workload slurm-history`` and
``condor-history``) from saved files: what each record becomes, the device-memory rule, and
bad records (one message naming the job and the field; the rest replayed)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli
from coshare.config import load_config
from coshare.errors import InputError
from coshare.model import MILLI, Device, Node
from coshare.sim.history import (
    DeviceMemoryRule,
    Finished,
    jain,
    json_items,
    parse_rule,
    workload,
)

from condor_addon.history import finished as condor_finished
from slurm_addon.history import finished as slurm_finished
from slurm_addon.history import parse_accounting

T0 = 1_700_000_000


def sacct_job(
    job: int,
    *,
    user: str = "alice",
    cpus: int = 2,
    mem: int = 512,
    gpus: int = 0,
    start: float = T0 + 10,
    end: float = T0 + 110,
    comment: str | None = None,
    nodes: int = 1,
) -> dict[str, Any]:
    """A job as Slurm 22.05's ``sacct --json`` prints it (the fields coshare reads)."""
    allocated: list[dict[str, Any]] = [
        {"type": "cpu", "name": None, "id": 1, "count": cpus},
        {"type": "mem", "name": None, "id": 2, "count": mem},
        {"type": "node", "name": None, "id": 4, "count": nodes},
        {"type": "billing", "name": None, "id": 5, "count": cpus},
    ]
    if gpus:
        allocated.append({"type": "gres", "name": "gpu", "id": 1001, "count": gpus * nodes})
    return {
        "job_id": job,
        "user": user,
        "account": "physics",
        "name": f"prog{job % 2}",
        "time": {
            "submission": T0 + job,
            "start": start,
            "end": end,
            "limit": 10,
            "elapsed": end - start,
        },
        "tres": {"allocated": allocated, "requested": []},
        "comment": {"job": comment, "administrator": None, "system": None},
        "state": {"current": "COMPLETED", "reason": "None"},
    }


def sinfo(nodes: int = 2, gpus: int = 2) -> dict[str, Any]:
    return {
        "nodes": [
            {
                "name": f"n{i}",
                "state": "idle",
                "cpus": 8,
                "real_memory": 16000,
                "gres": f"gpu:a100:{gpus}",
                "partitions": ["main"],
            }
            for i in range(1, nodes + 1)
        ]
    }


CONFIG = "slurm:\n  gres_name: gpu\ndevice_kinds:\n  a100: {memory_mib: 81920, threads: 2048}\n"
NODES = tuple(
    Node(f"n{i}", 8 * MILLI, 16000, (Device("0", 81920, 2048), Device("1", 81920, 2048)))
    for i in (1, 2)
)


def test_a_sacct_record_is_the_job_as_it_ran() -> None:
    found = slurm_finished(sacct_job(7, cpus=4, mem=2048, gpus=1), "gpu")
    assert isinstance(found, Finished)
    assert (found.id, found.user, found.account) == ("7", "alice", "physics")
    assert found.program == "prog1"
    assert (found.cores, found.memory_mib, found.devices, found.nodes) == (4, 2048, 1, 1)
    assert (found.submit_s, found.run_s, found.time_limit_s) == (T0 + 7, 100, 600)
    # A job that never started never ran: counted apart, not replayed.
    assert slurm_finished(sacct_job(8, start=0, end=T0 + 20), "gpu") is None
    # The 23.02+ form of a number is read too.
    newer = sacct_job(9)
    newer["time"]["limit"] = {"set": True, "infinite": False, "number": 5}
    assert slurm_finished(newer, "gpu").time_limit_s == 300  # type: ignore[union-attr]


def test_bad_sacct_records_are_one_message_each_and_the_rest_replay() -> None:
    running = sacct_job(2, end=0)
    negative = sacct_job(3)
    negative["tres"]["allocated"][0]["count"] = -4
    absurd = sacct_job(4)
    absurd["time"]["end"] = 1e300
    text = json.dumps({"jobs": [sacct_job(1), running, negative, absurd, "junk", sacct_job(5)]})
    records, never, cut = parse_accounting(text, "sacct.json", "gpu")
    assert never == 0 and cut is None
    found = workload(records, NODES)
    assert [f.id for f in found.finished] == ["1", "5"]
    assert found.problems == (
        "job 2: time.end is not set (still running; allowed: a finished job)",
        "job 3: cores -4 (allowed: 0.001..1048576)",
        "job 4 time.end=1e+300 is outside what coshare accepts (allowed: a number "
        "0..1000000000000)",
        "sacct.json: record 5 is not a JSON object",
    ), found.problems


def test_a_cut_short_history_replays_its_whole_records_with_a_note() -> None:
    text = json.dumps({"meta": {}, "jobs": [sacct_job(i) for i in range(1, 6)]}, indent=1)
    cut = text[: text.index('"job_id": 4')]
    items, note = json_items(cut, "sacct.json", "jobs")
    assert [i["job_id"] for i in items] == [1, 2, 3]  # type: ignore[index]
    assert note is not None and "cut short at byte" in note and "the 3 whole records" in note
    with pytest.raises(InputError, match="no array of records"):
        json_items('{"jobs": 3', "sacct.json", "jobs")
    items, note = json_items(json.dumps([{"ClusterId": 1}]), "h.json", None)
    assert items == [{"ClusterId": 1}] and note is None


def test_device_memory_comes_from_the_declaration_else_the_rule_else_the_whole_device() -> None:
    declared = slurm_finished(
        sacct_job(1, gpus=1, comment="coshare: device-memory=2G device-threads=60"), "gpu"
    )
    alice = slurm_finished(sacct_job(2, gpus=1, user="alice"), "gpu")
    bob = slurm_finished(sacct_job(4, gpus=1, user="bob"), "gpu")  # program prog0
    prog = slurm_finished(sacct_job(5, gpus=1, user="bob"), "gpu")  # program prog1
    records = [declared, alice, bob, prog]
    rule = parse_rule(["user:alice=10000", "program:prog1=3000"])
    found = workload(records, NODES, rule)  # type: ignore[arg-type]
    memory = {j.job.id: (j.job.device_memory_mib, j.job.device_threads) for j in found.jobs}
    assert memory == {"1": (2048, 60), "2": (10000, 2048), "4": (81920, 2048), "5": (3000, 2048)}
    assert found.ruled == 3
    assert parse_rule(["4096"]).of(bob) == 4096  # type: ignore[arg-type]
    assert DeviceMemoryRule().of(bob) is None  # type: ignore[arg-type]
    for bad in ("user:alice", "0", "program:x=1e9", "user:$(id)=5"):
        with pytest.raises(InputError, match="--device-memory"):
            parse_rule([bad])


def test_a_job_on_several_nodes_is_a_gang_of_one_process_per_node() -> None:
    record = slurm_finished(sacct_job(1, cpus=8, mem=4096, gpus=1, nodes=2), "gpu")
    assert isinstance(record, Finished)
    found = workload([record], NODES)
    job = found.jobs[0].job
    assert (job.nodes, job.processes, job.processes_per_node) == (2, 2, 1)
    assert (job.cpu_milli, job.memory_mib, job.device_count) == (4 * MILLI, 2048, 1)


def condor_ad(job: int, **extra: object) -> dict[str, object]:
    """A job as ``condor_history -json`` prints it (the fields coshare reads)."""
    return {
        "ClusterId": job,
        "ProcId": 0,
        "Owner": "carol",
        "AcctGroup": "group_bio",
        "Cmd": "/home/carol/bin/align",
        "JobStatus": 4,
        "QDate": T0,
        "JobCurrentStartDate": T0 + 5,
        "CompletionDate": T0 + 65,
        "EnteredCurrentStatus": T0 + 65,
        "RequestCpus": 2,
        "RequestMemory": "ifthenelse(MemoryUsage =!= undefined,MemoryUsage,"
        "(ImageSize + 1023) / 1024)",
        "CpusProvisioned": 2,
        "MemoryProvisioned": 1024,
        "MemoryUsage": 300,
        "CpusUsage": 1.5,
        **extra,
    }


def test_a_condor_history_ad_is_the_job_as_it_ran() -> None:
    found = condor_finished(
        condor_ad(12, RequestGPUs=1, CoshareDeviceMemory=4096, CoshareDeviceThreads=120)
    )
    assert isinstance(found, Finished)
    assert (found.id, found.user, found.account, found.program) == (
        "12.0",
        "carol",
        "group_bio",
        "align",
    )
    assert (found.cores, found.memory_mib, found.devices, found.run_s) == (2, 1024, 1, 60)
    assert (found.used_cores, found.used_memory_mib) == (1.5, 300)
    assert found.annotations == {"CoshareDeviceMemory": 4096, "CoshareDeviceThreads": 120}
    # Removed while running: it ended when it left the running state.
    removed = condor_finished(condor_ad(13, JobStatus=3, CompletionDate=0))
    assert isinstance(removed, Finished) and removed.end_s == T0 + 65
    # Never started: never ran.
    assert condor_finished(condor_ad(14, JobCurrentStartDate=None)) is None
    assert condor_finished(condor_ad(15, CompletionDate=0)) == (
        "job 15.0: CompletionDate is not set (allowed: a finished job's end time)"
    )
    # An absurd time is refused by the one check of every record, naming the job and field.
    absurd = condor_finished(condor_ad(16, CompletionDate=1e300))
    found = workload([absurd, condor_finished(condor_ad(17))], NODES)  # type: ignore[list-item]
    assert found.problems == ("job 16.0: end time 1e+300 (allowed: 1..1000000000000)",)
    assert [f.id for f in found.finished] == ["17.0"]


def invoke(*args: str, config: Path) -> Any:
    return CliRunner().invoke(cli, ["--config", str(config), "simulate", *args])


def test_simulate_replays_a_saved_slurm_history_and_says_what_it_left_out(
    tmp_path: Path,
) -> None:
    config = tmp_path / "coshare.yaml"
    config.write_text(CONFIG)
    history = tmp_path / "sacct.json"
    jobs = [sacct_job(i, user="alice" if i % 2 else "bob", gpus=i % 2) for i in range(1, 9)]
    history.write_text(json.dumps({"jobs": [*jobs, sacct_job(20, end=0)]}))
    nodes = tmp_path / "sinfo.json"
    nodes.write_text(json.dumps(sinfo()))
    ran = invoke(
        "--workload",
        "slurm-history",
        "--history-file",
        str(history),
        "--nodes-file",
        str(nodes),
        "--policies",
        "exclusive,knapsack",
        "--output",
        "json",
        config=config,
    )
    assert ran.exit_code == 0, ran.output
    out = json.loads(ran.stdout)
    assert out["history"]["jobs"] == 8 and out["history"]["users"] == {"alice": 4, "bob": 4}
    assert out["history"]["device_memory_from_rule"] == 4
    assert [j["id"] for j in out["jobs"]] == [str(i) for i in range(1, 9)]
    assert [r["jobs"] - r["not_run"] for r in out["runs"]] == [8, 8]
    for run in out["runs"]:  # each user's waits, and how evenly the policy treats them
        assert set(run["users"]) == {"alice", "bob"}
        assert sum(u["jobs"] for u in run["users"].values()) == 8
        assert 0.5 < run["fairness_jain"] <= 1.0
    assert "job 20: time.end is not set" in ran.stderr
    assert "4 jobs used devices without declaring their device memory" in ran.stderr


def test_history_options_belong_to_the_history_workloads(tmp_path: Path) -> None:
    config = tmp_path / "coshare.yaml"
    config.write_text(CONFIG)
    ran = invoke("--workload", "table1", "--since", "now-1days", config=config)
    assert ran.exit_code == 2 and "--since apply to --workload slurm-history" in ran.output
    ran = invoke("--workload", "slurm-history", "--since", "now;reboot", config=config)
    assert ran.exit_code == 2 and "--since 'now;reboot'" in ran.output
    assert load_config(config, environ={}).slurm.gres_name == "gpu"


def test_jains_index_is_one_when_equal_and_one_over_n_when_one_user_holds_all() -> None:
    assert jain([2.0, 2.0, 2.0]) == 1.0
    assert jain([3.0, 0.0, 0.0]) == pytest.approx(1 / 3)
    assert jain([1.0, 3.0]) == pytest.approx(16 / 20)
    assert math.isnan(jain([])) and math.isnan(jain([0.0, 0.0]))
