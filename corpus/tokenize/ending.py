"""The end of a run: wait for the input check, finalize the outputs (publish them, for an object store), remove the
checkpoint and the parts; or, when writing fails, leave nothing after a bad record and everything ``--resume``
needs after anything else."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

from corpus import storage
from corpus.core.disk import OutputError
from corpus.readers import lines_before
from corpus.tokenize import resume_state as checkpoints
from corpus.tokenize.errors import BadRecordError, EncoderMismatch
from corpus.tokenize.job import Job
from corpus.tokenize.join import remove_parts
from corpus.tokenize.outputs import Outputs, publish_outputs
from corpus.tokenize.stats import Counters
from corpus.tokenizers.select import record_difference

#: What ``--resume`` says after a full disk was freed (the partial files and the checkpoint are kept for it).
RESUME_HINT = "rerun the same command with --resume to continue (the *.partial files hold the work so far)"
#: Index and spill bytes per document and key while writing (lengths, pointers, document index).
INDEX_BYTES_PER_DOCUMENT = 32


def finish(job: Job, outputs: Outputs, counters: Counters, record: dict) -> None:
    """Wait for the input check, checkpoint as "finalizing" (``record``: the rest of the checkpoint; a crash from
    here on only needs the renames redone), then finalize."""
    if job.input_check:
        job.encoder_reason += "; " + job.input_check.finish()
    job.save({"phase": "finalizing", "counters": counters.to_dict(), **record, **outputs.checkpoint()})
    finalize(job, outputs, counters)


def finalize(job: Job, outputs: Outputs, counters: Counters) -> None:
    """Write indexes and sidecars, rename everything into place (upload it all, for a remote output), drop the
    checkpoint and the parts. Redone whole after a crash, which is safe: renames and uploads repeat."""
    metas = {key: job.meta(key, counters) for key in outputs.writers}
    outputs.finalize(metas, keep_skipped=counters.records_skipped > 0)
    if job.remote:
        publish_outputs(job.stage, job.prefix, job.keys)
    checkpoints.remove(job.stage)
    remove_parts(job.stage)
    if job.remote:
        storage.clear_staging(job.prefix)


def abandon(job: Job, error: BaseException) -> None:
    """After a bad record or an encoder mismatch: no output is left, and a mismatch is remembered for the next run."""
    checkpoints.remove(job.stage)
    remove_parts(job.stage)
    if isinstance(error, EncoderMismatch) and job.input_check.differences:
        record_difference(job.config.tokenizer, job.input_check.remembered())




@contextmanager
def failing_cleanly(job: Job, outputs: Outputs, done: Callable[[], Counters], stop: Callable[[], None] = lambda: None
                    ) -> Iterator[None]:
    """How the writing of a run ends when it fails: ``stop()`` its workers first; after a bad record or an encoder
    mismatch, leave no output (and name the record's true line); otherwise keep the partial files and checkpoints
    for ``--resume``, a full disk saying about how much more the outputs need (``done()``: the counters so far)."""
    try:
        yield
    except (BadRecordError, EncoderMismatch) as error:
        stop()
        outputs.abort()
        abandon(job, error)
        if isinstance(error, BadRecordError):
            raise located(error) from None
        raise
    except OutputError as error:
        stop()
        outputs.close()
        raise error.for_command("--output-prefix", RESUME_HINT, bytes_still_needed(job, done())) from None
    except BaseException:
        stop()
        outputs.close()
        raise


def located(error: BadRecordError) -> BadRecordError:
    """The error with the record's true line, when its part numbered lines from a cut inside the file."""
    if error.slice_start is None or "line" not in error.location:
        return error
    location = {**error.location, "line": error.location["line"] + lines_before(error.location["file"],
                                                                                  error.slice_start)}
    return BadRecordError(location, error.reason, error.prefix)


def bytes_still_needed(job: Job, counters: Counters) -> int | None:
    """About how many more bytes the outputs need: what was written per input byte, times the input left (None
    before any input was done, or when none is left: then the writer's own figure stands)."""
    total = sum(piece.size for piece in job.slices)
    done = counters.input_bytes
    if not done or done >= total:
        return None
    written = (counters.total_tokens * job.dtype.itemsize
               + INDEX_BYTES_PER_DOCUMENT * counters.records_written * len(job.keys))
    return int(written * (total - done) / done)
