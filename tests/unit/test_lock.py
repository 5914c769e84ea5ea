"""One cycle at a time per queue (coshare.system.lock), for both adapters."""

from __future__ import annotations

from pathlib import Path

import pytest
from coshare.errors import ConfigError, CoshareError, CycleBusy
from coshare.system.lock import cycle_lock


def test_second_holder_is_told_busy_and_the_lock_frees(tmp_path: Path) -> None:
    path = str(tmp_path / "run" / "cycle.lock")
    with cycle_lock(path), pytest.raises(CycleBusy, match="this one did nothing"), cycle_lock(path):
        pass
    assert issubclass(CycleBusy, CoshareError) and CycleBusy(path).exit_status == 0
    with cycle_lock(path):
        pass


def test_no_lock_file_means_no_lock() -> None:
    with cycle_lock(None), cycle_lock(None):
        pass


def test_unusable_path_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with (
        pytest.raises(ConfigError, match=r"slurm\.lock_file"),
        cycle_lock(str(tmp_path / "file" / "x.lock"), "slurm.lock_file"),
    ):
        pass
