"""A resctrl mount as a temp dir: the files of Documentation/arch/x86/resctrl.rst, and what the
kernel does on mkdir and rmdir of a group and on writes to its ``schemata`` and ``tasks``.

What the fake does as the kernel does (arch/x86/kernel/cpu/resctrl/ctrlmondata.c and
rdtgroup.c, Linux 6.x), with the kernel's ``info/last_cmd_status`` text:

- ``mkdir``: a new group with ``schemata`` (the default group's), ``tasks``, ``cpus``,
  ``cpus_list``, ``mode`` and, where ``info/L3_MON`` exists, ``mon_data/mon_L3_<id>`` with
  ``mbm_total_bytes`` and ``llc_occupancy``; ``ENOSPC`` when every CLOSID is in use (the
  default group holds one).
- ``schemata``: a write must end with a newline; each line is ``RESOURCE:id=value;...`` and
  only the resources written change. A cache mask is checked as ``cbm_validate()`` does
  (``Non-hex character in the mask f0g``, ``Mask out of range``, ``The mask 5 has
  non-consecutive 1-bits``, ``Need at least 2 bits in the mask``), an ``MB`` value as
  ``bw_validate()`` (``MB value 5 out of range [10,100]``), a domain as ``parse_line()``
  (``Missing '=' or non-numeric domain``, an unknown id); a bad write is ``EINVAL``, changes
  nothing, and says why in ``last_cmd_status``.
- ``tasks``: a pid that does not exist is ``ESRCH`` (``No task 123``); a pid written moves out
  of the group it was in (the default group's ``tasks`` at the top included).

What it does not model: CPUs (``cpus``), monitoring groups (``mon_groups``), pseudo-locking
and exclusive mode; coshare uses none of them.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from coshare.errors import CgroupError
from coshare.node.resctrl import Resctrl


def make_resctrl(
    root: Path,
    *,
    cbm_mask: str = "fffff",
    min_cbm_bits: int = 1,
    closids: int = 16,
    domains: tuple[str, ...] = ("0", "1"),
    mba: bool = True,
    cdp: bool = False,
    mbm: bool = False,
) -> Path:
    """A resctrl mount: ``info/L3`` (or ``L3CODE``/``L3DATA``), ``info/MB``, ``info/L3_MON``
    (with ``mbm``), and the default group's files at the top."""
    names = ("L3CODE", "L3DATA") if cdp else ("L3",)
    for name in names:
        info = root / "info" / name
        info.mkdir(parents=True)
        (info / "cbm_mask").write_text(cbm_mask + "\n")
        (info / "min_cbm_bits").write_text(f"{min_cbm_bits}\n")
        (info / "num_closids").write_text(f"{closids}\n")
        (info / "shareable_bits").write_text("0\n")
    lines = [f"{n}:" + ";".join(f"{d}={cbm_mask}" for d in domains) for n in names]
    if mba:
        info = root / "info" / "MB"
        info.mkdir(parents=True)
        (info / "min_bandwidth").write_text("10\n")
        (info / "bandwidth_gran").write_text("10\n")
        (info / "delay_linear").write_text("1\n")
        lines.append("MB:" + ";".join(f"{d}=100" for d in domains))
    if mbm:
        info = root / "info" / "L3_MON"
        info.mkdir(parents=True)
        (info / "mon_features").write_text("llc_occupancy\nmbm_total_bytes\nmbm_local_bytes\n")
        (info / "num_rmids").write_text("176\n")
        _mon_data(root, domains)
    (root / "info" / "last_cmd_status").write_text("ok\n")
    (root / "schemata").write_text("\n".join(lines) + "\n")
    (root / "tasks").write_text("")
    return root


def _mon_data(group: Path, domains: tuple[str, ...]) -> None:
    for domain in domains:
        where = group / "mon_data" / f"mon_L3_{int(domain):02d}"
        where.mkdir(parents=True)
        (where / "mbm_total_bytes").write_text("0\n")
        (where / "llc_occupancy").write_text("0\n")


def add_mbm_bytes(group: Path, domain: str, count: int) -> None:
    """What the hardware does as the group's tasks touch memory: its counter grows."""
    path = group / "mon_data" / f"mon_L3_{int(domain):02d}" / "mbm_total_bytes"
    path.write_text(f"{int(path.read_text()) + count}\n")


class FakeResctrl(Resctrl):
    """:class:`Resctrl` with the kernel's side of mkdir, rmdir and writes done by hand."""

    def _status(self, text: str) -> None:
        (self.root / "info" / "last_cmd_status").write_text(text + "\n")

    def _refuse(self, path: Path, value: str, why: str, code: int = errno.EINVAL) -> None:
        self._status(why)
        raise CgroupError(str(path), f"write {value!r} to", os.strerror(code))

    def _make_group(self, path: Path) -> None:
        if path.is_dir():
            return  # mkdir(2) says EEXIST, which Resctrl takes as made
        closids = int((self.root / "info" / self._cache_name() / "num_closids").read_text())
        if len(self._groups()) + 1 >= closids:
            self._status("Out of CLOSIDs")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        path.mkdir()
        for name in ("tasks", "cpus", "cpus_list"):
            (path / name).write_text("")
        (path / "mode").write_text("shareable\n")
        (path / "schemata").write_text((self.root / "schemata").read_text())
        if (self.root / "info" / "L3_MON").is_dir():
            _mon_data(path, tuple(self._schemata(self.root).lines[self._cache_name()]))
        self._status("ok")

    def _cache_name(self) -> str:
        return "L3" if (self.root / "info" / "L3").is_dir() else "L3CODE"

    def _remove_group(self, path: Path) -> None:
        if not path.is_dir():
            raise FileNotFoundError(path)
        moved = (path / "tasks").read_text()  # its tasks go back to the default group
        with (self.root / "tasks").open("a") as default:
            default.write(moved)
        for child in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            child.rmdir() if child.is_dir() else child.unlink()
        path.rmdir()

    def _write(self, path: Path, text: str) -> None:
        if not path.exists():
            raise CgroupError(str(path), f"write {text!r} to", os.strerror(errno.ENOENT))
        if path.name == "schemata":
            self._write_schemata(path, text)
        elif path.name == "tasks":
            self._write_tasks(path, text)
        else:
            path.write_text(text)

    def _write_schemata(self, path: Path, text: str) -> None:
        if not text.endswith("\n"):
            self._refuse(path, text, "Buffer does not end with newline")
        current = self._schemata(path.parent)
        lines = {r: dict(v) for r, v in current.lines.items()}
        for raw in text.splitlines():
            line = raw.strip()
            if not line:
                continue
            resource, colon, body = line.partition(":")
            resource = resource.strip()
            if not colon or resource not in lines:
                self._refuse(path, text, f"Unknown or unsupported resource name '{resource}'")
            for item in body.split(";"):
                domain, equals, value = item.partition("=")
                domain, value = domain.strip(), value.strip()
                if not equals or not domain.isdigit():
                    self._refuse(path, text, "Missing '=' or non-numeric domain")
                if domain not in lines[resource]:
                    self._refuse(path, text, f"Unknown domain {domain}")
                why = self._bw_invalid(value) if resource == "MB" else self._cbm_invalid(value)
                if why is not None:
                    self._refuse(path, text, why)
                lines[resource][domain] = value if resource == "MB" else f"{int(value, 16):x}"
        path.write_text(
            "".join(
                f"{r}:" + ";".join(f"{d}={v}" for d, v in values.items()) + "\n"
                for r, values in lines.items()
            )
        )
        self._status("ok")

    def _cbm_invalid(self, value: str) -> str | None:
        info = self.root / "info" / self._cache_name()
        full = int((info / "cbm_mask").read_text(), 16)
        min_bits = int((info / "min_cbm_bits").read_text())
        try:
            mask = int(value, 16)
        except ValueError:
            return f"Non-hex character in the mask {value}"
        if (min_bits > 0 and mask == 0) or mask > full:
            return "Mask out of range"
        low = (mask & -mask).bit_length() - 1
        run = 0
        while (mask >> (low + run)) & 1:
            run += 1
        if mask >> (low + run):
            return f"The mask {mask:x} has non-consecutive 1-bits"
        if run < min_bits:
            return f"Need at least {min_bits} bits in the mask"
        return None

    def _bw_invalid(self, value: str) -> str | None:
        info = self.root / "info" / "MB"
        low = int((info / "min_bandwidth").read_text())
        if not value.isdigit():
            return f"Non-decimal digit in MB value {value}"
        if not low <= int(value) <= 100:
            return f"MB value {int(value)} out of range [{low},100]"
        return None

    def _write_tasks(self, path: Path, text: str) -> None:
        pid = text.strip()
        if not pid.isdigit() or not Path(f"/proc/{pid}").exists():
            self._refuse(path, text, f"No task {pid}", errno.ESRCH)
        for tasks in [self.root / "tasks", *(g / "tasks" for g in self._groups())]:
            if tasks != path and tasks.exists():
                kept = [p for p in tasks.read_text().split() if p != pid]
                tasks.write_text("".join(f"{p}\n" for p in kept))
        listed = path.read_text().split()
        if pid not in listed:
            path.write_text("".join(f"{p}\n" for p in [*listed, pid]))
        self._status("ok")
