"""The command line's process set-up for array work (coshare.system.arrays): glibc's heap
serves the planner's temporaries, OpenBLAS runs one thread, and an admin's settings win."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from coshare.system import arrays
from pytest_mock import MockerFixture

ROOT = Path(__file__).resolve().parents[2]


def _cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "common"), str(ROOT)])
    env.update(extra)
    return env


def _threads_seen(env: dict[str, str]) -> str:
    code = "import os, coshare.cli; print(os.environ['OPENBLAS_NUM_THREADS'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_command_line_runs_one_blas_thread_unless_the_admin_says() -> None:
    assert _threads_seen(_cli_env()) == "1"
    assert _threads_seen(_cli_env(OPENBLAS_NUM_THREADS="4")) == "4"


def test_the_heap_thresholds_are_set_on_glibc(
    mocker: MockerFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    mocker.patch.object(arrays, "_glibc", return_value=True)
    libc = mocker.patch("ctypes.CDLL").return_value
    arrays.set_up()
    libc.mallopt.assert_any_call(-3, arrays.MMAP_THRESHOLD)
    libc.mallopt.assert_any_call(-1, arrays.TRIM_THRESHOLD)
    assert libc.mallopt.call_count == 2


def test_an_admins_heap_thresholds_are_kept(
    mocker: MockerFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    mocker.patch.object(arrays, "_glibc", return_value=True)
    libc = mocker.patch("ctypes.CDLL").return_value
    arrays.set_up()
    libc.mallopt.assert_called_once_with(-1, arrays.TRIM_THRESHOLD)


def test_nothing_is_called_without_glibc(mocker: MockerFixture) -> None:
    mocker.patch.object(arrays, "_glibc", return_value=False)
    cdll = mocker.patch("ctypes.CDLL")
    arrays.set_up()
    cdll.assert_not_called()


def test_this_linux_is_recognised_as_glibc_or_not() -> None:
    # the answer must agree with the C library Python itself reports
    import platform

    assert arrays._glibc() == (platform.libc_ver()[0] == "glibc")
