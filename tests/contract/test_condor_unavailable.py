"""A pool that cannot be reached: the real bindings against a port where nothing listens give
one clear message and exit status 1, after the configured retries (instant: injected sleep)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner
from coshare.cli.main import cli
from coshare.config import CondorConfig
from coshare.errors import SchedulerUnavailable

from condor_addon.client import open_client


def closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"  # closed again when the block ends


def test_collector_down_is_retried_then_reported() -> None:
    slept: list[float] = []
    where = closed_port()
    client = open_client(
        CondorConfig(collector=where, retry_attempts=3, retry_wait_s=2.5), sleep=slept.append
    )
    with pytest.raises(
        SchedulerUnavailable, match=f"cannot query the collector {where} after 3 attempts"
    ):
        client.slot_ads()
    assert slept == [2.5, 2.5]


def test_cycle_with_the_collector_down_exits_1_with_one_message(tmp_path: Path) -> None:
    where = closed_port()
    (tmp_path / "config.yaml").write_text(
        f"cycle: {{replan_after_s: 60}}\ncondor: {{lock_file: {tmp_path / 'cycle.lock'}}}\n"
    )
    result = CliRunner().invoke(
        cli,
        ["condor", "cycle"],
        env={
            "COSHARE_CONDOR_COLLECTOR": where,
            "COSHARE_CONDOR_RETRY_ATTEMPTS": "1",
            "COSHARE_CONFIG": str(tmp_path / "config.yaml"),
        },
    )
    assert result.exit_code == 1
    assert f"coshare: error: cannot query the collector {where} after 1 attempts" in result.output
    assert "Traceback" not in result.output
