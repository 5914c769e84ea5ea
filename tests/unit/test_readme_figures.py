"""The pictures the README and docs/ show are in the repository (every PNG
the README mentions; docs/figures/fig10.png was shown but never committed)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def shown_images() -> list[tuple[str, str]]:
    """(document, path) of every ``![alt](path)`` in README.md and docs/*.md."""
    out = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for path in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", doc.read_text()):
            out.append((doc.relative_to(ROOT).as_posix(), (doc.parent / path).as_posix()))
    return out


def test_every_image_shown_is_committed_and_is_a_png() -> None:
    shown = shown_images()
    assert len(shown) >= 3
    for doc, path in shown:
        file = Path(path)
        assert file.is_file(), f"{doc} shows {path}, which is not in the repository"
        assert file.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"


def test_every_figure_a_documented_command_writes_is_shown() -> None:
    # The commands that make the figures (`--plot docs/figures/X.png`) and the figures shown
    # are the same set, so a figure cannot be regenerated into a file nobody sees. The
    # commands and the pictures moved from the README into docs/ (the simulator's pages).
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    written = {
        w
        for doc in docs
        for w in re.findall(r"--plot (docs/figures/[\w.-]+\.png)", doc.read_text())
    }
    shown = {Path(p).relative_to(ROOT).as_posix() for d, p in shown_images()}
    assert written and written <= shown, written - shown
