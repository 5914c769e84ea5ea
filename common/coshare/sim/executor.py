"""Where the simulator's independent runs execute: here, in local processes, or on Dask.

A command of ``coshare simulate`` is cut into :class:`Task` s, each one independent run
(policy x seed x parameter point x workload: :mod:`coshare.sim.runs`), handed to an
executor stage by stage; the results come back as they finish (the progress bar moves) and
are put back in the tasks' order, so the tables, the JSON and the plots do not depend on
where or in which order the runs went. Two executors, one contract:

- :class:`LocalExecutor`: this process (``--workers 1``) or a pool of local processes; the
  default, with nothing to install;
- :class:`DaskExecutor`: a Dask cluster (``--executor dask``; :mod:`coshare.sim.dask_cluster`
  opens it), on this machine or as jobs of the cluster coshare serves (dask-jobqueue).

**Lost runs.** A task whose worker died (a killed process, a cancelled worker job) is run
again elsewhere, at most ``retries`` times; after that, and at once for a task that raised,
it is a :class:`Failure` naming the task, and the other results still come back. Dask's own
retries on a dead worker are switched off where coshare starts the scheduler
(``distributed.scheduler.allowed-failures`` 0) so that ``--retries`` is the one count; a
scheduler given by address keeps its own setting on top.
"""

from __future__ import annotations

import contextlib
import itertools
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from coshare.ledger.bounds import shorten_text
from coshare.sim.runs import Done, Failure, Results, Task


def _reason(exc: BaseException) -> str:
    """An exception as one bounded line of a message."""
    text = str(exc) or type(exc).__name__
    return shorten_text(
        f"{type(exc).__name__}: {text}"
        if type(exc).__module__ != "coshare" and not type(exc).__module__.startswith("coshare.")
        else text
    )


def _cancelled(future: Any) -> str:
    """Why Dask cancelled a task's future: most often, the scheduler went away (every task
    in flight is cancelled then, and ``future.exception()`` says nothing)."""
    try:
        future.result()
    except CancelledError as exc:
        reason = str(getattr(exc, "reason", "") or "unknown")
        if reason == "scheduler-connection-lost":
            return "lost the connection to the Dask scheduler"
        if reason == "unknown":  # what a scheduler that stops gives
            return "cancelled by the Dask scheduler (no reason given: was it stopped?)"
        return f"cancelled by the Dask scheduler ({shorten_text(reason)})"
    except Exception as exc:
        return _reason(exc)
    return "cancelled by Dask"


def _lost(name: str, tries: int) -> Failure:
    return Failure(
        name, f"its worker died {tries} time{'s' if tries != 1 else ''} (retries exhausted)"
    )


class LocalExecutor:
    """Tasks in this process (``workers`` 1) or in a pool of ``workers`` local processes.

    A pool keeps at most ``workers`` tasks in flight. When a worker process dies, Python's
    pool breaks and every task in flight is lost with it, and which one killed it cannot be
    told: a task lost alone is charged one try; tasks lost together are each run again alone
    (a pool of one), where a death is surely theirs, so a task that kills its worker never
    uses up the tries of the tasks beside it. Tasks not yet started are never charged.
    """

    def __init__(self, workers: int = 1, retries: int = 2) -> None:
        self.workers = workers
        self.retries = retries

    def share(self, value: Any) -> Any:
        return value

    def run(self, tasks: Sequence[Task], done: Done | None = None) -> Results:
        results = Results([None] * len(tasks), {})
        if self.workers <= 1:
            for i, task in enumerate(tasks):
                try:
                    results.values[i] = task.fn(*task.args)
                except Exception as exc:  # a task's error is reported, not raised
                    results.failed[i] = Failure(task.name, _reason(exc))
                if done is not None:
                    done(i)
            return results
        tries = [0] * len(tasks)
        todo = list(range(len(tasks)))
        suspects: list[int] = []  # lost together with others: each runs alone next
        while todo or suspects:
            alone = not todo
            batch, width = (todo, self.workers) if todo else ([suspects.pop(0)], 1)
            ran, unstarted = self._pool_round(tasks, batch, results, done, width)
            todo = unstarted
            if len(ran) > 1 and not alone:
                suspects += ran
                continue
            for i in ran:
                tries[i] += 1
                if tries[i] > self.retries:
                    results.failed[i] = _lost(tasks[i].name, tries[i])
                    if done is not None:
                        done(i)
                else:
                    (suspects if alone else todo).append(i)
        return results

    def _pool_round(
        self,
        tasks: Sequence[Task],
        todo: list[int],
        results: Results,
        done: Done | None,
        width: int,
    ) -> tuple[list[int], list[int]]:
        """Run ``todo`` in one pool of ``width`` processes until it is done or the pool
        breaks; the tasks lost in flight, and those never started."""
        waiting = iter(todo)
        flight: dict[Future[Any], int] = {}
        ran: list[int] = []
        with ProcessPoolExecutor(max_workers=width) as pool:
            for i in itertools.islice(waiting, width):
                flight[pool.submit(tasks[i].fn, *tasks[i].args)] = i
            while flight:
                finished, _ = wait(flight, return_when=FIRST_COMPLETED)
                for future in finished:
                    i = flight.pop(future)
                    try:
                        results.values[i] = future.result()
                    except BrokenProcessPool:
                        ran.append(i)
                        continue
                    except Exception as exc:
                        results.failed[i] = Failure(tasks[i].name, _reason(exc))
                    if done is not None:
                        done(i)
                if ran:  # the pool is broken: whatever is in flight is lost too
                    ran += list(flight.values())
                    return sorted(ran), list(waiting)
                for i in itertools.islice(waiting, len(finished)):
                    flight[pool.submit(tasks[i].fn, *tasks[i].args)] = i
        return [], []


class DaskExecutor:
    """Tasks on a Dask cluster through ``client`` (a ``distributed.Client``).

    Each task is one Dask task with its own key (unique to this executor: commands may share
    a scheduler); a task that ends in ``KilledWorker`` (its worker died while running it) is
    submitted again under a new key, at most ``retries`` times. When the scheduler has had no
    worker at all for ``worker_timeout_s`` (every worker job cancelled or ended, none
    replaced), the tasks not done fail, named, instead of waiting for ever.
    """

    #: Seconds between two looks at the scheduler's workers while nothing finishes.
    POLL_S = 0.2
    CHECK_WORKERS_S = 1.0

    def __init__(
        self,
        client: Any,
        retries: int = 2,
        worker_timeout_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.retries = retries
        self.worker_timeout_s = worker_timeout_s
        self.clock = clock
        self._stage = itertools.count()
        # Keys name results on the scheduler: another command sharing it (a second sweep on
        # the same --dask-scheduler) must never be handed this one's results, or these its.
        self._token = uuid.uuid4().hex

    def share(self, value: Any) -> Any:
        # One copy per worker that needs it, instead of one in every task's arguments.
        return self.client.scatter(value, broadcast=True, hash=False)

    def run(self, tasks: Sequence[Task], done: Done | None = None) -> Results:
        from distributed import as_completed
        from distributed.scheduler import KilledWorker

        stage = next(self._stage)
        results = Results([None] * len(tasks), {})
        tries = [0] * len(tasks)

        def submit(i: int) -> Any:
            task = tasks[i]
            key = f"coshare-sim-{self._token}-{stage}-{i}-{tries[i]}"
            return self.client.submit(task.fn, *task.args, pure=False, key=key)

        index: dict[str, int] = {}
        futures: dict[str, Any] = {}
        for i in range(len(tasks)):
            future = submit(i)
            index[future.key] = i
            futures[future.key] = future
        pending = as_completed(list(futures.values()), loop=self.client.loop)  # type: ignore[no-untyped-call]
        watch = _WorkerWatch(self.client, self.worker_timeout_s, self.clock, self.CHECK_WORKERS_S)
        while not pending.is_empty():  # type: ignore[no-untyped-call]
            batch = pending.next_batch(block=False)  # type: ignore[no-untyped-call]
            if not batch:
                if watch.gone_too_long():
                    self._abandon(tasks, index, futures, results, done)
                    break
                time.sleep(self.POLL_S)
                continue
            for future in batch:
                i = index.pop(future.key)
                futures.pop(future.key, None)
                if future.status == "finished":
                    results.values[i] = future.result()
                    future.release()
                elif future.status == "cancelled":  # no exception to tell: say why Dask gave up
                    results.failed[i] = Failure(tasks[i].name, _cancelled(future))
                else:
                    exc = future.exception()
                    if exc is None:
                        # Not an error after all: it had finished, its result was lost with
                        # its worker before it was gathered ("lost"), and Dask computed it
                        # again while this client held the future (exception() waited for it).
                        results.values[i] = future.result()
                        future.release()
                        if done is not None:
                            done(i)
                        continue
                    future.release()
                    if isinstance(exc, KilledWorker):
                        tries[i] += 1
                        if tries[i] <= self.retries:
                            again = submit(i)
                            index[again.key] = i
                            futures[again.key] = again
                            pending.add(again)  # type: ignore[no-untyped-call]
                            continue
                        results.failed[i] = _lost(tasks[i].name, tries[i])
                    else:
                        results.failed[i] = Failure(tasks[i].name, _reason(exc))
                if done is not None:
                    done(i)
        return results

    def _abandon(
        self,
        tasks: Sequence[Task],
        index: dict[str, int],
        futures: dict[str, Any],
        results: Results,
        done: Done | None,
    ) -> None:
        """Fail every task not done: no worker is left to run them."""
        with contextlib.suppress(Exception):  # the scheduler may be going too
            self.client.cancel(list(futures.values()))
        reason = (
            f"no Dask worker left for {self.worker_timeout_s:g} s (sim.worker_timeout_s): "
            "every worker died or its job was cancelled"
        )
        for i in sorted(index.values()):
            results.failed[i] = Failure(tasks[i].name, reason)
            if done is not None:
                done(i)


class _WorkerWatch:
    """Whether the scheduler has had no worker for longer than ``timeout_s`` (asked at most
    every ``every_s``)."""

    def __init__(
        self, client: Any, timeout_s: float, clock: Callable[[], float], every_s: float
    ) -> None:
        self.client = client
        self.timeout_s = timeout_s
        self.clock = clock
        self.every_s = every_s
        self.checked_at: float | None = None
        self.empty_since: float | None = None

    def gone_too_long(self) -> bool:
        now = self.clock()
        if self.checked_at is not None and now - self.checked_at < self.every_s:
            return self.empty_since is not None and now - self.empty_since > self.timeout_s
        self.checked_at = now
        try:
            workers = self.client.scheduler_info().get("workers", {})
        except Exception:  # the scheduler itself is gone: Dask cancels the tasks, they end
            return False
        if workers:
            self.empty_since = None
        elif self.empty_since is None:
            self.empty_since = now
        return self.empty_since is not None and now - self.empty_since > self.timeout_s
