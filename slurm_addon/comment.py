"""Where Slurm users declare coshare annotations: the job's comment.

A batch script declares what the job needs on a device in its comment, which ``squeue``
shows to the controller at no extra cost and which a job_submit plugin can see at submit::

    #SBATCH --comment="coshare: device-memory=2G device-threads=120"

Grammar: the comment is split into tokens at white space, ``,`` and ``;``. After a token
``coshare:`` (any case) every token is a ``key=value`` annotation; before it, only tokens whose
key starts with ``coshare`` are (``coshare-device-memory=2G``), and other words are the user's
own text. Keys are those of :mod:`coshare.ledger.annotations` and are matched the same forgiving way
(case, ``_``/``-``, the ``coshare`` prefix). A comment that mentions ``coshare`` anywhere makes
the job *annotated*: coshare's job_submit plugin holds it, and coshare either places it or
refuses it with a message; jobs whose comment does not mention it are never touched.

Pure: no I/O.
"""

from __future__ import annotations

import re

from coshare.errors import AnnotationError, FieldProblem
from coshare.ledger.annotations import is_annotation_key

MARKER = "coshare"
EXAMPLE = "coshare: device-memory=2G device-threads=120"
_SPLIT = re.compile(r"[\s,;]+")
#: Most ``key=value`` annotations and problems read from one comment. A comment may be long
#: (Slurm takes a megabyte), and every key is compared with the others: past these, the
#: comment is refused rather than read on (4,000 keys took 24 s when every key
#: was compared with every other, so one user's comment could stall the cycle).
MAX_KEYS = 32
MAX_PROBLEMS = 8


def is_annotated(comment: str) -> bool:
    """Whether a comment makes its job coshare's (the job_submit plugin's rule, too)."""
    return MARKER in comment.lower()


def read_annotations(job_id: str, comment: str) -> dict[str, str]:
    """The ``key=value`` annotations of a job's comment, keys as the user wrote them.

    Args:
        job_id: named in the error message.
        comment: the job's comment.

    Returns:
        Raw keys and values, for :func:`coshare.ledger.annotations.parse_job`.

    Raises:
        AnnotationError: a token after ``coshare:`` is not ``key=value``, a key is given
            twice, or the comment mentions coshare but declares nothing.
    """
    found: dict[str, str] = {}
    flat_keys: set[str] = set()
    problems: list[FieldProblem] = []
    inside = False
    for token in _SPLIT.split(comment.strip()):
        if len(problems) >= MAX_PROBLEMS:
            break
        if len(found) > MAX_KEYS:
            problems.append(
                FieldProblem(
                    "comment",
                    comment,
                    f"at most {MAX_KEYS} key=value annotations",
                    "declares too many keys",
                )
            )
            break
        lower = token.lower()
        if lower.startswith(MARKER + ":"):
            inside, token = True, token[len(MARKER) + 1 :]
        if not token:
            continue
        key, equals, value = token.partition("=")
        if not equals:
            if inside:
                problems.append(
                    FieldProblem(token, "", "key=value, e.g. " + EXAMPLE, "has no value")
                )
            continue
        if not (inside or is_annotation_key(key)):
            continue  # the user's own key=value text before the coshare part
        flat = _flat(key)
        if flat in flat_keys:
            problems.append(FieldProblem(key, value, "each key once", "is given twice"))
            continue
        flat_keys.add(flat)
        found[key] = value
    if not found and not problems:
        problems.append(
            FieldProblem("comment", comment, EXAMPLE, "mentions coshare but declares no key=value")
        )
    if problems:
        raise AnnotationError(job_id, problems)
    return found


def _flat(key: str) -> str:
    """A key as compared for repeats: ``coshare-device_memory`` is ``devicememory``."""
    squashed = re.sub(r"[^a-z0-9]", "", key.lower())
    return squashed[len(MARKER) :] if squashed.startswith(MARKER) else squashed
