"""A what-if on the pool's own history, on the real pool: jobs run, then ``coshare simulate
--workload condor-history`` replays what the schedd's history says of them (live, through
the bindings, and from saved ``condor_history -json`` / ``condor_status -json`` files), and
a history file with bad records replays the rest."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.condor_pool import CLIENT_CONFIG, POOL_SCRIPT, Pool, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.condor]

COSHARE = str(Path(sys.executable).with_name("coshare"))

#: (jobs, cores, memory MiB, seconds) of each cluster submitted.
SHAPES = ((4, 1, 64, 1), (4, 2, 128, 2), (4, 1, 256, 3))


def simulate(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            COSHARE,
            "--config",
            str(config),
            "simulate",
            "--workload",
            "condor-history",
            "--policies",
            "exclusive,knapsack",
            "--output",
            "json",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_replay_has_the_jobs_that_ran_with_their_cores_memory_run_times_and_owners(
    live: Pool,
    tmp_path: Path,
) -> None:
    since = int(time.time()) - 1
    clusters = {
        live.submit(count, sleep_s=sleep, request_cpus=str(cores), request_memory=str(memory)): (
            cores,
            memory,
            sleep,
        )
        for count, cores, memory, sleep in SHAPES
    }
    wait_for(lambda: not live.jobs(), 180, "the jobs to run and leave the queue")
    truth = {}
    for cluster, (cores, memory, sleep) in clusters.items():
        ads = list(
            live.schedd.history(
                f"ClusterId == {cluster}",
                projection=[
                    "ClusterId",
                    "ProcId",
                    "Owner",
                    "JobCurrentStartDate",
                    "CompletionDate",
                    "ExitCode",
                ],
            )
        )
        assert len(ads) == 4
        for ad in ads:
            assert ad["ExitCode"] == 0
            run_s = ad["CompletionDate"] - ad["JobCurrentStartDate"]
            assert run_s >= sleep
            truth[f"{ad['ClusterId']}.{ad['ProcId']}"] = (ad["Owner"], cores, memory, run_s)
    config = tmp_path / "coshare.yaml"
    config.write_text(f"condor: {{config_file: {CLIENT_CONFIG}}}\n")

    ran = simulate(config, "--since", str(since))
    assert ran.returncode == 0, ran.stderr
    out = json.loads(ran.stdout)
    seen = {j["id"]: j for j in out["jobs"]}
    assert set(truth) <= set(seen), (sorted(truth), sorted(seen))
    for job, (owner, cores, memory, run_s) in truth.items():
        got = seen[job]
        assert (got["user"], got["cores"], got["run_s"]) == (owner, cores, run_s), got
        assert got["memory_mib"] >= memory, got  # the slot's provisioned memory
        assert got["used_memory_mib"] is not None
    assert out["nodes"] == 4 and out["history"]["users"][next(iter(truth.values()))[0]] >= 12
    assert [r["jobs"] - r["not_run"] for r in out["runs"]] == [len(seen)] * 2

    # The same from saved files, as an admin copies them off the central manager.
    history = tmp_path / "history.json"
    history.write_text(
        pool_exec("condor_history", "-json", "-constraint", f"CompletionDate >= {since}")
    )
    slots = tmp_path / "slots.json"
    slots.write_text(pool_exec("condor_status", "-json"))
    saved = simulate(config, "--history-file", str(history), "--nodes-file", str(slots))
    assert saved.returncode == 0, saved.stderr
    again = {j["id"]: j for j in json.loads(saved.stdout)["jobs"]}
    assert {k: (v["user"], v["cores"], v["run_s"]) for k, v in again.items() if k in truth} == {
        k: (o, c, r) for k, (o, c, _, r) in truth.items()
    }

    # Bad records: one message each, naming the job and the field; the rest replay.
    ads = json.loads(history.read_text())
    first, second = (f"{a['ClusterId']}.{a['ProcId']}" for a in ads[:2])
    ads[0]["CompletionDate"] = 0
    ads[1]["JobCurrentStartDate"] = ads[1]["CompletionDate"] + 50
    text = json.dumps(ads, indent=1)
    history.write_text(text[: len(text) - 40])  # cut short inside the last record
    bad = simulate(config, "--history-file", str(history), "--nodes-file", str(slots))
    assert bad.returncode == 0, bad.stderr
    assert f"job {first}: CompletionDate is not set" in bad.stderr
    assert f"job {second}: end time" in bad.stderr and "is not after its start time" in bad.stderr
    assert "cut short at byte" in bad.stderr
    replayed = {j["id"] for j in json.loads(bad.stdout)["jobs"]}
    assert len(replayed) == len(ads) - 3 and first not in replayed and second not in replayed


def pool_exec(*argv: str) -> str:
    return subprocess.run(
        [str(POOL_SCRIPT), "exec", *argv], capture_output=True, text=True, check=True, timeout=120
    ).stdout
