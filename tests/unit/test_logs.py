"""The one logging set-up of the long-running commands (coshare.cli.logs): text and JSON lines,
structured fields, rotation like HTCondor's daemon logs, and ``--log-format`` on ``cycle``."""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner
from coshare.cli.logs import CONDOR_DATE_FORMAT, MAX_LOG_BYTES, setup_logging
from coshare.cli.scheduler import scheduler_group
from coshare.model import Device, Job, Node, Plan, Snapshot
from coshare.ports import ApplyReport, JobOutcome, Rejected, SourceResult


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_json_lines_carry_time_level_logger_message_and_the_fields() -> None:
    out = io.StringIO()
    setup_logging("json", logging.INFO, stream=out)
    log = logging.getLogger("coshare.test")
    log.info(
        "placed %d jobs",
        3,
        extra={
            "job": "12.0",
            "phase": "apply",
            "seconds": 0.25,
            "jobs": ("1", "2"),
            "nan": float("nan"),
        },
    )
    log.debug("not written")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("failed", extra={"level": "forged", "time": "forged", "logger": "forged"})
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["time"].endswith("Z") and len(first["time"]) == len("2025-01-31T12:00:00.123Z")
    assert {k: first[k] for k in ("level", "logger", "message", "job", "phase", "seconds")} == {
        "level": "info",
        "logger": "coshare.test",
        "message": "placed 3 jobs",
        "job": "12.0",
        "phase": "apply",
        "seconds": 0.25,
    }
    assert first["jobs"] == ["1", "2"] and first["nan"] == "nan" and first["pid"] == os.getpid()
    # A field cannot pass for the record's own level, logger or time; the traceback is kept.
    assert (second["level"], second["logger"]) == ("error", "coshare.test")
    assert second["message"] == "failed" and second["time"] != "forged"
    assert "RuntimeError: boom" in second["exception"]


def test_text_lines_append_the_fields_and_keep_a_traceback_below() -> None:
    out = io.StringIO()
    setup_logging("text", logging.INFO, text_format="%(levelname)s %(message)s", stream=out)
    logging.getLogger("x").warning("slow", extra={"phase": "read", "seconds": 2})
    try:
        raise ValueError("bad")
    except ValueError:
        logging.getLogger("x").exception("oops", extra={"job": "7"})
    lines = out.getvalue().splitlines()
    assert lines[0] == "WARNING slow [phase=read seconds=2]"
    assert lines[1] == "ERROR oops [job=7]" and lines[-1] == "ValueError: bad"


def test_a_log_file_is_rotated_into_one_old_file_like_htcondors(tmp_path: Path) -> None:
    path = tmp_path / "CoshareTriggerLog"
    setup_logging(
        "text",
        logging.INFO,
        text_format="%(asctime)s %(message)s",
        date_format=CONDOR_DATE_FORMAT,
        file=path,
    )
    log = logging.getLogger("coshare.rotate")
    line = "x" * 1000
    for _ in range(MAX_LOG_BYTES // 1000 + 10):
        log.info(line)
    assert (tmp_path / "CoshareTriggerLog.old").stat().st_size > MAX_LOG_BYTES - 2000
    assert 0 < path.stat().st_size < 1_000_000
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "CoshareTriggerLog",
        "CoshareTriggerLog.old",
    ]
    stamp = path.read_text().split(" ")[:2]  # 01/31/25 12:00:00, as HTCondor's daemons write
    assert len(stamp[0]) == 8 and stamp[0][2] == "/" and len(stamp[1]) == 8


def test_setting_up_twice_leaves_one_handler_of_ours_and_others_alone() -> None:
    other = logging.StreamHandler(io.StringIO())
    logging.getLogger().addHandler(other)
    setup_logging("text", logging.INFO, stream=io.StringIO())
    setup_logging("json", logging.INFO, stream=io.StringIO())
    ours = [h for h in logging.getLogger().handlers if h.get_name() == "coshare"]
    assert len(ours) == 1 and other in logging.getLogger().handlers


class OneJob:
    """A stand-in adapter: one job placed, one refused, one failed."""

    def read(self) -> SourceResult:
        node = Node("n1", 4000, 8192, (Device("0", 8192, 240),))
        snapshot = Snapshot((node,), pending=(Job("7", 1024, 60),), now_s=0.0)
        return SourceResult(snapshot, (Rejected("8", "job 8: bad"),), (), ("check n2",))

    def apply(self, plan: Plan, rejected: Sequence[Rejected], *, dry_run: bool) -> ApplyReport:
        return ApplyReport(applied=("7",), failed=(JobOutcome("9", "schedd said no"),))


def test_cycle_logs_json_lines_on_standard_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("coshare.config.DEFAULT_CONFIG_PATH", tmp_path / "absent.yaml")
    for var in [v for v in os.environ if v.startswith("COSHARE_")]:
        monkeypatch.delenv(var)
    group = scheduler_group(
        "fake", "", lambda config: OneJob(), lambda config: str(tmp_path / "lock")
    )
    result = CliRunner().invoke(group, ["cycle", "--log-format", "json"])
    assert result.exit_code == 3, result.output  # one write failed
    assert "cycle (sharepack): 1 pending, 1 placed, wrote 1" in result.stdout
    records = [json.loads(line) for line in result.stderr.splitlines()]  # every line is JSON
    cycle = next(r for r in records if r["message"].startswith("cycle done"))
    assert cycle["logger"] == "coshare.cycle" and cycle["scheduler"] == "fake"
    assert cycle["placed"] == 1 and cycle["refused"] == 1 and cycle["status"] == 3
    assert cycle["edits"]["failed"] == 1 and cycle["waiting"]["no_room"] == 0
    assert set(cycle["seconds"]) == {"read", "plan", "verify", "apply"}
    by_job = {r["job"]: r for r in records if "job" in r}
    assert by_job["8"]["outcome"] == "refused" and by_job["9"]["outcome"] == "failed"
    assert any(r["level"] == "warning" and r["message"] == "check n2" for r in records)


def test_a_failed_cycle_in_json_mode_says_so_in_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from coshare.errors import SchedulerUnavailable

    monkeypatch.setattr("coshare.config.DEFAULT_CONFIG_PATH", tmp_path / "absent.yaml")

    class Down(OneJob):
        def read(self) -> SourceResult:
            raise SchedulerUnavailable("cannot query the collector: down")

    group = scheduler_group(
        "fake", "", lambda config: Down(), lambda config: str(tmp_path / "lock")
    )
    result = CliRunner().invoke(group, ["cycle", "--log-format", "json"])
    assert result.exit_code == 1
    (record,) = [json.loads(line) for line in result.stderr.splitlines()]
    assert record["level"] == "error" and record["status"] == 1
    assert record["message"] == "cycle failed: cannot query the collector: down"
