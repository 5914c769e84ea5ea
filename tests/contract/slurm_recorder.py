"""A command runner for contract tests: answers Slurm commands from recorded outputs (or
from a function) and records what was run, in order."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from coshare.errors import CommandFailed
from coshare.system.programs import CommandResult

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures/slurm/22.05"

Answer = Callable[[list[str], str | None], CommandResult]


def recorded(name: str) -> str:
    return (FIXTURES / name).read_text()


def job_record(job_id: int, **fields: Any) -> dict[str, Any]:
    """A job record of the recorded squeue output (the held annotated one), changed."""
    jobs = json.loads(recorded("squeue-mixed.json"))["jobs"]
    ids = dict(p.split("=") for p in recorded("squeue-mixed.ids").split())
    base = next(j for j in jobs if str(j["job_id"]) == ids["good"])
    return {**base, "job_id": job_id, **fields}


def squeue_output(*records: dict[str, Any]) -> str:
    data = json.loads(recorded("squeue-mixed.json"))
    data["jobs"] = list(records)
    return json.dumps(data)


class Recorder:
    """Runs nothing: ``answer(argv, stdin)`` gives each command's result."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.calls: list[tuple[list[str], str | None]] = []

    def __call__(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float,
        check: bool = True,
        input_text: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        args = [str(a) for a in argv]
        self.calls.append((args, input_text))
        result = self.answer(args, input_text)
        if check and result.returncode != 0:
            raise CommandFailed(args, result.returncode, result.stdout, result.stderr)
        return result

    def verbs(self) -> list[str]:
        """The commands run, as ``program verb`` (``scontrol release``, ``squeue``...)."""
        out = []
        for argv, stdin in self.calls:
            name = Path(argv[0]).name
            if name == "scontrol":
                out.append("scontrol <stdin>" if stdin is not None else f"scontrol {argv[1]}")
            else:
                out.append(name)
        return out


def ok(argv: list[str], stdout: str = "", stderr: str = "", code: int = 0) -> CommandResult:
    return CommandResult(tuple(argv), code, stdout, stderr)


#: squeue --Format field -> key of a squeue --json job record.
FORMAT_FIELDS = {
    "JobID": "job_id",
    "State": "job_state",
    "Reason": "state_reason",
    "PriorityLong": "priority",
    "ReqNodes": "required_nodes",
    "admin_comment": "admin_comment",
    "Comment": "comment",
}


def format_output(records: Sequence[dict[str, Any]], argv: Sequence[str]) -> str:
    """What ``squeue --noheader --jobs=... --Format=SPEC`` prints for ``records``, as 22.05
    does: each field with size 0 in full, then its suffix verbatim; one line per job
    (a comment's own line breaks included)."""
    spec = next(a for a in argv if a.startswith("--Format=")).split("=", 1)[1]
    wanted = next(a for a in argv if a.startswith("--jobs=")).split("=", 1)[1].split(",")
    fields = [re.fullmatch(r"(\w+):0(.*)", part).groups() for part in spec.split(",")]  # type: ignore[union-attr]
    lines = []
    for record in records:
        if str(record["job_id"]) not in wanted:
            continue
        values = [str(record[FORMAT_FIELDS[name]] or "(null)") + suffix for name, suffix in fields]
        lines.append("".join(values))
    return "".join(line + "\n" for line in lines)
