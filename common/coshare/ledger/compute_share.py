"""A running job's declared device demand where it declared a compute share
(``CoshareDeviceCompute``) instead of device threads: the same threads its plan reserved.

:func:`coshare.ledger.book.declared_demand` reads a running job's declared memory and threads; a
job that declared a share has no threads to read. :func:`running_demand` turns the share into
threads of the largest device the caller names (the cluster's, as planning did; or the
node's, where only that is known: a share of the very devices it runs on), and leaves every
other job to :func:`~coshare.ledger.book.declared_demand`.

Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from coshare.errors import AnnotationError
from coshare.ledger.annotations import ClusterLimits, parse_job, squash
from coshare.ledger.book import declared_demand
from coshare.model import Device

#: The squashed spellings of the keys a running job's device demand is read from.
_MEMORY, _THREADS, _COMPUTE = "devicememory", "devicethreads", "devicecompute"


def running_demand(
    job_id: str, annotations: Mapping[str, object], devices: Iterable[Device]
) -> tuple[int, int] | None:
    """A running job's declared device memory and threads per device, or ``None`` when its
    declaration cannot be read; a compute share counts as threads of the largest of
    ``devices`` (:func:`coshare.ledger.annotations.compute_threads`)."""
    keys = {
        k: v
        for k, v in annotations.items()
        if squash(k) in (_MEMORY, _THREADS, _COMPUTE) and v not in (None, "")
    }
    if not any(squash(k) == _COMPUTE for k in keys):
        return declared_demand(job_id, annotations)
    largest = list(devices)
    limits = ClusterLimits(
        device_memory_mib=max((d.memory_mib for d in largest), default=0),
        device_threads=max((d.threads for d in largest), default=0),
        devices_per_node=len(largest),
        cpu_milli=0,
        memory_mib=0,
    )
    try:
        job = parse_job(job_id, keys, limits=limits if limits.device_memory_mib else None)
    except AnnotationError:
        return None
    return job.device_memory_mib, job.device_threads
