"""Learned profile entries on disk: ``PROFILES_DIR/learned/PROGRAM.json``, beside the admin's
``PROFILES_DIR/PROGRAM.json`` files (:mod:`coshare.profiles.store` reads only the top level,
so a learned entry is never taken for an admin's profile).

Each file is one :class:`coshare.profiles.learning.Learned` entry, written by the cycle that counted
a finished job (atomically: a reader sees the old file or the new one), and checked when
read: a bad file is named with its field and left out, the others are used (a learned entry
is the cycle's own record, so one damaged file must not stop the cycle; an admin's bad
profile does, as before). Example::

    {"program": "MG", "source": "learned",
     "scales": {"1": {"runs": 1, "run_time_s": 412.3, "cpu_s": 6540.1}},
     "shared_runs": 0, "ipc": null, "ipc_runs": 0, "membw_gbps": null, "membw_runs": 0,
     "unsupported": {"ipc": "unsupported: ..."}, "jobs": ["123"]}
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from coshare.profiles.learning import MAX_CPU_S, MAX_JOBS_KEPT, AtScale, Learned
from coshare.profiles.programs import MAX_RUN_S, PROGRAM_NAME, SCALES
from coshare.system.files import TooLarge, read_regular

#: The learned entries' folder inside the profile store.
LEARNED_DIR = "learned"
#: The largest learned file read.
MAX_LEARNED_CHARS = 1 << 20
#: Most learned entries read.
MAX_LEARNED = 10_000
_MAX_COUNT = 10**9


class LearnedError(ValueError):
    """A learned entry file that cannot be used (the message names the file and field)."""


def learned_dir(profiles_dir: Path) -> Path:
    """Where the learned entries of a profile store are."""
    return profiles_dir / LEARNED_DIR


def entry_to_json(entry: Learned) -> dict[str, Any]:
    """The file's JSON object (the curves, a simulator's, are not written)."""
    return {
        "program": entry.program,
        "source": "learned",
        "scales": {
            str(k): {"runs": s.runs, "run_time_s": s.run_time_s, "cpu_s": s.cpu_s}
            for k, s in sorted(entry.scales.items())
        },
        "shared_runs": entry.shared_runs,
        "ipc": entry.ipc,
        "ipc_runs": entry.ipc_runs,
        "membw_gbps": entry.membw_gbps,
        "membw_runs": entry.membw_runs,
        "unsupported": dict(sorted(entry.unsupported.items())),
        "jobs": list(entry.jobs),
        "widest": entry.widest,
    }


def _count(data: dict[str, Any], key: str, where: str) -> int:
    value = data.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_COUNT:
        raise LearnedError(f"{where}: {key}: want an integer in [0, {_MAX_COUNT}]")
    return value


def _number(value: object, where: str, key: str, high: float, *, none: bool = True) -> float | None:
    if value is None and none:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 <= value <= high
    ):
        raise LearnedError(f"{where}: {key}: want a number in [0, {high:g}]")
    return float(value)


def parse_entry(data: object, where: str, program: str | None = None) -> Learned:
    """Check a decoded learned entry.

    Raises:
        LearnedError: naming ``where`` and the first bad field.
    """
    if not isinstance(data, dict):
        raise LearnedError(f"{where}: (top level): not a JSON object")
    name = data.get("program")
    if not isinstance(name, str) or PROGRAM_NAME.fullmatch(name) is None:
        raise LearnedError(f"{where}: program: want 1-64 of A-Z a-z 0-9 _ . - (as CoshareProgram)")
    if program is not None and name != program:
        raise LearnedError(f"{where}: program: {name} differs from the file's name ({program})")
    if data.get("source") != "learned":
        raise LearnedError(f'{where}: source: want "learned"')
    raw = data.get("scales", {})
    if not isinstance(raw, dict):
        raise LearnedError(f"{where}: scales: want an object of scale factor to runs")
    scales: dict[int, AtScale] = {}
    for key, value in raw.items():
        text = str(key)
        if not text.isdigit() or int(text) not in SCALES or not isinstance(value, dict):
            raise LearnedError(
                f"{where}: scales.{text[:16]}: want a scale factor "
                f"({', '.join(map(str, SCALES))}) holding runs, run_time_s, cpu_s"
            )
        runs = _count(value, "runs", f"{where}: scales.{text}")
        if runs < 1:
            raise LearnedError(f"{where}: scales.{text}.runs: want at least 1")
        seconds = _number(value.get("run_time_s"), where, f"scales.{text}.run_time_s", MAX_RUN_S)
        if seconds is None or seconds <= 0:
            raise LearnedError(f"{where}: scales.{text}.run_time_s: want seconds above 0")
        cpu = _number(value.get("cpu_s"), where, f"scales.{text}.cpu_s", MAX_CPU_S)
        scales[int(text)] = AtScale(runs, seconds, cpu)
    unsupported = data.get("unsupported", {})
    if not isinstance(unsupported, dict) or not all(
        k in ("ipc", "membw_gbps") and isinstance(v, str) and len(v) <= 1024
        for k, v in unsupported.items()
    ):
        raise LearnedError(f"{where}: unsupported: want ipc and membw_gbps to text")
    jobs = data.get("jobs", [])
    if (
        not isinstance(jobs, list)
        or len(jobs) > MAX_JOBS_KEPT
        or not all(isinstance(j, str) and 0 < len(j) <= 128 for j in jobs)
    ):
        raise LearnedError(f"{where}: jobs: want at most {MAX_JOBS_KEPT} job ids")
    widest = data.get("widest")
    if widest is not None and (isinstance(widest, bool) or widest not in SCALES):
        raise LearnedError(f"{where}: widest: want null or one of {', '.join(map(str, SCALES))}")
    return Learned(
        name,
        scales,
        _count(data, "shared_runs", where),
        _number(data.get("ipc"), where, "ipc", 1e3),
        _count(data, "ipc_runs", where),
        _number(data.get("membw_gbps"), where, "membw_gbps", 1e5),
        _count(data, "membw_runs", where),
        dict(unsupported),
        tuple(jobs),
        None,
        widest,
    )


def load_learned(profiles_dir: Path) -> tuple[dict[str, Learned], list[str]]:
    """Every usable learned entry by program, and one line per file left out (why)."""
    directory = learned_dir(profiles_dir)
    try:
        names = sorted(p.name for p in directory.iterdir() if p.name.endswith(".json"))
    except FileNotFoundError:
        return {}, []
    except OSError as exc:
        return {}, [f"learned profiles {directory}: cannot list: {exc.strerror}"]
    out: dict[str, Learned] = {}
    problems = []
    for name in names[:MAX_LEARNED]:
        path = directory / name
        program = name[: -len(".json")]
        try:
            data = json.loads(read_regular(path, MAX_LEARNED_CHARS))
            out[program] = parse_entry(data, str(path), program)
        except (OSError, UnicodeDecodeError, TooLarge, ValueError) as exc:
            problems.append(f"learned profile {path} left out: {exc}")
    if len(names) > MAX_LEARNED:
        problems.append(f"learned profiles {directory}: only the first {MAX_LEARNED} read")
    return out, problems


def write_learned(profiles_dir: Path, entry: Learned) -> Path:
    """Write ``entry`` as ``learned/PROGRAM.json`` (atomically)."""
    directory = learned_dir(profiles_dir)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{entry.program}.json"
    temporary = directory / f".{entry.program}.json.{os.getpid()}.tmp"
    temporary.write_text(json.dumps(entry_to_json(entry), indent=1) + "\n")
    os.replace(temporary, target)
    return target
