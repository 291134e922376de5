"""The checkpoints of a running tokenize: ``<prefix>.tokenize-state.json`` for the run, and one per part of a run of
several (in its parts folder).

Written atomically (temporary name, fsync, rename) only after every output file was made durable, so a checkpoint
never points past data that a crash could lose; a part's record of being done is the exception: neither it nor the
part's files are synced, it records the files' checksums, and a resumed run writes the part again when the record is
unreadable or the checksums differ (:func:`corpus.tokenize.part.run_part`). The run's records its parts, where
reading resumes (a run of one part) or how many parts are joined (a run of several), the sizes of the partial files,
the counters, and a fingerprint of everything that changes the output bytes: resuming with other inputs or options is
refused instead of silently mixing two runs. A checkpoint of an older layout is refused with the way out (start again).
"""

from __future__ import annotations

import json
from pathlib import Path

from corpus.core.atomic_write import write_atomically
from corpus.core.disk import guard
from corpus.readers import ResumePoint
from corpus.tokenize.errors import ResumeError

STATE_VERSION = 2


def state_path(prefix: str) -> Path:
    """Where the checkpoint of the run writing ``prefix`` lives."""
    return Path(f"{prefix}.tokenize-state.json")


def save(prefix: str, state: dict, durable: bool = True) -> None:
    """Atomically replace the checkpoint (the previous one stays in place when the disk refuses the new one);
    ``durable=False``: not synced (see :func:`corpus.core.atomic_write.atomic_path`)."""
    target = state_path(prefix)
    with guard(target):
        write_atomically(target, json.dumps({"version": STATE_VERSION, **state}), durable)


def load(prefix: str) -> dict | None:
    """The checkpoint of an interrupted run, or None when there is none."""
    target = state_path(prefix)
    try:
        state = json.loads(target.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise ResumeError(f"{target}: unreadable checkpoint ({error}); start again without --resume") from None
    if state.get("version") != STATE_VERSION:
        raise ResumeError(f"{target}: checkpoint version {state.get('version')} is not {STATE_VERSION}; "
                          "start again without --resume")
    return state


def check_same_run(state: dict, fingerprint: dict, prefix: str) -> None:
    """Refuse to resume when inputs or output-changing options differ from the interrupted run's."""
    before = state.get("fingerprint", {})
    changed = sorted(name for name in set(before) | set(fingerprint) if before.get(name) != fingerprint.get(name))
    if changed:
        raise ResumeError(f"{state_path(prefix)}: cannot resume, {', '.join(changed)} changed since the interrupted "
                          "run "
                          "(inputs must be unchanged and options the same); start again without --resume")


def resume_point(state: dict) -> ResumePoint:
    """Where reading continues."""
    return ResumePoint(**state["resume"])


def remove(prefix: str) -> None:
    """Drop the checkpoint (the run finished or was abandoned)."""
    state_path(prefix).unlink(missing_ok=True)
