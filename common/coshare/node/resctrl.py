"""LLC ways and memory bandwidth per job through Linux resctrl (Intel CAT/MBA, AMD L3 QoS).

A job that asks for ways gets its own resource group, a directory at the top of the resctrl
mount (``/sys/fs/resctrl/coshare.job-<id>``), created at job start and removed at job end
(removing it hands its tasks back to the default group, resctrl.rst "Resource alloc and
monitor groups"). Its ``schemata`` holds N contiguous ways no other coshare job holds
(:mod:`coshare.node.ways`) and, where the processor has MBA and the job asks, an ``MB:``
percentage. A process joins by writing its pid to the group's ``tasks``; its children are
born in the group.

Everything is rooted at ``root: Path`` (``node.resctrl_root``), so tests run against a
temporary directory with the kernel's layout. What the kernel does on ``mkdir`` and
``rmdir`` of a group (make and drop its ``schemata``, ``tasks``, ...) is
:meth:`Resctrl._make_group` and :meth:`Resctrl._remove_group`, which a test's fake
replaces. On a node without resctrl every call that needs it raises
:class:`~coshare.errors.Unsupported` naming the file it looked for: nothing is pretended.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from coshare.errors import CgroupError, JobSpecError, Unsupported
from coshare.node.cgroups.base import read_text, write_text
from coshare.node.spec import group_name, job_of_group
from coshare.node.ways import (
    CDP_RESOURCES,
    L3_RESOURCES,
    Schemata,
    choose_ways,
    layout_masks,
    mb_percent,
    parse_mask,
    parse_schemata,
    runs,
    schemata_text,
    ways_of,
)

#: Top-level names of the resctrl mount that are not resource groups.
_NOT_GROUPS = frozenset({"info", "mon_groups", "mon_data"})


@dataclass(frozen=True)
class CacheInfo:
    """The L3 allocation the node offers (``info/L3`` or, with CDP, ``info/L3CODE``).

    Attributes:
        resources: the schemata lines a group sets (``L3``, or ``L3CODE`` and ``L3DATA``).
        full_mask: ``cbm_mask``: every way.
        min_bits: ``min_cbm_bits``.
        closids: ``num_closids``: groups the hardware can tell apart, the default one included.
        domains: the cache ids (from the default group's ``schemata``).
    """

    resources: tuple[str, ...]
    full_mask: int
    min_bits: int
    closids: int
    domains: tuple[str, ...]

    @property
    def ways(self) -> int:
        """The node's LLC ways."""
        return ways_of(self.full_mask)


@dataclass(frozen=True)
class BandwidthInfo:
    """Memory bandwidth allocation (``info/MB``): the smallest percentage and its step."""

    min_bandwidth: int
    granularity: int
    domains: tuple[str, ...]


@dataclass(frozen=True)
class Allocation:
    """A job's resource group as made.

    Attributes:
        job: the job.
        path: the group's directory.
        mask: its ways (``None``: no ways asked, bandwidth only).
        membw_percent: its ``MB:`` value (``None``: none).
    """

    job: str
    path: Path
    mask: int | None
    membw_percent: int | None


def _number(path: Path) -> int:
    text = read_text(path).strip()
    if not text.isdigit():
        raise CgroupError(str(path), "read", f"{text[:40]!r} is not a number")
    return int(text)


class Resctrl:
    """The resctrl mount at ``root``, with coshare's groups named ``<prefix>.job-<id>``.

    Args:
        root: the mount (``/sys/fs/resctrl``).
        prefix: the groups' prefix (the node's cgroup parent, ``/`` as ``.``), so that test
            rigs running several node daemons on one host keep apart.
    """

    def __init__(self, root: Path, prefix: str = "coshare") -> None:
        self.root = root
        self.prefix = prefix.replace("/", ".")

    # -- what the node offers --------------------------------------------------------------

    def cache(self) -> CacheInfo:
        """The L3 allocation, read from ``info``.

        Raises:
            Unsupported: no resctrl at ``root``, or no L3 allocation (names the file).
        """
        resources: tuple[str, ...] = ()
        for name, found in (("L3", L3_RESOURCES), ("L3CODE", CDP_RESOURCES)):
            info = self.root / "info" / name
            if (info / "cbm_mask").exists():
                resources = found
                break
        else:
            mask = self.root / "info" / "L3" / "cbm_mask"
            why = (
                "resctrl is not mounted there"
                if not (self.root / "info").is_dir()
                else "resctrl offers no L3 cache allocation here"
            )
            raise Unsupported("resctrl L3 (cache ways)", str(mask), why)
        try:
            full = parse_mask(read_text(info / "cbm_mask"))
        except ValueError as exc:
            raise CgroupError(str(info / "cbm_mask"), "read", str(exc)) from exc
        schemata = self._schemata(self.root)
        return CacheInfo(
            resources,
            full,
            _number(info / "min_cbm_bits"),
            _number(info / "num_closids"),
            schemata.domains(resources[0]),
        )

    def bandwidth(self) -> BandwidthInfo:
        """Memory bandwidth allocation, read from ``info/MB``.

        Raises:
            Unsupported: no MBA here (names ``info/MB/min_bandwidth``).
        """
        info = self.root / "info" / "MB"
        if not (info / "min_bandwidth").exists():
            why = (
                "resctrl is not mounted there"
                if not (self.root / "info").is_dir()
                else "the processor or kernel offers no MBA here"
            )
            raise Unsupported(
                "resctrl MB (memory bandwidth allocation)", str(info / "min_bandwidth"), why
            )
        return BandwidthInfo(
            _number(info / "min_bandwidth"),
            _number(info / "bandwidth_gran"),
            self._schemata(self.root).domains("MB"),
        )

    def _schemata(self, directory: Path) -> Schemata:
        path = directory / "schemata"
        try:
            return parse_schemata(read_text(path))
        except ValueError as exc:
            raise CgroupError(str(path), "read", str(exc)) from exc

    # -- coshare's groups ------------------------------------------------------------------

    def path(self, job: str) -> Path:
        """Where a job's group is."""
        return self.root / f"{self.prefix}.{group_name(job)}"

    def jobs(self) -> list[str]:
        """Jobs that have a group here."""
        if not (self.root / "info").is_dir():
            return []
        head = f"{self.prefix}."
        found = []
        for entry in self.root.iterdir():
            if entry.is_dir() and entry.name.startswith(head):
                job = job_of_group(entry.name[len(head) :])
                if job is not None:
                    found.append(job)
        return sorted(found)

    def _groups(self) -> list[Path]:
        return [p for p in self.root.iterdir() if p.is_dir() and p.name not in _NOT_GROUPS]

    def held_masks(self, skip: str | None = None) -> list[int]:
        """The ways of every coshare job's group (``skip``: one job left out)."""
        cache = self.cache()
        masks = []
        for job in self.jobs():
            if job == skip:
                continue
            schemata = self._schemata(self.path(job))
            for domain in cache.domains[:1]:
                mask = schemata.mask(cache.resources[0], domain)
                if mask is not None:
                    masks.append(mask)
        return masks

    def ways_free(self, allocated: Mapping[str, int] | None = None) -> int:
        """Ways no coshare job holds: with ``allocated`` (each job's own ways, from the
        node's job records), the node's ways less their sum (spare ways lent out under
        :meth:`relayout` are still free to give); without, the ways no group's mask holds."""
        cache = self.cache()
        if allocated is not None:
            return max(0, cache.ways - sum(allocated.values()))
        held = 0
        for mask in self.held_masks():
            held |= mask
        return ways_of(cache.full_mask & ~held)

    def create(
        self,
        job: str,
        ways: int | None,
        membw_percent: int | None,
        allocated: Mapping[str, int] | None = None,
        share_spare: bool = False,
    ) -> Allocation:
        """Make the job's group with its ways and bandwidth share.

        Args:
            job: the job.
            ways: its LLC ways (``None``: none).
            membw_percent: its ``MB:`` percentage (``None``: none).
            allocated: the other coshare jobs' own ways on this node (from the job records):
                every mask is then laid out afresh (:meth:`relayout`), and with
                ``share_spare`` the ways nobody is allocated are shared out (Spread-n-Share
                section 4.4). ``None``: first fit among the masks the groups hold now.
            share_spare: give the spare ways away in equal shares.

        Raises:
            Unsupported: no cache allocation (ways asked) or no MBA (bandwidth asked).
            JobSpecError: ways the node cannot give (too many, no contiguous free run, every
                CLOSID in use), or a percentage outside 1..100.
            CgroupError: the kernel refused (its ``info/last_cmd_status`` is in the message).
        """
        cache = self.cache() if ways is not None else None
        band = self.bandwidth() if membw_percent is not None else None
        mask = None
        layout: dict[str, int] = {}
        if cache is not None and ways is not None:
            if allocated is None:
                mask = choose_ways(cache.full_mask, self.held_masks(skip=job), ways, cache.min_bits)
            else:
                choose_ways(cache.full_mask, (), ways, cache.min_bits)  # the range check
                layout = layout_masks(
                    cache.full_mask,
                    [*self._in_order(allocated, skip=job), (job, ways)],
                    share_spare,
                )
                mask = layout.pop(job)
            groups = len([p for p in self._groups() if p != self.path(job)])
            if groups + 1 >= cache.closids:  # the default group holds one CLOSID
                raise JobSpecError(
                    f"llc_ways={ways}: all {cache.closids} resctrl groups "
                    "(CLOSIDs) of this node are in use"
                )
        percent = None
        if band is not None and membw_percent is not None:
            percent = mb_percent(membw_percent, band.min_bandwidth, band.granularity)
        # Others shrink (reclaim their spare ways) before the new group takes its own.
        self._write_masks(cache, layout)
        path = self.path(job)
        self._make_group(path)
        text = schemata_text(
            cache.resources if cache else (),
            cache.domains if cache else (),
            mask,
            percent,
            band.domains if band else (),
        )
        try:
            self._write(path / "schemata", text)
        except CgroupError as exc:
            status = self._last_status()
            self.remove(job)
            raise CgroupError(
                str(path / "schemata"),
                f"write {text.strip()!r} to",
                f"{exc}; the kernel says: {status}",
            ) from exc
        return Allocation(job, path, mask, percent)

    def relayout(self, allocated: Mapping[str, int], share_spare: bool) -> dict[str, int]:
        """Lay the masks of the jobs in ``allocated`` (their own ways) out afresh, with the
        spare ways shared out when ``share_spare`` (after a job ended: its ways go to the
        others). Jobs without a group here are left out.

        Returns:
            each job's mask as written.

        Raises:
            Unsupported: no cache allocation here.
            CgroupError: the kernel refused a mask.
        """
        cache = self.cache()
        present = {j: w for j, w in allocated.items() if self.path(j).is_dir()}
        if not present:
            return {}
        layout = layout_masks(cache.full_mask, self._in_order(present), share_spare)
        self._write_masks(cache, layout)
        return layout

    def _in_order(
        self, allocated: Mapping[str, int], skip: str | None = None
    ) -> list[tuple[str, int]]:
        """The jobs by where their masks sit now (lowest way first; no mask: last), so that a
        new layout moves as few ways as it can."""
        cache = self.cache()

        def low(job: str) -> int:
            path = self.path(job)
            if not (path / "schemata").exists():
                return 1 << 16
            mask = (
                self._schemata(path).mask(cache.resources[0], cache.domains[0])
                if cache.domains
                else None
            )
            return runs(mask)[0][0] if mask else 1 << 16

        jobs = sorted((j for j in allocated if j != skip), key=lambda j: (low(j), j))
        return [(j, allocated[j]) for j in jobs]

    def _write_masks(self, cache: CacheInfo | None, layout: Mapping[str, int]) -> None:
        """Write the masks of ``layout`` into the groups whose mask differs."""
        if cache is None:
            return
        for other, mask in layout.items():
            path = self.path(other)
            if not path.is_dir():
                continue
            current = (
                self._schemata(path).mask(cache.resources[0], cache.domains[0])
                if cache.domains
                else None
            )
            if current == mask:
                continue
            text = schemata_text(cache.resources, cache.domains, mask, None)
            try:
                self._write(path / "schemata", text)
            except CgroupError as exc:
                raise CgroupError(
                    str(path / "schemata"),
                    f"write {text.strip()!r} to",
                    f"{exc}; the kernel says: {self._last_status()}",
                ) from exc

    def _write(self, path: Path, text: str) -> None:
        """``write(2)`` of a resctrl file; the kernel checks it (a test's fake does too)."""
        write_text(path, text)

    @contextlib.contextmanager
    def joined(self, job: str, pid: int) -> Iterator[Path]:
        """Process ``pid`` in the job's group for the block, then back in the default group
        (writing a pid to a group's ``tasks`` moves it out of the group it was in; children
        forked meanwhile are born in the job's group and stay there).

        Raises:
            CgroupError: the kernel refused the move.
        """
        self.add(job, pid)
        try:
            yield self.path(job)
        finally:
            self._write(self.root / "tasks", str(pid))

    def mbm_total_bytes(self, job: str) -> int:
        """Bytes the job's group moved to and from memory since it was made (MBM: the
        ``mbm_total_bytes`` of every ``mon_data/mon_L3_<id>``, added up).

        Raises:
            Unsupported: MBM absent (names ``info/L3_MON/mon_features``).
            CgroupError: the kernel says ``Unavailable`` or ``Error`` for a domain.
        """
        features = self.root / "info" / "L3_MON" / "mon_features"
        if not features.exists() or "mbm_total_bytes" not in read_text(features).split():
            raise Unsupported(
                "resctrl MBM (memory bandwidth monitoring)",
                str(features),
                "the processor or kernel offers no mbm_total_bytes here",
            )
        total = 0
        found = False
        for domain in sorted((self.path(job) / "mon_data").glob("mon_L3_*")):
            total += _number(domain / "mbm_total_bytes")
            found = True
        if not found:
            raise CgroupError(str(self.path(job) / "mon_data"), "read", "no mon_L3_* domain")
        return total

    def _make_group(self, path: Path) -> None:
        """``mkdir``: the kernel fills the new group (``schemata``, ``tasks``, ...)."""
        try:
            path.mkdir()
        except FileExistsError:
            pass
        except OSError as exc:
            if exc.errno == errno.ENOSPC:  # resctrl: out of CLOSIDs or RMIDs
                raise JobSpecError(
                    f"resctrl has no free group for {path.name}: {self._last_status()}"
                ) from exc
            raise CgroupError(str(path), "create", exc.strerror or str(exc)) from exc

    def _last_status(self) -> str:
        with contextlib.suppress(OSError):
            return read_text(self.root / "info" / "last_cmd_status").strip()[:200]
        return "(no info/last_cmd_status)"

    def add(self, job: str, pid: int) -> None:
        """Put process ``pid`` into the job's group (its later children are born there).

        Raises:
            CgroupError: the group is gone or the kernel refused.
        """
        self._write(self.path(job) / "tasks", str(pid))

    def tasks_file(self, job: str) -> Path:
        """The file a process writes its pid into to join the job's group."""
        return self.path(job) / "tasks"

    def remove(self, job: str) -> bool:
        """Remove the job's group (its tasks go back to the default group); idempotent.

        Returns:
            whether a group was there.

        Raises:
            CgroupError: the kernel refused.
        """
        path = self.path(job)
        try:
            self._remove_group(path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise CgroupError(str(path), "remove", exc.strerror or str(exc)) from exc
        return True

    def _remove_group(self, path: Path) -> None:
        """``rmdir``: the kernel drops the group's files and moves its tasks to the default
        group."""
        path.rmdir()
