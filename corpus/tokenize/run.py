"""``corpus tokenize``: stream records from JSONL/Parquet, encode them and write one Megatron ``.bin/.idx`` pair per
json key, in input order, on every core the process may use.

    plan (parts of the input) -> processes, each reading, decoding, encoding and writing its parts
        -> the parts joined in order into the outputs -> checkpoints -> atomic finalize

A run of one part (a small input, or one that cannot be cut) writes its outputs directly, encoding in this process or
in encoder processes. The output is the same bytes whatever ``workers``, ``batch_size`` or ``threads_per_worker``,
and a run resumed after a kill ends byte-identical to an uninterrupted one. Inputs and the output prefix may be URLs
(``s3://…``): a remote output is written, checkpointed and resumed in a local staging folder and uploaded when
complete, ``.idx`` last (:mod:`corpus.indexed.publish`). :func:`tokenize` is the library entry point the CLI calls
(and, once per trial, ``corpus autotune-workers``).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable

from corpus import storage
from corpus.core.disk import OutputError
from corpus.indexed import exists, sidecar
from corpus.indexed.sidecar import options_hash
from corpus.tokenize import resume_state as checkpoints
from corpus.tokenize.config import TokenizeConfig
from corpus.tokenize.ending import RESUME_HINT, failing_cleanly, finalize, finish
from corpus.tokenize.errors import BadRecordError
from corpus.tokenize.job import Job, prepare
from corpus.tokenize.join import remove_parts
from corpus.tokenize.outputs import Outputs, output_prefix_for, unfinished_keys
from corpus.tokenize.parallel import write_parts
from corpus.tokenize.part import PartWriting, write_part
from corpus.tokenize.progress import Progress
from corpus.tokenize.stats import Counters, RunStats, peak_rss_mb, write_stats_json
from corpus.tokenize.worker import BatchEncoder

log = logging.getLogger(__name__)

#: ``on_batch(counters, largest worker peak RSS in KB so far)``, called after each written batch.
BatchHook = Callable[[Counters, int], None]

__all__ = ["BadRecordError", "BatchHook", "RESUME_HINT", "tokenize"]


def _previous_state(job: Job) -> dict | None:
    """The checkpoint to continue from (``--resume``), or None to start from the beginning (discarding what an
    interrupted run left, without ``--resume``)."""
    if not job.config.resume:
        if checkpoints.state_path(job.stage).exists():
            log.warning("%s: discarding the partial output of an interrupted run (pass --resume to continue it)",
                        job.prefix)
            checkpoints.remove(job.stage)
        remove_parts(job.stage)
        if job.remote:
            storage.clear_staging(job.prefix)
        return None
    if job.state is None:
        log.info("--resume: no checkpoint at %s, starting from the beginning", checkpoints.state_path(job.stage))
        return None
    checkpoints.check_same_run(job.state, job.fingerprint(), job.stage)
    log.info("--resume: continuing %s from %s", job.prefix, checkpoints.state_path(job.stage))
    return job.state


def _write_one_part(job: Job, state: dict | None, on_batch: BatchHook | None) -> tuple[Counters, Counters, int]:
    """A run of one part: read, encode and write straight into the outputs from the checkpoint on; returns the
    counters, the counters at the start (to measure this process's own rates) and the encoders' peak RSS."""
    outputs = Outputs(job.stage, job.keys, job.dtype, state)
    check = job.input_check
    writing = PartWriting(job.task(0, job.stage), outputs, state, job.save, check.offer if check else None)
    start = Counters(**{**writing.counters.to_dict(), "tokens": dict(writing.counters.tokens)})
    progress = Progress(job.parts[0].size, start, job.config.quiet, job.config.log_interval, Path(job.prefix).name)

    def report(counters: Counters, peak_rss_kb: int) -> None:
        progress.update(counters)
        if on_batch:
            on_batch(counters, peak_rss_kb)

    try:
        with failing_cleanly(job, outputs, lambda: writing.counters):
            write_part(writing, BatchEncoder(job.spec(), job.tokenizer), state, report)
            finish(job, outputs, writing.counters, {"resume": {"slice_index": len(job.parts[0].slices)}})
    finally:
        progress.close()
    return writing.counters, start, writing.worker_rss_kb


def _stats(job: Job, counters: Counters, start: Counters, seconds: tuple[float, float], resumed: bool,
           worker_rss_kb: int) -> RunStats:
    """``seconds``: the whole run and its start-up."""
    skipped = f"{job.prefix}.skipped.jsonl" if counters.records_skipped else None
    return RunStats(
        counters=counters, seconds=seconds[0], startup_seconds=seconds[1],
        rate_records=counters.records_read - start.records_read,
        rate_bytes=counters.input_bytes - start.input_bytes, rate_tokens=counters.total_tokens - start.total_tokens,
        rate_record_bytes=counters.record_bytes - start.record_bytes,
        input_bytes_total=sum(piece.size for piece in job.slices), encoder=job.tokenizer.encoder_name,
        encoder_reason=job.encoder_reason, shard={"index": job.shard.index, "count": job.shard.count},
        outputs=[output_prefix_for(job.prefix, key) for key in job.keys], resumed=resumed,
        peak_rss_mb=peak_rss_mb(), peak_worker_rss_mb=worker_rss_kb / 1024, skipped_file=skipped,
        processes=job.processes, parts=len(job.parts))


def _already_done(job: Job) -> Counters | None:
    """With ``--resume`` and no checkpoint: the counters of a finished run of the very same job (every
    key's pair in place, sidecars with this job's options hash), so a requeued Slurm task is a no-op."""
    wanted = options_hash(job.fingerprint())
    metas = [sidecar.read(output_prefix_for(job.prefix, key)) for key in job.keys]
    if not all(meta and meta.get("options_hash") == wanted and exists(output_prefix_for(job.prefix, key))
               for key, meta in zip(job.keys, metas)):
        return None
    records = metas[0]["records"]
    return Counters(records_read=records["read"], records_written=records["written"],
                    records_skipped=records["skipped"], blank_lines=records.get("blank_lines", 0),
                    input_bytes=sum(piece.size for piece in job.slices), record_bytes=records.get("bytes", 0),
                    tokens={key: meta["num_tokens"] for key, meta in zip(job.keys, metas)})


def _write(job: Job, state: dict | None, on_batch: BatchHook | None) -> tuple[Counters, Counters, int]:
    """Write the outputs from ``state`` on (or only finish their renames, when the run died finalizing)."""
    if state and state["phase"] == "finalizing":
        counters = Counters(**state["counters"])
        finalize(job, Outputs(job.stage, unfinished_keys(job.stage, job.keys), job.dtype, state), counters)
        return counters, counters, 0
    if len(job.parts) == 1:
        return _write_one_part(job, state, on_batch)
    return write_parts(job, state, on_batch)


def tokenize(config: TokenizeConfig, on_batch: BatchHook | None = None) -> RunStats:
    """Tokenize ``config.inputs`` into ``P_<key>_document.bin/.idx`` (+ sidecar) and return the statistics.

    Raises :class:`BadRecordError` (under ``on_error="fail"``) or another :class:`UserError` for
    problems a person must fix; an interrupted run leaves its checkpoint for ``resume=True``.
    ``on_batch(counters, worker_rss_kb)`` runs after each batch is written, with the largest peak RSS a
    worker process has reported so far (``corpus autotune-workers`` times the steady state and sizes the
    workers with it); an exception it raises stops the run like an interrupt.
    """
    began = time.monotonic()
    job = prepare(config)
    startup = time.monotonic() - began
    try:
        return _run(job, config, on_batch, began, startup)
    finally:
        if job.pool:
            job.pool.close()
        if job.input_check:
            job.input_check.close()


def _run(job: Job, config: TokenizeConfig, on_batch: BatchHook | None, began: float, startup: float) -> RunStats:
    """:func:`tokenize` after the start-up."""
    state = _previous_state(job)
    done = _already_done(job) if config.resume and state is None else None
    if done is not None:
        log.info("--resume: %s is already complete for these inputs and options; nothing to do", job.prefix)
        counters, start, worker_rss_kb = done, done, 0
    else:
        try:
            counters, start, worker_rss_kb = _write(job, state, on_batch)
        except OutputError as error:
            raise error.for_command("--output-prefix", RESUME_HINT) from None
    resumed = state is not None or done is not None
    if counters.records_written == 0:
        log.warning("%s: no document was written (%d records read, %d skipped): the outputs are empty datasets; "
                    "check --input and --json-keys", job.prefix, counters.records_read, counters.records_skipped)
    stats = _stats(job, counters, start, (time.monotonic() - began, startup), resumed, worker_rss_kb)
    if config.stats_json:
        write_stats_json(config.stats_json, stats)
    return stats
