"""SWF logs as they are published: ``.swf.gz`` read directly (its
``.machines`` beside it), ``--cores-per-node`` for a log without one, options that do not
apply to a trace refused, memory in the header's unit, Alea's extended columns accepted, and
one warning with counts for the fields coshare cannot model."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli
from coshare.errors import InputError
from coshare.sim.replay import check_log, cluster_of
from coshare.sim.trace_files import machines_path, read_swf, stream_lines
from coshare.sim.traces import TraceError, header_memory_unit, parse_swf, unmodelled_warning

#: A record: job, submit, wait, run, alloc, cpu, used mem, req procs, req time, req mem,
#: status, user, group, executable, queue, partition, preceding job, think time.
RECORD = "{id} {submit} 0 50 {procs} -1 -1 {procs} 100 {mem} 1 {user} -1 -1 -1 -1 -1 -1"


def records(count: int, extra: str = "") -> str:
    return "".join(
        RECORD.format(id=i + 1, submit=10 * i, procs=1 + i % 2, mem=2048, user=3 + i % 2)
        + extra
        + "\n"
        for i in range(count)
    )


@pytest.fixture(autouse=True)
def no_system_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("coshare.config.DEFAULT_CONFIG_PATH", tmp_path / "absent.yaml")
    for var in [v for v in os.environ if v.startswith("COSHARE_")]:
        monkeypatch.delenv(var)


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_a_gzipped_log_streams_like_the_plain_one(tmp_path: Path) -> None:
    text = "; MaxNodes: 2\n; MaxProcs: 4\n" + records(6)
    plain, packed = tmp_path / "a.swf", tmp_path / "b.swf.gz"
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    assert list(stream_lines(packed)) == list(stream_lines(plain))
    assert read_swf(packed)[0] == read_swf(plain)[0]
    assert [n.cores for n in cluster_of(packed, None)] == [2, 2]  # its header, read from gzip
    assert check_log(packed).jobs == 6


def test_a_broken_gzip_is_one_message(tmp_path: Path) -> None:
    broken = tmp_path / "x.swf.gz"
    broken.write_bytes(gzip.compress(records(50).encode())[:60])
    with pytest.raises(InputError, match="not a whole gzip file"):
        check_log(broken)
    broken.write_bytes(b"plain text, not gzip")
    with pytest.raises(InputError, match=r"x\.swf\.gz"):
        check_log(broken)


@pytest.mark.parametrize("name", ["log.swf.gz.machines", "log.swf.machines"])
def test_the_machines_of_a_gzipped_log_are_found_beside_it(tmp_path: Path, name: str) -> None:
    log = tmp_path / "log.swf.gz"
    log.write_bytes(gzip.compress(records(4).encode()))
    (tmp_path / name).write_text("0 seth 3 2 1 1048576\n")
    assert machines_path(log) == tmp_path / name
    assert [(n.cores, n.memory_mib) for n in cluster_of(log, None)] == [(2, 1024)] * 3
    code, out, err = run(
        "simulate", "--workload", f"trace:{log}", "--policies", "exclusive", "--output", "json"
    )
    assert code == 0, err
    result = json.loads(out)
    assert result["nodes"] == 3 and result["runs"][0]["jobs"] == 4


def test_cores_per_node_with_nodes_builds_the_cluster_of_a_log_without_machines(
    tmp_path: Path,
) -> None:
    log = tmp_path / "bare.swf"  # no header keys, no .machines: only the options say
    log.write_text(records(6))
    with pytest.raises(TraceError, match="MaxNodes or MaxProcs"):
        cluster_of(log, 3)
    assert [n.cores for n in cluster_of(log, 3, 4)] == [4, 4, 4]
    code, out, err = run(
        "simulate",
        "--workload",
        f"trace:{log}",
        "--nodes",
        "3",
        "--cores-per-node",
        "4",
        "--policies",
        "exclusive",
        "--output",
        "json",
    )
    assert code == 0, err
    assert json.loads(out)["nodes"] == 3 and json.loads(out)["runs"][0]["not_run"] == 0
    headed = tmp_path / "headed.swf"
    headed.write_text("; MaxProcs: 10\n" + records(2))  # MaxProcs alone: ceil(10 / 4) nodes
    assert [n.cores for n in cluster_of(headed, None, 4)] == [4, 4, 4]
    assert len(cluster_of(headed, 2, None)) == 2  # --nodes alone: as before, the first N


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--jobs", "5"], "--jobs does not apply to a trace"),
        (["--footprint"], "--footprint does not apply"),
        (["--sizes", "1-2", "--offload-share", "0.5"], "--sizes, --offload-share do not apply"),
        (["--batch", "100"], "--batch does not apply"),  # the default value, but given
        (
            ["--cores-per-node", "2"],
            "--cores-per-node does not apply to 'log.swf': 'log.swf.machines' beside it",
        ),
    ],
)
def test_options_that_do_not_apply_to_a_trace_are_refused(
    tmp_path: Path, args: list[str], says: str
) -> None:
    log = tmp_path / "log.swf"
    log.write_text(records(3))
    (tmp_path / "log.swf.machines").write_text("0 seth 2 2 1 1048576\n")
    code, _, err = run("simulate", "--workload", f"trace:{log}", *args)
    assert code == 2 and says in " ".join(err.split()), err
    assert "Traceback" not in err


def test_cores_per_node_is_refused_for_a_workload_that_is_not_a_trace() -> None:
    code, _, err = run("simulate", "--workload", "table1", "--cores-per-node", "4")
    assert code == 2 and "--cores-per-node applies to trace:PATH replays only" in err


@pytest.mark.parametrize(
    ("line", "unit_kb"),
    [
        ("; MemoryUnit: MB", 1024.0),
        ("; Note: memory is in MB per processor", 1024.0),
        ("; Note: Memory fields in bytes", 1 / 1024),
        ("; MemoryUnit: KB", 1.0),
        ("; Note: uses MAUI scheduler", None),
        ("; MaxNodes: 240", None),
    ],
)
def test_the_header_states_the_memory_unit(line: str, unit_kb: float | None) -> None:
    assert header_memory_unit(line) == unit_kb


def test_memory_is_read_in_the_headers_unit_per_process() -> None:
    record = RECORD.format(id=1, submit=0, procs=4, mem=3, user=1)
    standard = parse_swf([record]).jobs[0].job  # KB per processor: 3 KB -> 1 MiB (rounded up)
    in_mb = parse_swf(["; Note: memory is in MB", record]).jobs[0].job
    assert (standard.memory_mib, standard.processes) == (1, 4)
    assert (in_mb.memory_mib, in_mb.processes, in_mb.total_memory_mib) == (3, 4, 12)
    with pytest.raises(TraceError, match="MemoryUnit is 'furlongs'"):
        parse_swf(["; MemoryUnit: furlongs", record])
    with pytest.raises(TraceError, match="requested memory"):  # the bound holds in MB too
        parse_swf(["; MemoryUnit: GB", RECORD.format(id=1, submit=0, procs=1, mem=2**40, user=1)])


def test_alea_extended_columns_are_accepted_and_counted_once(tmp_path: Path) -> None:
    log = tmp_path / "alea.swf"
    log.write_text("; MaxNodes: 2\n; MaxProcs: 4\n" + records(5, " cl_zewura:x86_64 1"))
    tally = check_log(log)
    assert tally.jobs == 5
    warning = unmodelled_warning(tally, "alea.swf")
    assert warning is not None
    assert "field 12 (user) ignored in 5 jobs" in warning
    assert "fields 19 and later" in warning and "in 5 jobs" in warning
    assert "field 13" not in warning  # -1 everywhere: nothing given, nothing ignored
    code, out, err = run(
        "simulate",
        "--workload",
        f"trace:{log}",
        "--policies",
        "exclusive,sharepack",
        "--seeds",
        "2",
        "--output",
        "json",
    )
    assert code == 0, err
    assert err.count("coshare cannot model") == 1  # once per replay, not per run or job
    assert json.loads(out)["notes"] == [warning.replace("alea.swf", "trace:alea.swf")]


def test_a_plain_log_warns_about_nothing() -> None:
    tally = check_log_of("1 0 0 50 1 -1 -1 1 100 -1 1 -1 -1 -1 -1 -1 -1 -1\n")
    assert unmodelled_warning(tally, "t") is None


def check_log_of(text: str) -> object:
    from coshare.sim.traces import SwfTally, iter_swf

    tally = SwfTally()
    list(iter_swf(text.splitlines(), "t", tally))
    return tally


def test_a_log_is_parsed_once_for_every_policy_and_again_when_it_changes(
    tmp_path: Path, mocker: pytest.MockerFixture
) -> None:
    import coshare.sim.replay as replay_module

    log = tmp_path / "a.swf"
    log.write_text("; MaxNodes: 2\n; MaxProcs: 4\n" + records(30))
    parses = mocker.spy(replay_module, "iter_swf")
    args = (
        "simulate",
        "--workload",
        f"trace:{log}",
        "--policies",
        "exclusive,knapsack",
        "--output",
        "json",
    )
    code, out, err = run(*args)
    assert code == 0, err
    assert parses.call_count == 1  # the check and both runs share one parse
    first = json.loads(out)
    log.write_text("; MaxNodes: 2\n; MaxProcs: 4\n" + records(20))  # the file changed
    code, out, _ = run(*args)
    assert parses.call_count == 2 and json.loads(out) != first


def alea_log(tmp_path: Path, jobs: int) -> Path:
    """A log as Alea's extended SWF writes it: epoch submit times, field 10 the memory in
    bytes for the whole job, node lists and queue properties after field 18; 68 nodes of 80
    and 12 cores (a MetaCentrum 2013 shape)."""
    lines = []
    for k in range(jobs):
        procs = (1, 2, 4, 8, 12)[k % 5]
        memory_bytes = (1 + k % 7) * (1 << 30)  # 1-7 GiB for the whole job
        lines.append(
            f"{k + 1} {1356994800 + 60 * k} -1 {300 + 10 * k % 900} {procs} -1 -1 "
            f"{procs} 3600 {memory_bytes} 1 {1 + k % 9} 1 -1 1 -1 -1 -1 "
            "zewura1 q_2h:infiniband"
        )
    log = tmp_path / "metacentrum.swf"
    log.write_text("\n".join(lines) + "\n")
    (tmp_path / "metacentrum.swf.machines").write_text(
        "0 zewura 20 80 1 536870912\n1 minos 48 12 1 25165824\n"
    )  # 512 GiB and 24 GiB
    return log


def test_a_log_with_memory_in_bytes_per_job_is_read_so_and_said_before_the_replay(
    tmp_path: Path,
) -> None:
    log = alea_log(tmp_path, 200)
    code, out, err = run(
        "simulate", "--workload", f"trace:{log}", "--policies", "exclusive", "--output", "json"
    )
    assert code == 0, err
    assert (
        "coshare: note: trace:metacentrum.swf: 200 of 200 jobs ask more memory than any "
        "node has (524,288 MiB) with field 10 read as KB per processor (the SWF standard); "
        "read as bytes for the whole job (Alea's extended SWF), 0 do: coshare reads it "
        "so\n"
    ) in err
    data = json.loads(out)
    (run_,) = data["runs"]
    assert run_["not_run"] == 0 and run_["jobs"] == 200, run_
    assert any("Alea's extended SWF" in note for note in data["notes"])


def test_a_standard_log_whose_jobs_cannot_fit_says_how_many_before_the_replay(
    tmp_path: Path,
) -> None:
    log = tmp_path / "big.swf"
    log.write_text(records(10).replace(" 2048 1 ", " 99999999 1 ", 3))
    (tmp_path / "big.swf.machines").write_text("0 n 2 2 1 1048576\n")
    code, _, err = run("simulate", "--workload", f"trace:{log}", "--policies", "exclusive")
    assert code == 0, err
    assert (
        "coshare: note: trace:big.swf: 3 of 10 jobs ask more memory than any node has "
        "(1,024 MiB) with field 10 read as KB per processor (the SWF standard): they will "
        "not run\n"
    ) in err
