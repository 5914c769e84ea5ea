"""Slurm's priority and limits as coshare reads them (slurm_addon.priority, .limits,
.scheduling), on the text Slurm 22.05 printed on the local cluster: the multifactor formula,
the QOS and association limits with their use, and bad numbers that make the cycle plan by
submit time with a note instead of failing."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from coshare.config import SlurmConfig
from coshare.model import Job, RunningJob, Snapshot
from coshare.system.programs import CommandResult

from slurm_addon.client import SlurmClient
from slurm_addon.jobs import SlurmJob
from slurm_addon.limits import limits_and_charges, parse_assocs, parse_qos, tres_amounts
from slurm_addon.priority import (
    Factors,
    PriorityProblem,
    job_priority,
    parse_partition_factors,
    parse_sshare,
    parse_weights,
    priorities,
)
from slurm_addon.scheduling import Scheduling, read_scheduling, with_scheduling

CONFIG = """\
AccountingStorageEnforce = associations,limits,qos
ClusterName             = cosharesl
PriorityDecayHalfLife   = 7-00:00:00
PriorityCalcPeriod      = 00:01:00
PriorityFavorSmall      = No
PriorityMaxAge          = 1-00:00:00
PriorityType            = priority/multifactor
PriorityWeightAge       = 1000
PriorityWeightAssoc     = 0
PriorityWeightFairShare = 100000
PriorityWeightJobSize   = 0
PriorityWeightPartition = 1000
PriorityWeightQOS       = 10000
PriorityWeightTRES      = (null)
"""
SSHARE = """\
root||
 root|nobody|0.000000
 root|root|1.000000
 large||
  large|nobody|0.400000
  large|root|0.800000
 small||
  small|root|0.200000
"""
PARTITIONS = (
    "PartitionName=main AllowGroups=ALL Default=YES PriorityJobFactor=1 PriorityTier=1 State=UP\n"
    "PartitionName=coshare-lend AllowGroups=ALL PriorityJobFactor=1 PriorityTier=1 Hidden=YES\n"
)
QOS = "normal|0|||||||\ngpu2|10|gres/gpu=2||||||\nurgent|100|||||||\n"
ASSOCS = (
    "cosharesl|root|||||\n"
    "cosharesl|large||cpu=16||\n"
    "cosharesl|small|root||2|\n"
    "othercluster|small|root|cpu=1|1|1\n"
)


def factors() -> Factors:
    qos, _ = parse_qos(QOS, [])
    return Factors(
        parse_weights(CONFIG),
        parse_sshare(SSHARE),
        qos,
        parse_partition_factors(PARTITIONS),
        nodes=4,
        cpus=32,
    )


def slurm_job(ident: str, **kw: object) -> SlurmJob:
    base: dict[str, object] = {
        "phase": "pending",
        "state": "PENDING",
        "user": "root",
        "account": "large",
        "qos": "normal",
        "partition": "main",
        "submit_time_s": 1000.0,
        "tres": "cpu=1,mem=256M,node=1,billing=1",
    }
    base.update(kw)
    return SlurmJob(id=ident, **base)  # type: ignore[arg-type]


def test_the_multifactor_formula_as_slurm_computes_it() -> None:
    f = factors()
    # seen live: account small, QOS normal, fair share 0, not yet eligible: 1000 (partition)
    deferred = slurm_job("3", account="small", user="nobody", eligible_time_s=5000.0)
    assert job_priority(deferred, replace_share(f, ("small", "nobody"), 0.0), 1000.0) == 1000
    # fair share 0.8 -> 80000, QOS urgent 100/100 -> 10000, partition 1000, age half a day
    job = slurm_job("4", qos="urgent")
    assert job_priority(job, f, 1000.0 + 43200) == 80000 + 10000 + 1000 + 500
    # age is capped at PriorityMaxAge; gpu2's 10 of the largest QOS priority 100 is 1000
    assert job_priority(slurm_job("5", qos="gpu2"), f, 1e9) == 80000 + 1000 + 1000 + 1000


def replace_share(f: Factors, key: tuple[str, str], value: float) -> Factors:
    return Factors(f.weights, {**f.fairshare, key: value}, f.qos_priority, f.partition_factor)


def test_the_larger_share_with_less_usage_orders_first() -> None:
    jobs = [
        slurm_job("10", account="small", submit_time_s=100.0),
        slurm_job("11", account="large", submit_time_s=200.0),
    ]
    found, notes = priorities(jobs, factors(), 300.0)
    assert found["11"] > found["10"] and notes == ()


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("PriorityWeightFairShare = -5", "PriorityWeightFairShare is '-5'"),
        ("PriorityWeightQOS = 99999999999999", "PriorityWeightQOS is '99999999999999'"),
        ("PriorityWeightAge = lots", "PriorityWeightAge is 'lots'"),
        ("PriorityMaxAge = never", "PriorityMaxAge is 'never'"),
    ],
)
def test_bad_weights_are_refused_with_the_key_and_range(config: str, expected: str) -> None:
    with pytest.raises(PriorityProblem, match=expected):
        parse_weights(CONFIG + config + "\n")


def test_bad_or_missing_fair_share_orders_by_submit_time_with_one_note() -> None:
    with pytest.raises(PriorityProblem, match="FairShare of user root in account x is 'nan'"):
        parse_sshare("x|root|nan\n")
    with pytest.raises(PriorityProblem, match="expected Account"):
        parse_sshare("garbage\n")
    jobs = [slurm_job("1"), slurm_job("2", account="nowhere")]
    found, notes = priorities(jobs, factors(), 0.0)
    assert found == {}
    assert notes == (
        "jobs are planned by submit time this cycle: job 2: sshare shows no fair-share factor "
        "for user root in account nowhere",
    )


def test_qos_and_association_limits_with_their_use_and_charges() -> None:
    notes: list[str] = []
    _, rules = parse_qos(QOS, notes)
    rules += parse_assocs(ASSOCS, "cosharesl", notes)
    assert notes == []
    gres = "cpu=1,mem=256M,node=1,billing=1,gres/gpu=1"
    jobs = [
        slurm_job("1", phase="active", state="RUNNING", qos="gpu2", tres=gres),
        slurm_job("2", qos="gpu2", tres=gres),  # placed by coshare, not started: holds
        slurm_job("3", qos="gpu2", tres=gres),
        slurm_job("4", account="small", tres="cpu=4,node=1"),
        slurm_job("5", account="small", phase="active", state="RUNNING", tres="cpu=2"),
    ]
    limits, charges = limits_and_charges(rules, jobs, {"3", "4"}, {"2"})
    by_name = {(lim.name, lim.holder): lim for lim in limits}
    gpu = by_name[("QOS gpu2 MaxTRESPerUser gres/gpu=2", "user root")]
    assert gpu.used == 2 and gpu.max == 2
    jobs_limit = by_name[("association root/small GrpJobs=2", "user root in account small")]
    assert jobs_limit.used == 1 and jobs_limit.max == 2
    cpu = by_name[("account large GrpTRES cpu=16", "account large")]
    assert cpu.used == 2  # jobs 1 and 2, one CPU each
    assert dict(charges["3"]) == {gpu.id: 1.0, cpu.id: 1.0}
    assert charges["4"] == ((jobs_limit.id, 1.0),)


def test_tres_strings() -> None:
    assert tres_amounts("cpu=2,mem=512M,node=1,billing=2,gres/gpu=1,gres/gpu:phi=1") == {
        "cpu": 2.0,
        "node": 1.0,
        "gres/gpu": 1.0,
        "gres/gpu:phi": 1.0,
    }
    assert tres_amounts("cpu=nan,gres/gpu=-1,gres/x=1e400") == {}


def test_with_scheduling_sets_priorities_charges_and_limits_on_the_snapshot() -> None:
    _, rules = parse_qos(QOS, [])
    gres = "cpu=1,node=1,gres/gpu=1"
    jobs = [
        slurm_job("7", qos="gpu2", tres=gres),
        slurm_job("8", qos="urgent"),
        slurm_job("9", qos="gpu2", tres=gres),
    ]
    snapshot = Snapshot(
        (),
        running=(RunningJob("9", "n1", state="planned"),),
        pending=(Job("7"), Job("8")),
    )
    out, notes = with_scheduling(snapshot, jobs, Scheduling(factors(), tuple(rules)), 1000.0)
    prio = {j.id: j.priority for j in out.pending}
    assert prio == {"7": 80000 + 1000 + 1000, "8": 80000 + 10000 + 1000}
    [limit] = out.limits
    assert limit.used == 1 and out.pending[0].charges == ((limit.id, 1.0),)
    assert out.pending[1].charges == () and notes == ()
    # policy.order: coshare reads no factors: the priorities stay as they were
    out, _ = with_scheduling(snapshot, jobs, Scheduling(None, tuple(rules)), 1000.0)
    assert [j.priority for j in out.pending] == [0, 0]


def client_answering(answers: dict[str, tuple[int, str]]) -> SlurmClient:
    """A client whose commands print ``answers[program]`` (exit status, output); the
    controller's own error paths (a failing sshare) that a real daemon does not produce
    on demand."""

    def runner(argv: Sequence[str], **_: object) -> CommandResult:
        code, out = answers[Path(argv[0]).name]
        return CommandResult(tuple(argv), code, out, "error" if code else "")

    return SlurmClient(SlurmConfig(retry_attempts=1), runner=runner)  # type: ignore[arg-type]


def test_an_unreadable_sshare_plans_by_submit_time_and_says_so_once() -> None:
    config = CONFIG + "AccountingStorageType = accounting_storage/slurmdbd\n"
    client = client_answering({"scontrol": (0, config), "sacctmgr": (0, QOS), "sshare": (1, "")})
    scheduling = read_scheduling(client, order="scheduler", nodes=4, cpus=32)
    assert scheduling.factors is None
    [note] = scheduling.notes
    assert note.startswith("jobs are planned by submit time this cycle: Slurm's priority")
    assert "sshare" in note
    # the limits are still read
    assert {r.field for r in scheduling.rules} == {"MaxTRESPerUser"}


def test_policy_order_coshare_reads_no_priority() -> None:
    config = CONFIG + "AccountingStorageType = accounting_storage/slurmdbd\n"
    client = client_answering({"scontrol": (0, config), "sacctmgr": (0, QOS)})
    scheduling = read_scheduling(client, order="coshare", nodes=4, cpus=32)
    assert scheduling.factors is None and scheduling.notes == ()
