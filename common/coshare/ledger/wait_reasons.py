"""Wait reasons: the short text a waiting job carries in its own record (HTCondor's
``CoshareWaitReason``, Slurm's AdminComment), so its owner sees why it waits with the
scheduler's own tools, and which of them one cycle writes. Pure."""

from __future__ import annotations

from collections.abc import Mapping

from coshare.model import Plan, Unplaced

#: A wait reason written into a job is cut to this many characters (one line).
MAX_WAIT_REASON_CHARS = 300


def wait_reason(unplaced: Unplaced) -> str:
    """The short reason written into a waiting job's own record (HTCondor's
    ``CoshareWaitReason``, Slurm's AdminComment), so its owner sees it with the scheduler's
    tools: the plan's code and reason, on one line, bounded."""
    text = f"{unplaced.code}: " + " ".join(unplaced.reason.split())
    text = "".join(c if c.isprintable() else " " for c in text)
    if len(text) > MAX_WAIT_REASON_CHARS:
        text = text[: MAX_WAIT_REASON_CHARS - 3] + "..."
    return text


def wait_reason_writes(plan: Plan, recorded: Mapping[str, str | None]) -> dict[str, str | None]:
    """The wait reasons one cycle writes: a job's only when it changed (no edit storm).

    Args:
        plan: the cycle's plan.
        recorded: the reason each job carries now (``None``: none), for the jobs whose
            reason the adapter may write; a job missing here is left alone.

    Returns:
        Per job, the reason to write, or ``None`` to clear it (a job this plan places).
    """
    out: dict[str, str | None] = {}
    for u in plan.unplaced:
        if u.job in recorded:
            text = wait_reason(u)
            if recorded[u.job] != text:
                out[u.job] = text
    for job in sorted(plan.placed_jobs):
        if recorded.get(job) is not None:
            out[job] = None
    return out
