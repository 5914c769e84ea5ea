"""How a command-line process is set up for the planner's array work.

The policies work on whole-cluster arrays (a chunk of jobs by every candidate device, a table
per device group): many temporaries of one to a few tens of MiB, made and dropped thousands of
times a cycle. Two process defaults make that cost more than the arithmetic:

- glibc hands out every block above its mmap threshold (128 KiB at start) as fresh pages and
  unmaps it when freed, so each temporary page-faults anew: a fifth of ``coshare plan``'s CPU
  time on a busy 10,000-device cluster went to the kernel. Blocks up to
  :data:`MMAP_THRESHOLD` now come from the heap and are reused; at most
  :data:`TRIM_THRESHOLD` of free heap is kept.
- OpenBLAS starts a thread per core at numpy's import, and the threads spin: 0.06 CPU s of a
  plan that reads nothing, on a 2-core machine. The planner's products are small
  matrix-vector ones; one thread does them.

An admin's own ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or
``OPENBLAS_NUM_THREADS`` is kept. The plan figures of bench/grid.py are taken with it.
"""

from __future__ import annotations

import os

#: Largest block the C heap serves itself (above: its own pages).
MMAP_THRESHOLD = 32 * 1024 * 1024
#: Free memory at the heap's top kept for the next temporaries.
TRIM_THRESHOLD = 64 * 1024 * 1024
#: glibc's ``mallopt`` parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def set_up() -> None:
    """Set the process up as the module's docstring says; before numpy is imported."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if not _glibc():
        return
    import ctypes  # only where glibc's mallopt is there to call

    libc = ctypes.CDLL(None)
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    if "MALLOC_TRIM_THRESHOLD_" not in os.environ:
        libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)


def _glibc() -> bool:
    """Whether this process runs on glibc (musl and other platforms have no such knobs)."""
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (AttributeError, ValueError, OSError):
        return False
