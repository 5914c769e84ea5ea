"""The cycle's side of profiles learned from normal runs: read the nodes' job-end records
from the spool (``policy.sns.learn_from``, :mod:`coshare.profiles.job_end`), count each finished job
once in its program's learned entry (:func:`coshare.profiles.learning.observe`), and hand the
``sns`` policy what it plans with (:func:`policy_profiles`).

A job's records are put together once every node of it has written one (its ``nodes``); a
job whose records stay incomplete longer than :data:`INCOMPLETE_WAIT_S` is dropped with a
note (a node that died in its Epilog). A record that cannot be read is named with its field
in a note and moved aside into ``bad/`` (never read again, never stopping the cycle). Counted
records are removed. Both the update and the removal happen under the store's lock
(``learned/.lock``), so two cycles never count a job twice (the entry also remembers the
last job ids it counted).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from coshare.config import Config
from coshare.errors import ConfigError
from coshare.profiles.job_end import EndRecordError, NodeEnd, combine, parse_end
from coshare.profiles.learned_store import learned_dir, load_learned, write_learned
from coshare.profiles.learning import Known, Learned, for_policy, observe, policy_inputs
from coshare.profiles.programs import Profile
from coshare.profiles.store import load_store
from coshare.system.files import TooLarge, read_regular

log = logging.getLogger("coshare.profiles.learning")

#: How long a job's records may wait for its other nodes' before they are dropped.
INCOMPLETE_WAIT_S = 3600.0
#: The largest record read, and the most records read per cycle.
MAX_RECORD_CHARS = 64 * 1024
MAX_RECORDS = 10_000


@dataclass
class Learning:
    """What one cycle's reading of the spool did.

    Attributes:
        counted: ``job: program at scale k, N s, alone|shared`` per job counted.
        notes: records left out or set aside, and why.
    """

    counted: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _set_aside(spool: Path, path: Path) -> None:
    bad = spool / "bad"
    with contextlib.suppress(OSError):
        bad.mkdir(exist_ok=True)
        os.replace(path, bad / path.name)


def learn_from_spool(profiles_dir: Path, spool: Path, now_s: float) -> Learning:
    """Count every complete job of the spool in the learned entries (see the module)."""
    done = Learning()
    try:
        paths = sorted(p for p in spool.iterdir() if p.name.endswith(".json"))[:MAX_RECORDS]
    except FileNotFoundError:
        return done
    except OSError as exc:
        done.notes.append(f"job-end spool {spool}: cannot list: {exc.strerror}")
        return done
    by_job: dict[str, list[tuple[Path, NodeEnd]]] = {}
    for path in paths:
        try:
            end = parse_end(json.loads(read_regular(path, MAX_RECORD_CHARS)), str(path))
            if path.name != end.file_name:
                raise EndRecordError(f"{path}: (file name): want {end.file_name}")
        except (OSError, UnicodeDecodeError, TooLarge, ValueError) as exc:
            done.notes.append(f"job-end record set aside into {spool / 'bad'}: {exc}")
            _set_aside(spool, path)
            continue
        by_job.setdefault(end.job, []).append((path, end))
    with _locked(learned_dir(profiles_dir)):
        entries, problems = load_learned(profiles_dir)
        done.notes += problems
        changed: dict[str, Learned] = {}
        finished: list[Path] = []
        for job, parts in sorted(by_job.items()):
            ends = [e for _, e in parts]
            first = ends[0]
            if any(
                (e.program, e.scale, e.nodes) != (first.program, first.scale, first.nodes)
                for e in ends
            ):
                done.notes.append(
                    f"job {job}: its nodes' records disagree on program, scale or nodes; set aside"
                )
                for path, _ in parts:
                    _set_aside(spool, path)
                continue
            if len({e.node for e in ends}) < first.nodes:
                if now_s - min(e.ended_at for e in ends) > INCOMPLETE_WAIT_S:
                    done.notes.append(
                        f"job {job}: {len(ends)} of {first.nodes} nodes wrote a job-end "
                        f"record in {INCOMPLETE_WAIT_S:g} s; not counted"
                    )
                    finished += [p for p, _ in parts]
                continue
            run = combine(ends)
            entry = changed.get(run.program, entries.get(run.program))
            changed[run.program] = observe(entry, run)
            done.counted.append(
                f"job {job}: {run.program} at scale {run.scale}, {run.elapsed_s:.1f} s, "
                + ("alone" if run.alone else "shared a node (run time not learned)")
            )
            finished += [p for p, _ in parts]
        for entry in changed.values():
            write_learned(profiles_dir, entry)
        for path in finished:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    return done


def known_programs(config: Config) -> tuple[dict[str, Known], list[str]]:
    """Every program the store knows, admin's and learned (admin wins), and the learned
    files left out."""
    sns = config.policy.sns
    if sns.profiles_dir is None:
        return {}, []
    directory = Path(sns.profiles_dir)
    admin = load_store(directory)
    learned, problems = load_learned(directory)
    return for_policy(admin, learned), problems


def policy_profiles(config: Config) -> tuple[dict[str, Profile], dict[str, int]]:
    """The ``sns`` policy's profiles and programs to explore (the store's admin and learned
    entries; explored only with ``policy.sns.learn``)."""
    known, problems = known_programs(config)
    for problem in problems:
        log.warning("%s", problem)
    return policy_inputs(known, config.policy.sns.learn)


def learn_step(config: Config, now_s: float, dry_run: bool) -> Learning:
    """The cycle's learning step (nothing with ``learn`` off, no spool, or a dry run).

    Raises:
        ConfigError: ``learn_from`` without ``profiles_dir`` (the config check says so too).
    """
    sns = config.policy.sns
    if not sns.learn or sns.learn_from is None or dry_run:
        return Learning()
    if sns.profiles_dir is None:
        raise ConfigError("policy.sns.learn_from needs policy.sns.profiles_dir")
    return learn_from_spool(Path(sns.profiles_dir), Path(sns.learn_from), now_s)
