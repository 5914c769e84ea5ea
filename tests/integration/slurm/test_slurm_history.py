"""A what-if on the cluster's own accounting, on the real cluster (slurmdbd): jobs of two
users run, then ``coshare simulate --workload slurm-history`` replays what ``sacct --json``
says of them (live, and from saved ``sacct --json`` / ``sinfo --json`` files), checked
against sacct's own parsable listing; a saved file with bad records replays the rest."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from .cluster import BIN, Cluster

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

#: The unprivileged account of the second user's jobs (nobody).
USER = 65534


def simulate(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return cluster.run(
        str(BIN / "coshare"),
        "--config",
        str(cluster.config),
        "simulate",
        "--workload",
        "slurm-history",
        "--policies",
        "exclusive,knapsack",
        "--output",
        "json",
        *args,
        check=False,
        timeout=300,
    )


def test_the_replay_has_the_jobs_that_ran_with_their_cores_memory_run_times_and_users(
    cluster: Cluster,
    tmp_path: Path,
) -> None:
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 2))
    ids = []
    for i in range(24):
        argv = [
            "sbatch",
            "--parsable",
            f"--job-name=hist{i % 4}",
            f"--cpus-per-task={1 + i % 2}",
            f"--mem={50 * (1 + i % 3)}M",
            "--output=/dev/null",
            "--chdir=/tmp",
            f"--wrap=sleep {1 + i % 3}",
        ]
        ids.append(cluster.run(*argv, user=USER if i % 3 == 0 else None).stdout.strip())
    cluster.sacct(ids, deadline_s=240)  # every job ended and is in the accounting
    listing = cluster.run(
        "sacct",
        "--noheader",
        "--parsable2",
        "--allocations",
        "--jobs",
        ",".join(ids),
        "--format",
        "JobID,User,AllocCPUS,ReqMem,ElapsedRaw",
    ).stdout
    truth = {}
    for line in listing.splitlines():
        job, user, cpus, mem, elapsed = line.split("|")
        truth[job] = (user, float(cpus), float(mem.rstrip("Mn")), float(elapsed))
    assert set(truth) == set(ids) and {u for u, *_ in truth.values()} == {"root", "nobody"}

    ran = simulate(cluster, "--since", since)
    assert ran.returncode == 0, ran.stderr
    out = json.loads(ran.stdout)
    seen = {j["id"]: j for j in out["jobs"]}
    assert set(ids) <= set(seen), (ids, sorted(seen))
    for job, (owner, cores, memory, run_s) in truth.items():
        got = seen[job]
        assert (got["user"], got["cores"], got["memory_mib"]) == (owner, cores, memory), got
        assert abs(got["run_s"] - run_s) <= 1, (got, run_s)
    assert out["history"]["users"]["nobody"] >= 8 and out["nodes"] == 4
    # the window may hold jobs an earlier test cancelled in its last seconds: counted, and
    # replayed as they ran; that all of this test's jobs run is checked on its own file below
    assert [r["jobs"] for r in out["runs"]] == [len(seen)] * 2

    # The same from saved files, as an admin copies them off the controller.
    history = tmp_path / "sacct.json"
    listed = json.loads(cluster.run("sacct", "--json", "--allusers", f"--starttime={since}").stdout)
    listed["jobs"] = [j for j in listed["jobs"] if str(j["job_id"]) in truth]  # this test's own
    # Slurm's JSON names no user for a user without an association. With limits enforced
    # every user of this cluster has one, so nobody's records are made to read as such.
    for record in listed["jobs"]:
        if truth[str(record["job_id"])][0] == "nobody":
            record["user"] = ""
            if isinstance(record.get("association"), dict):
                record["association"]["user"] = ""
    history.write_text(json.dumps(listed))
    nodes = tmp_path / "sinfo.json"
    nodes.write_text(cluster.run("sinfo", "--json").stdout)
    saved = simulate(cluster, "--history-file", str(history), "--nodes-file", str(nodes))
    assert saved.returncode == 0, saved.stderr
    again = {j["id"]: j for j in json.loads(saved.stdout)["jobs"]}
    # The same jobs; only the user name differs where sacct's JSON has none: a saved file
    # cannot ask sacct for the name (the note says so).
    nameless = {k for k in ids if truth[k][0] == "nobody"}
    assert {k: again[k] for k in ids if k not in nameless} == {
        k: seen[k] for k in ids if k not in nameless
    }
    assert {k: {**again[k], "user": "nobody"} for k in nameless} == {k: seen[k] for k in nameless}
    assert {again[k]["user"] for k in nameless} == {""}
    assert "jobs name no user in the accounting's JSON" in saved.stderr
    assert [(r["jobs"], r["not_run"]) for r in json.loads(saved.stdout)["runs"]] == [(24, 0)] * 2

    # Bad records: one message each, naming the job and the field; the rest replay.
    data = json.loads(history.read_text())
    records = {str(r["job_id"]): r for r in data["jobs"]}
    records[ids[0]]["time"]["end"] = 0
    for item in records[ids[1]]["tres"]["allocated"]:
        if item["type"] == "cpu":
            item["count"] = -3
    text = json.dumps(data, indent=1)
    history.write_text(text[: text.rindex('"job_id"')])  # cut short inside the last record
    bad = simulate(cluster, "--history-file", str(history), "--nodes-file", str(nodes))
    assert bad.returncode == 0, bad.stderr
    assert f"job {ids[0]}: time.end is not set" in bad.stderr
    assert f"job {ids[1]}: cores -3 (allowed: 0.001..1048576)" in bad.stderr
    assert "cut short at byte" in bad.stderr
    replayed = {j["id"] for j in json.loads(bad.stdout)["jobs"]}
    assert ids[0] not in replayed and ids[1] not in replayed
    assert len(replayed) == len(data["jobs"]) - 3
