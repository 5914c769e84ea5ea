"""The distributed allocation protocol (sections 3-4): one domain manager's state machine.

A gang (a job whose tasks need ``cores`` cores at once) is submitted at its *home* domain.
If the home has the cores free and knows of no other request, it takes them at once with no
message (section 3: jobs one domain can hold are decided locally). Otherwise the home asks
every domain over a spanning tree (:mod:`coshare.alloc.propagation`) for the job's *whole*
core count (the paper's greedy request, section 4.2), each domain commits what it can and
answers the home, more whenever cores come free (*incremental commit*), and once the answers
cover the job the home picks the cores (its own first, then in the order the answers came)
and sends a *spawn* along the request's path: the chosen cores are held, every other
reservation for the job is *released*.

Every domain keeps a *wait queue* of the requests it knows in the global order and commits
its free cores to them head first. Two policies keep this from deadlocking (Fig. 2: two
jobs each holding half of what they need):

- ``cancel`` (**active cancellation**, 4.2): the order is (submission time stamp, home id,
  job id). When a request enters a home's queue, the home cancels every request of its own
  that is lower and not yet spawned: a cancel follows the lower request's path, each domain
  releases what it reserved for it and the request waits, BLOCKED. A home (re)sends its
  request only while it is the head of its own queue, so a request never goes out while the
  home knows a higher one; the resent request is a new *attempt* and answers to an older one
  are dropped. The highest request is then never blocked and every lower reservation in its
  way is eventually cancelled: no deadlock, and the oldest job is never starved.
- ``sequencer`` (atomic broadcast, 4.3): every home sends its request to one elected domain
  (the layout's centre); the sequencer numbers the requests in the order it handles them and
  propagates them over its own tree, so every domain sees them in the same order (links are
  first in, first out) and no cancellation is needed. The spawn goes back through the
  sequencer (the request's path).

A manager is pure: :meth:`Manager.handle` takes one message and returns what it sends
(:class:`Effects`); the simulator (:mod:`coshare.sim.picaso`) delivers them. Bookings go
through a :class:`~coshare.alloc.store.ReservationStore`.

Rules the paper leaves open, and coshare's choice: a request is never sent while the home
knows a higher one (without it a late low request can hold cores a known higher one waits
for, and nothing would cancel it); a blocked request is resent when it is the head of its
home's queue; answers carry the attempt; the spawn uses the home's cores first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from coshare.alloc.layout import Layout
from coshare.alloc.propagation import Propagation
from coshare.alloc.store import ReservationStore

AllocPolicy = Literal["cancel", "sequencer"]
#: The two deadlock-avoidance policies (section 4): active cancellation and the sequencer.
POLICIES: tuple[AllocPolicy, ...] = ("cancel", "sequencer")
Kind = Literal["request", "response", "spawn", "cancel", "submit", "launch", "complete"]
#: Messages between domains (section 4.1). ``launch`` (a submission at the home) and
#: ``complete`` (a job's end, the paper's timer) are local events, not messages.
MESSAGE_KINDS: tuple[Kind, ...] = ("request", "response", "spawn", "cancel", "submit")
Order = tuple[int, int, str]
#: The largest core count and time a gang may give (absurd sizes are refused).
MAX_GANG_CORES = 10_000_000
MAX_TIME_UNITS = 10**12


@dataclass(frozen=True)
class Gang:
    """A job whose ``cores`` tasks must all start at once.

    Attributes:
        id: unique job id.
        home: the domain where it is submitted (index into the layout).
        cores: cores it needs in all.
        submit: submission time stamp (time units).
        run: run time once spawned (time units).
    """

    id: str
    home: int
    cores: int
    submit: int = 0
    run: int = 1

    @property
    def order(self) -> Order:
        """Its place in the global order: time stamp, then home id (section 5), then id."""
        return (self.submit, self.home, self.id)


@dataclass(frozen=True)
class Refusal:
    """A gang the protocol will not start: ``invalid`` (a field out of range) or
    ``never_fits`` (wider than all domains together), with a message naming job and field."""

    job: str
    code: Literal["invalid", "never_fits"]
    message: str


def check_gang(job: Gang, layout: Layout) -> Refusal | None:
    """Why ``job`` cannot be allocated on ``layout`` at all, or ``None``."""
    fields: list[tuple[str, object, str]] = []
    if not 0 <= job.home < layout.size:
        fields.append(("home", job.home, f"a domain index 0..{layout.size - 1}"))
    if not 1 <= job.cores <= MAX_GANG_CORES:
        fields.append(("cores", job.cores, f"1..{MAX_GANG_CORES}"))
    for key, units in (("submit", job.submit), ("run", job.run)):
        if not 0 <= units <= MAX_TIME_UNITS:
            fields.append((key, units, f"0..{MAX_TIME_UNITS} time units"))
    if fields:
        name, value, allowed = fields[0]
        return Refusal(job.id, "invalid", f"job {job.id}: {name} is {value}; allowed {allowed}")
    if job.cores > layout.total_cores:
        return Refusal(
            job.id,
            "never_fits",
            f"job {job.id}: asks for {job.cores} cores; all {layout.size} domains "
            f"together have {layout.total_cores} (never_fits)",
        )
    return None


@dataclass(frozen=True)
class Message:
    """One message (or local event) to domain ``dst``.

    ``attempt`` numbers a home's requests for one job (cancel and answers name it),
    ``root`` is the source of a tree propagation, ``order`` the request's place in the
    queues, ``cores`` what a response commits, ``use`` the spawn's chosen cores per domain.
    """

    kind: Kind
    job: Gang
    src: int
    dst: int
    attempt: int = 0
    root: int = -1
    order: Order = (0, 0, "")
    cores: tuple[str, ...] = ()
    use: tuple[tuple[int, tuple[str, ...]], ...] = ()


@dataclass
class Effects:
    """What handling one message did: messages sent, jobs spawned (decided at their home,
    with the cores used per domain), jobs now running on this domain's cores, requests
    cancelled."""

    sends: list[Message] = field(default_factory=list)
    spawned: list[tuple[Gang, tuple[tuple[int, tuple[str, ...]], ...]]] = field(
        default_factory=list
    )
    running: list[Gang] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)


@dataclass
class _Entry:
    job: Gang
    order: Order
    attempt: int
    active: bool


@dataclass
class Own:
    """A job submitted at this domain: its state, attempt, the cores committed to the
    current attempt per domain, and how often it was cancelled."""

    job: Gang
    state: Literal["blocked", "requested", "spawned"] = "blocked"
    attempt: int = 0
    commits: dict[int, list[str]] = field(default_factory=dict)
    cancels: int = 0
    local: bool = False


class Manager:
    """One domain's manager (the paper's micro-kernel running Algorithm 1).

    Args:
        domain: its index in the layout.
        layout: all domains.
        store: where bookings go (shared by all managers, each writing its own domain).
        trees: the propagation pattern's spanning trees.
        policy: ``cancel`` or ``sequencer``.
        sequencer: the sequencer's domain (``sequencer`` policy).
    """

    def __init__(
        self,
        domain: int,
        layout: Layout,
        store: ReservationStore,
        trees: Propagation,
        policy: AllocPolicy,
        sequencer: int,
    ) -> None:
        self.domain = domain
        self.layout = layout
        self.store = store
        self.trees = trees
        self.policy = policy
        self.sequencer = sequencer
        self.queue: dict[str, _Entry] = {}
        self.own: dict[str, Own] = {}
        self.done: set[str] = set()
        self._numbered = 0

    # -- the one entry point ------------------------------------------------------------
    def handle(self, msg: Message) -> Effects:
        """Handle one message or local event; return what it causes."""
        out = Effects()
        if msg.kind == "launch":
            self._launch(msg.job, out)
        elif msg.kind == "submit":
            self._submit(msg.job, out)
        elif msg.kind == "request":
            self._forward(msg, out)
            self._request(msg.job, msg.attempt, msg.order, out)
        elif msg.kind == "response":
            own = self.own.get(msg.job.id)
            if own and own.state == "requested" and own.attempt == msg.attempt:
                own.commits.setdefault(msg.src, []).extend(msg.cores)
        elif msg.kind == "cancel":
            self._forward(msg, out)
            entry = self.queue.get(msg.job.id)
            if entry and entry.attempt == msg.attempt and msg.job.id not in self.done:
                entry.active = False
                self.store.release(self.domain, msg.job.id)
        elif msg.kind == "spawn":
            self._forward(msg, out)
            self._spawned(msg.job, dict(msg.use), out)
        elif msg.kind == "complete":
            self.store.release(self.domain, msg.job.id)
        self._settle(out)
        return out

    # -- handlers -----------------------------------------------------------------------
    def _launch(self, job: Gang, out: Effects) -> None:
        own = self.own[job.id] = Own(job)
        free = self.store.free(self.domain)
        if not self.queue and job.cores <= len(free):
            # Section 3: a job its home can hold is decided locally, with no message.
            own.local = True
            self.store.reserve(self.domain, job.id, free[: job.cores])
            own.commits = {self.domain: list(free[: job.cores])}
            self._spawn(own, out)
            return
        if self.policy == "sequencer":
            own.state, own.attempt = "requested", 1
            if self.domain == self.sequencer:
                self._submit(job, out)
            else:
                out.sends.append(Message("submit", job, self.domain, self.sequencer))
            return
        # Active cancellation: wait in the home's own queue; _settle sends it when it is
        # the head (at once unless the home knows a higher request).
        self.queue[job.id] = _Entry(job, job.order, 0, active=False)

    def _submit(self, job: Gang, out: Effects) -> None:
        """At the sequencer: number the request and propagate it over the sequencer's tree."""
        self._numbered += 1
        order = (self._numbered, self.sequencer, job.id)
        msg = Message("request", job, self.domain, self.domain, 1, self.domain, order)
        self._forward(msg, out)
        self._request(job, 1, order, out)

    def _request(self, job: Gang, attempt: int, order: Order, out: Effects) -> None:
        if job.id in self.done:
            return
        entry = self.queue.get(job.id)
        if entry and entry.attempt > attempt:
            return  # a stale attempt
        self.queue[job.id] = _Entry(job, order, attempt, active=True)
        if self.policy == "cancel":
            # Section 4.2: a higher request cancels this home's lower requests.
            for own in self.own.values():
                if own.state == "requested" and own.job.id != job.id and own.job.order > order:
                    self._cancel(own, out)

    def _cancel(self, own: Own, out: Effects) -> None:
        own.state, own.commits = "blocked", {}
        own.cancels += 1
        self.queue[own.job.id].active = False
        self.store.release(self.domain, own.job.id)
        out.cancelled.append(own.job.id)
        msg = Message("cancel", own.job, self.domain, self.domain, own.attempt, self.domain)
        self._forward(msg, out)

    def _spawned(self, job: Gang, use: dict[int, tuple[str, ...]], out: Effects) -> None:
        if job.id in self.done:
            return
        self.done.add(job.id)
        self.queue.pop(job.id, None)
        mine = use.get(self.domain, ())
        self.store.hold(self.domain, job.id, mine)
        if mine:
            out.running.append(job)

    def _spawn(self, own: Own, out: Effects) -> None:
        """The home has enough: choose the cores (its own first, then in answer order) and
        send the spawn along the request's path."""
        need = own.job.cores
        use: list[tuple[int, tuple[str, ...]]] = []
        order = sorted(own.commits, key=lambda d: d != self.domain)  # stable: answer order
        for domain in order:
            take = tuple(own.commits[domain][:need])
            if take:
                use.append((domain, take))
                need -= len(take)
            if need == 0:
                break
        own.state = "spawned"
        out.spawned.append((own.job, tuple(use)))
        self._spawned(own.job, dict(use), out)
        if own.local:
            return
        if self.policy == "sequencer" and self.domain != self.sequencer:
            out.sends.append(
                Message(
                    "spawn",
                    own.job,
                    self.domain,
                    self.sequencer,
                    own.attempt,
                    self.sequencer,
                    use=tuple(use),
                )
            )
        else:
            root = self.sequencer if self.policy == "sequencer" else self.domain
            msg = Message(
                "spawn", own.job, self.domain, self.domain, own.attempt, root, use=tuple(use)
            )
            self._forward(msg, out)

    # -- helpers ------------------------------------------------------------------------
    def _forward(self, msg: Message, out: Effects) -> None:
        """Pass a tree message on to this domain's children in the tree of ``msg.root``."""
        for child in self.trees.children(msg.root, self.domain):
            out.sends.append(
                Message(
                    msg.kind,
                    msg.job,
                    self.domain,
                    child,
                    msg.attempt,
                    msg.root,
                    msg.order,
                    msg.cores,
                    msg.use,
                )
            )

    def _head(self) -> _Entry | None:
        return min(self.queue.values(), key=lambda e: e.order, default=None)

    def _settle(self, out: Effects) -> None:
        """Algorithm 1's scheduling step: resend a blocked request that heads the queue,
        commit free cores head first, spawn what is covered; until nothing changes."""
        changed = True
        while changed:
            changed = False
            head = self._head()
            if self.policy == "cancel" and head and head.job.home == self.domain:
                own = self.own[head.job.id]
                if own.state == "blocked":
                    own.state, own.attempt, own.commits = "requested", own.attempt + 1, {}
                    msg = Message(
                        "request",
                        own.job,
                        self.domain,
                        self.domain,
                        own.attempt,
                        self.domain,
                        own.job.order,
                    )
                    self._forward(msg, out)
                    self._request(own.job, own.attempt, own.job.order, out)
            self._commit(out)
            for own in list(self.own.values()):
                if (
                    own.state == "requested"
                    and sum(map(len, own.commits.values())) >= own.job.cores
                ):
                    self._spawn(own, out)
                    changed = True

    def _commit(self, out: Effects) -> None:
        """Commit free cores to the queue's active requests, head first, each up to its
        whole core count (greedy); answer each home that got cores."""
        free = list(self.store.free(self.domain))
        for entry in sorted(self.queue.values(), key=lambda e: e.order):
            if not free:
                break
            if not entry.active:
                continue
            want = entry.job.cores - len(self.store.booked(self.domain, entry.job.id))
            if want <= 0:
                continue
            take, free = free[:want], free[want:]
            self.store.reserve(self.domain, entry.job.id, take)
            if entry.job.home == self.domain:
                self.own[entry.job.id].commits.setdefault(self.domain, []).extend(take)
            else:
                out.sends.append(
                    Message(
                        "response",
                        entry.job,
                        self.domain,
                        entry.job.home,
                        entry.attempt,
                        cores=tuple(take),
                    )
                )


def expected_messages(
    policy: AllocPolicy, trees: Propagation, sequencer: int, owns: Sequence[Own]
) -> dict[str, int]:
    """Section 4's message counts from what the protocol did (not from the messages sent).

    A propagation crosses its tree's ``N - 1`` edges. Active cancellation: every attempt of
    a job is one request propagation from its home, every cancel one cancel propagation,
    the spawn one more. Sequencer: one ``submit`` per job not homed at the sequencer, one
    request propagation from the sequencer, and the spawn back to the sequencer (same
    condition) and over its tree. Jobs decided locally send nothing. Answers (``response``)
    depend on timing and are not part of the formulas.
    """
    counts = dict.fromkeys(("request", "spawn", "cancel", "submit"), 0)
    for own in owns:
        if own.local or own.state != "spawned":
            continue
        if policy == "cancel":
            edges = trees.edges(own.job.home)
            counts["request"] += own.attempt * edges
            counts["cancel"] += own.cancels * edges
            counts["spawn"] += edges
        else:
            away = int(own.job.home != sequencer)
            edges = trees.edges(sequencer)
            counts["submit"] += away
            counts["request"] += edges
            counts["spawn"] += edges + away
    return counts
