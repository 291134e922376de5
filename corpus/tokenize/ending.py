"""The end of a run: wait for the input check, finalize the outputs (publish them, for an object store), remove the
checkpoint and the parts; or, after a bad record, leave nothing."""

from __future__ import annotations

from corpus import storage
from corpus.tokenize import resume_state as checkpoints
from corpus.tokenize.input_check import EncoderMismatch
from corpus.tokenize.job import Job
from corpus.tokenize.join import remove_parts
from corpus.tokenize.outputs import Outputs, publish_outputs
from corpus.tokenize.stats import Counters
from corpus.tokenizers.select import record_difference

#: What ``--resume`` says after a full disk was freed (the partial files and the checkpoint are kept for it).
RESUME_HINT = "rerun the same command with --resume to continue (the *.partial files hold the work so far)"


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


