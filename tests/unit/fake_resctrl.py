"""A resctrl mount as a temp dir: the files of Documentation/arch/x86/resctrl.rst, and what the
kernel does on mkdir and rmdir of a group (make and drop its schemata and tasks files).

What it does not model: the kernel's checks of written masks (contiguous, min_cbm_bits) and
moving tasks between groups; coshare's own checks are what the tests exercise.
"""

from __future__ import annotations

from pathlib import Path

from coshare.node.resctrl import Resctrl


def make_resctrl(root: Path, *, cbm_mask: str = "fffff", min_cbm_bits: int = 1,
                 closids: int = 16, domains: tuple[str, ...] = ("0", "1"), mba: bool = True,
                 cdp: bool = False) -> Path:  # fmt: skip
    """A resctrl mount: ``info/L3`` (or ``L3CODE``/``L3DATA``), ``info/MB``, and the default
    group's files at the top."""
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
    (root / "info" / "last_cmd_status").write_text("ok\n")
    (root / "schemata").write_text("\n".join(lines) + "\n")
    (root / "tasks").write_text("")
    return root


class FakeResctrl(Resctrl):
    """:class:`Resctrl` with the kernel's mkdir/rmdir of a group done by hand."""

    def _make_group(self, path: Path) -> None:
        path.mkdir(exist_ok=True)
        for name in ("schemata", "tasks", "cpus", "cpus_list", "mode"):
            (path / name).write_text("" if name != "schemata" else
                                     (self.root / "schemata").read_text())  # fmt: skip

    def _remove_group(self, path: Path) -> None:
        if not path.is_dir():
            raise FileNotFoundError(path)
        for child in path.iterdir():
            child.unlink()
        path.rmdir()
