"""The subprocess choke point: argument lists, timeouts, structured failures."""

from __future__ import annotations

import sys

import pytest
from coshare.errors import CommandFailed, ProgramNotFound
from coshare.system.programs import run


def test_success_returns_output() -> None:
    result = run([sys.executable, "-c", "print('hi; rm -rf /')"], timeout_s=30)
    assert result.returncode == 0 and result.stdout == "hi; rm -rf /\n"


def test_arguments_are_never_interpreted_by_a_shell() -> None:
    result = run(
        [sys.executable, "-c", "import sys; print(sys.argv[1])", "$(echo x); `id`"], timeout_s=30
    )
    assert result.stdout.strip() == "$(echo x); `id`"


def test_failure_raises_with_status_and_output() -> None:
    with pytest.raises(CommandFailed) as info:
        run(
            [sys.executable, "-c", "import sys; sys.stderr.write('boom\\n'); sys.exit(4)"],
            timeout_s=30,
        )
    assert info.value.returncode == 4 and "boom" in info.value.stderr and "boom" in str(info.value)
    assert (
        run([sys.executable, "-c", "raise SystemExit(4)"], timeout_s=30, check=False).returncode
        == 4
    )


def test_timeout_and_missing_program() -> None:
    with pytest.raises(CommandFailed, match="timed out") as info:
        run([sys.executable, "-c", "import time; time.sleep(5)"], timeout_s=0.2)
    assert info.value.returncode is None
    with pytest.raises(ProgramNotFound) as missing:
        run(["/no/such/program"], timeout_s=1)
    # a missing program is said as such, never as a time-out
    assert str(missing.value) == "cannot run /no/such/program: no such file or directory"
    assert isinstance(missing.value, CommandFailed) and missing.value.returncode is None
    assert "timed out" not in str(missing.value)
    hinted = missing.value.with_hint("set x.bin_dir")
    assert str(hinted) == "cannot run /no/such/program: no such file or directory; set x.bin_dir"


def test_input_text_is_passed_on_stdin() -> None:
    result = run(
        [sys.executable, "-c", "import sys; print(sys.stdin.read().upper())"],
        timeout_s=30,
        input_text="abc",
    )
    assert result.stdout.strip() == "ABC"
