"""Driving the real local Slurm cluster from the integration tests: submit, run cycles the
way cron does (the ``coshare`` command), and read Slurm's own records (squeue, sacct)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from slurm_addon.jobs import SlurmJob, parse_squeue_json
from slurm_addon.placement import Placement, parse_placement

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "deploy" / "slurm" / "local-cluster"
BIN = Path(sys.executable).parent
DEVICE_MEMORY_MIB = 8192
DEVICE_THREADS = 240


@dataclass(frozen=True)
class Record:
    """One finished job as sacct (slurmdbd) recorded it."""

    job: str
    state: str
    node: str
    start_s: float
    end_s: float
    admin_comment: str
    comment: str

    @property
    def placement(self) -> Placement | None:
        return parse_placement(self.admin_comment)


class Cluster:
    """A started local cluster (deploy/slurm/local-cluster) and coshare's config for it."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.config = directory / "test-coshare.yaml"
        self.out = directory / "out"
        self.out.mkdir(exist_ok=True)
        self.env = {**os.environ, "SLURM_CONF": str(directory / "slurm.conf")}

    def run(
        self, *argv: str, check: bool = True, timeout: float = 120, user: int | None = None
    ) -> subprocess.CompletedProcess[str]:
        prefix = (
            []
            if user is None
            else ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
        )
        return subprocess.run(
            [*prefix, *argv],
            env=self.env,
            text=True,
            capture_output=True,
            check=check,
            timeout=timeout,
        )

    def script(
        self, name: str, *, comment: str | None, sleep_s: float = 2.0, extra: str = ""
    ) -> Path:
        lines = ["#!/bin/sh", f"#SBATCH --job-name={name}", f"#SBATCH --output={self.out}/%j.out"]
        if comment is not None:
            lines.append(f'#SBATCH --comment="{comment}"')
        if extra:
            lines.append(extra)
        lines += [
            'echo "node=$SLURMD_NODENAME devices=${CUDA_VISIBLE_DEVICES-unset}"',
            f"sleep {sleep_s}",
        ]
        path = self.out / f"{name}.sh"
        path.write_text("\n".join(lines) + "\n")
        return path

    def submit(
        self, name: str, *, comment: str | None, sleep_s: float = 2.0, extra: str = ""
    ) -> str:
        path = self.script(name, comment=comment, sleep_s=sleep_s, extra=extra)
        return self.run("sbatch", "--parsable", str(path)).stdout.strip().split(";")[0]

    def cycle(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run(
            str(BIN / "coshare"),
            "--config",
            str(self.config),
            "slurm",
            "cycle",
            *args,
            check=False,
            timeout=300,
        )

    def jobs(self) -> dict[str, SlurmJob]:
        return {j.id: j for j in parse_squeue_json(self.run("squeue", "--json").stdout)}

    def run_cycles_until_done(self, ids: list[str], deadline_s: float = 300) -> list[int]:
        """Run cycles as cron would until every job in ``ids`` ended; the exit statuses."""
        statuses = []
        stop = time.monotonic() + deadline_s
        while True:
            jobs = self.jobs()
            if all(jobs[i].phase == "ended" for i in ids if i in jobs):
                return statuses
            left = [i for i in ids if jobs[i].phase != "ended"]
            assert time.monotonic() < stop, f"jobs not done: {left}"
            result = self.cycle()
            statuses.append(result.returncode)
            assert result.returncode == 0, result.stdout + result.stderr
            time.sleep(0.5)

    def sacct(self, ids: list[str], deadline_s: float = 60) -> dict[str, Record]:
        """Slurm's accounting records of finished jobs (waits for slurmdbd to have them)."""
        stop = time.monotonic() + deadline_s
        while True:
            fields = "JobID,State,NodeList,Start,End,AdminComment,Comment"
            out = self.run(
                "sacct",
                "--noheader",
                "--parsable2",
                "--allocations",
                "--jobs",
                ",".join(ids),
                "--format",
                fields,
            ).stdout
            records = {}
            for line in out.splitlines():
                job, state, node, start, end, admin, *comment = line.split("|")
                if end in ("Unknown", "") or start in ("Unknown", "None", ""):
                    continue
                records[job] = Record(
                    job, state, node, _epoch(start), _epoch(end), admin, "|".join(comment)
                )
            if set(ids) <= set(records):
                return records
            assert time.monotonic() < stop, f"sacct lacks {set(ids) - set(records)}"
            time.sleep(1)

    def output(self, job_id: str) -> str:
        return (self.out / f"{job_id}.out").read_text()


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def check_never_oversubscribed(
    records: list[Record], demands: dict[str, tuple[int, int]]
) -> dict[tuple[str, str], int]:
    """Sweep each device's [start, end) intervals from Slurm's records (every part of a gang
    on its own node); fail if the jobs sharing it ever declared more memory or threads than
    it has. Returns the most jobs seen together on each device (to show that sharing
    happened)."""
    events: dict[tuple[str, str], list[tuple[float, int, str]]] = defaultdict(list)
    for r in records:
        placement = r.placement
        assert placement is not None, r
        spots = (
            [(p.node, d) for p in placement.parts for d in p.devices]
            if placement.parts
            else [(r.node, d) for d in placement.devices]
        )
        for spot in spots:
            events[spot] += [(r.start_s, 1, r.job), (r.end_s, -1, r.job)]
    most: dict[tuple[str, str], int] = {}
    for key, items in events.items():
        active: set[str] = set()
        peak = 0
        # Ends before starts at the same second: [start, end) intervals.
        for _, kind, job in sorted(items, key=lambda e: (e[0], e[1])):
            if kind < 0:
                active.discard(job)
                continue
            active.add(job)
            memory = sum(demands[j][0] for j in active)
            threads = sum(demands[j][1] for j in active)
            assert memory <= DEVICE_MEMORY_MIB, f"{key}: {sorted(active)} use {memory} MiB"
            assert threads <= DEVICE_THREADS, f"{key}: {sorted(active)} use {threads} threads"
            peak = max(peak, len(active))
        most[key] = peak
    return most


def check_ran_where_placed(cluster: Cluster, records: dict[str, Record]) -> None:
    """Every annotated job completed on its placement's node, with its devices exposed."""
    for job_id, r in records.items():
        assert r.state == "COMPLETED", r
        placement = r.placement
        assert placement is not None, f"job {job_id} ran without a placement: {r}"
        assert r.node == placement.node, r
        expected = f"node={placement.node} devices={','.join(placement.devices)}"
        assert cluster.output(job_id).splitlines()[0] == expected
