"""The profile store: one JSON file per program, ``DIR/PROGRAM.json``, that an admin can read
and edit (Spread-n-Share section 5.1 keeps its profiles in a JSON file).

Every file is checked when the store is loaded (:func:`coshare.profiles.programs.parse_profile`); a
bad one stops the load with a message naming the file and the field, so a typo never turns
into a silently different schedule. Files whose names do not end in ``.json`` (drafts, see
``coshare profile run --into``) are not read. This module does the I/O; the checks are pure.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from coshare.profiles.programs import (
    PROGRAM_NAME,
    Profile,
    ProfileError,
    parse_profile,
    profile_to_json,
)
from coshare.system.files import TooLarge, read_regular

#: The largest profile file read (a profile is a few hundred bytes).
MAX_PROFILE_CHARS = 1 << 20
#: The most profiles one store may hold.
MAX_PROFILES = 10_000


def read_profile(path: Path, program: str | None = None) -> Profile:
    """Read and check one profile file.

    Raises:
        ProfileError: unreadable, not JSON, or a field that is wrong (named).
    """
    where = str(path)
    try:
        text = read_regular(path, MAX_PROFILE_CHARS)
    except OSError as exc:
        raise ProfileError(where, "(file)", f"cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ProfileError(where, "(file)", "not UTF-8 text") from exc
    except TooLarge as exc:
        raise ProfileError(where, "(file)", f"not read: {exc}") from exc
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except ValueError as exc:
        raise ProfileError(where, "(file)", f"not JSON: {str(exc)[:200]}") from exc
    return parse_profile(data, where, program)


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")


def load_store(directory: Path) -> dict[str, Profile]:
    """Every profile of the store, by program.

    Raises:
        ProfileError: the directory cannot be listed, or a file is bad (named).
    """
    try:
        names = sorted(p.name for p in directory.iterdir() if p.name.endswith(".json"))
    except OSError as exc:
        raise ProfileError(str(directory), "(directory)", f"cannot list: {exc.strerror}") from exc
    if len(names) > MAX_PROFILES:
        raise ProfileError(
            str(directory), "(directory)", f"{len(names)} profiles; at most {MAX_PROFILES}"
        )
    out: dict[str, Profile] = {}
    for name in names:
        program = name[: -len(".json")]
        if PROGRAM_NAME.fullmatch(program) is None:
            raise ProfileError(
                str(directory / name),
                "(file name)",
                "want PROGRAM.json with a CoshareProgram name (1-64 of A-Z a-z 0-9 _ . -)",
            )
        out[program] = read_profile(directory / name, program)
    return out


def write_profile(directory: Path, profile: Profile) -> Path:
    """Write ``profile`` as ``DIR/PROGRAM.json`` (atomically: a reader sees the old file or
    the new one)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{profile.program}.json"
    temporary = directory / f".{profile.program}.json.tmp"
    temporary.write_text(json.dumps(profile_to_json(profile), indent=1) + "\n")
    os.replace(temporary, target)
    return target
