"""One cycle at a time per queue: an flock on the adapter's ``lock_file``.

systemd timers never overlap a service with itself, but cron does; two cycles interleaving
their reads and writes could place two jobs on the last free memory of one device. Both
adapters' ``cycle`` takes this lock (``condor.lock_file``, ``slurm.lock_file``); a second
cycle on the same queue exits at once with :class:`~coshare.errors.CycleBusy`. The lock is
released by the kernel when the process ends, also on SIGKILL, so it never goes stale.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from coshare.errors import ConfigError, CycleBusy


@contextmanager
def cycle_lock(path: str | None, setting: str = "lock_file") -> Iterator[None]:
    """Hold the cycle lock for the ``with`` block (no lock when ``path`` is ``None``).

    Args:
        path: the lock file.
        setting: the configuration key that names it, for messages (``slurm.lock_file``).

    Raises:
        CycleBusy: another process holds it.
        ConfigError: the lock file cannot be created.
    """
    if path is None:
        yield
        return
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ConfigError(f"{setting} {path}: cannot open ({exc.strerror})") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise CycleBusy(path) from exc
            raise ConfigError(f"{setting} {path}: cannot lock ({exc.strerror})") from exc
        yield
    finally:
        os.close(fd)
