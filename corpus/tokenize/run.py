"""``corpus tokenize``: stream records from JSONL/Parquet, encode them in worker processes and write
one Megatron ``.bin/.idx`` pair per json key, in input order.

    reader (main process, raw lines) -> workers (JSON decode, validate, batch encode, pack numpy)
        -> ordered writer per key (main process) -> checkpoints -> atomic finalize

The output is the same bytes whatever ``workers``, ``batch_size`` or ``threads_per_worker``, and a run
resumed after a kill ends byte-identical to an uninterrupted one. Inputs and the output prefix may be URLs
(``s3://…``): a remote output is written, checkpointed and resumed in a local staging folder and uploaded when
complete, ``.idx`` last (:mod:`corpus.indexed.publish`). :func:`tokenize` is the library entry point the CLI calls
(and, once per trial, ``corpus autotune-workers``).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from corpus import storage
from corpus.core.disk import OutputError
from corpus.core.errors import UserError
from corpus.indexed import exists, sidecar, token_dtype_for_vocab
from corpus.indexed.publish import output_stage
from corpus.indexed.sidecar import options_hash
from corpus.readers import RawBatch, ReadOptions, Slice, describe_location, expand_inputs, extract, read_slices
from corpus.tokenize import resume_state as checkpoints
from corpus.tokenize.config import TokenizeConfig
from corpus.tokenize.executor import encode_in_pool, encode_inline
from corpus.tokenize.input_check import EncoderMismatch, InputCheck
from corpus.tokenize.outputs import Outputs, output_prefix_for, publish_outputs, unfinished_keys
from corpus.tokenize.progress import Progress
from corpus.tokenize.shards import Shard, plan_slices, resolve_shard
from corpus.tokenize.stats import Counters, RunStats, peak_rss_mb, write_stats_json
from corpus.tokenize.worker import BatchEncoder, EncodedBatch, WorkerSpec
from corpus.tokenizers import TextTokenizer, select_encoder
from corpus.tokenizers.select import record_difference

log = logging.getLogger(__name__)

#: ``on_batch(counters, largest worker peak RSS in KB so far)``, called after each written batch.
BatchHook = Callable[[Counters, int], None]

#: Bytes of input the reference library encodes again to check the fast encoder (besides the record limit).
SAMPLE_BYTES = 512 << 10
#: What ``--resume`` says after a full disk was freed (the partial files and the checkpoint are kept for it).
RESUME_HINT = "rerun the same command with --resume to continue (the *.partial files hold the work so far)"
#: Index and spill bytes per document and key while writing (lengths, pointers, document index).
INDEX_BYTES_PER_DOCUMENT = 32


class BadRecordError(UserError):
    """A bad input record under ``--on-error fail``."""


@dataclass
class Job:
    """A tokenize run, resolved: what to read, with which tokenizer, into which files."""

    config: TokenizeConfig
    shard: Shard
    prefix: str
    slices: list[Slice]
    tokenizer: TextTokenizer
    encoder_reason: str
    dtype: np.dtype
    eod: int | None
    input_check: InputCheck | None = None
    """The reference library's check of the first records, when the fast encoder was chosen."""

    @property
    def keys(self) -> list[str]:
        return self.config.json_keys

    @property
    def remote(self) -> bool:
        """Whether the outputs go to an object store (written in :attr:`stage`, then uploaded)."""
        return storage.is_remote(self.prefix)

    @property
    def stage(self) -> str:
        """The local prefix every file of the run is written under: :attr:`prefix` itself, or its staging prefix."""
        return output_stage(self.prefix)

    def fingerprint(self) -> dict:
        """Everything that changes the output bytes (a resume must match it exactly)."""
        record = {k: v for k, v in self.tokenizer.describe().items() if k != "encoder"}
        return {"inputs": [{**s.file.identity(), "start": s.start, "end": s.end} for s in self.slices],
                "tokenizer": record, "json_keys": self.keys, "append_eod": self.config.append_eod,
                "shard": [self.shard.index, self.shard.count], "dtype": str(self.dtype)}

    def meta(self, key: str, counters: Counters) -> dict:
        """The sidecar of one key's output."""
        return {
            "tokenizer": self.tokenizer.describe(), "encoder": self.tokenizer.encoder_name,
            "encoder_reason": self.encoder_reason, "vocab_size": self.tokenizer.vocab_size,
            "eod_id": self.tokenizer.eod, "bos_id": self.tokenizer.bos, "json_key": key,
            "append_eod": self.config.append_eod, "options_hash": options_hash(self.fingerprint()),
            "inputs": [{"path": s.file.path, "size": s.file.size, "start": s.start, "end": s.end} for s in self.slices],
            "shard": {"index": self.shard.index, "count": self.shard.count},
            "records": {"read": counters.records_read, "written": counters.records_written,
                        "skipped": counters.records_skipped, "blank_lines": counters.blank_lines,
                        "bytes": counters.record_bytes},
        }


def _fast_encoder(tokenizer: TextTokenizer) -> bool:
    from corpus.tokenizers.gigatoken import GigatokenTextTokenizer

    return isinstance(tokenizer, GigatokenTextTokenizer)


@dataclass
class _Sample:
    """What the first records of the input hold: how many texts could be taken from them and the first bad one,
    as (location, reason), so a wrong ``--json-keys`` is refused before any work."""

    usable: int = 0
    bad: tuple[dict, str] | None = None


def _sample(slices: list[Slice], keys: list[str], limit: int) -> _Sample:
    """Read up to ``limit`` records (and :data:`SAMPLE_BYTES` of text) from the start of the input; none when
    ``limit`` is 0 (``sample_records=0``: no look, as autotune's timed runs ask)."""
    sample, records, text_bytes = _Sample(), 0, 0
    if not limit:
        return sample
    batches = read_slices(slices, ReadOptions(keys, limit, SAMPLE_BYTES))
    try:
        for batch in batches:
            extracted = extract(batch.payload, keys)
            if sample.bad is None and (extracted.bad or batch.read_error):
                sample.bad = next(((batch.location(batch.numbers[i]), why) for i, why in extracted.bad),
                                  (batch.location(batch.error_number), batch.read_error))
            for column in extracted.texts:
                sample.usable += len(column)
                text_bytes += sum(min(len(text), SAMPLE_BYTES) for text in column)  # a huge document counts its start
            records += len(batch.payload)
            if records >= limit or text_bytes >= SAMPLE_BYTES:
                break
    finally:
        batches.close()
    return sample


def bad_record_message(location: dict, reason: str, prefix: str) -> str:
    """What a bad record under ``--on-error fail`` says: where, why, and how to go on."""
    return (f"{describe_location(location)}: {reason} (--on-error skip skips bad records and lists them in "
            f"{prefix}.skipped.jsonl)")


def _refuse_bad_sample(config: TokenizeConfig, sample: _Sample, prefix: str) -> None:
    """A bad record among the first ones stops the run now under ``--on-error fail``; under ``skip``, so does a
    sample without one good record (a misspelt ``--json-keys`` would skip the whole input)."""
    if sample.bad is None or (config.on_error == "skip" and sample.usable):
        return
    location, reason = sample.bad
    if config.on_error == "fail":
        raise BadRecordError(bad_record_message(location, reason, prefix))
    raise BadRecordError(f"{describe_location(location)}: {reason}, and no record among the first "
                         f"{config.sample_records} is usable: check --json-keys {' '.join(config.json_keys)}")


def prepare(config: TokenizeConfig) -> Job:
    """Resolve inputs, shard and tokenizer; refuse a bad first record; start the check of the input when the fast
    encoder was chosen and the reference library is loaded (or ``check_input`` asks to load it)."""
    storage.configure(config.storage_options)
    files = expand_inputs(config.inputs)
    shard = resolve_shard(config.shard_index, config.num_shards)
    slices = plan_slices(files, shard)
    prefix = shard.prefix(config.output_prefix)
    # The first records are read while the tokenizer is built: from an object store their first bytes take a
    # round trip or more, which the build (CPU) hides.
    with ThreadPoolExecutor(1, thread_name_prefix="blendforge-sample") as pool:
        sampling = pool.submit(_sample, slices, config.json_keys, config.sample_records)
        try:
            tokenizer, reason = select_encoder(config.tokenizer, (), config.threads)
        except Exception:
            _refuse_bad_sample(config, sampling.result(), prefix)  # a bad first record is the first thing to fix
            raise
    _refuse_bad_sample(config, sampling.result(), prefix)
    eod = tokenizer.require_eod() if config.append_eod else None
    dtype = token_dtype_for_vocab(tokenizer.vocab_size)
    check = None
    if config.sample_records and _fast_encoder(tokenizer) and (config.check_input or tokenizer.loaded_reference):
        check = InputCheck(tokenizer.loaded_reference or config.tokenizer, config.json_keys, config.sample_records,
                           SAMPLE_BYTES, tokenizer.encoder_name, eod, dtype)
    if shard.count > 1:
        log.info("shard %d of %d (from %s): %d slice(s) of %d input file(s)", shard.index, shard.count,
                 shard.source, len(slices), len(files))
    log.info("encoder: %s", reason)
    return Job(config, shard, prefix, slices, tokenizer, reason, dtype, eod, check)


def _previous_state(job: Job) -> dict | None:
    """The checkpoint to continue from (``--resume``), or None to start from the beginning."""
    state_file = checkpoints.state_path(job.stage)
    if not job.config.resume:
        if state_file.exists():
            log.warning("%s: discarding the partial output of an interrupted run (pass --resume to continue it)",
                        job.prefix)
            checkpoints.remove(job.stage)
        if job.remote:
            storage.clear_staging(job.prefix)
        return None
    state = checkpoints.load(job.stage)
    if state is None:
        log.info("--resume: no checkpoint at %s, starting from the beginning", state_file)
        return None
    checkpoints.check_same_run(state, job.fingerprint(), job.stage)
    log.info("--resume: continuing %s from %s", job.prefix, state_file)
    return state


def _chosen_encoder(tokenizer: TextTokenizer) -> str:
    """The ``encoder`` setting that makes workers build what the start-up check chose (no new check)."""
    return "gigatoken" if _fast_encoder(tokenizer) else "reference"


def _encoded(job: Job, state: dict | None) -> Iterator[tuple[RawBatch, EncodedBatch]]:
    """The encoded batches of the shard from the checkpoint on, in input order."""
    config = job.config
    batches = read_slices(job.slices, ReadOptions(job.keys, config.batch_size, config.batch_bytes),
                          checkpoints.resume_point(state) if state else None)
    spec = WorkerSpec(config.tokenizer.replace(encoder=_chosen_encoder(job.tokenizer)), config.threads,
                      tuple(job.keys), job.eod, str(job.dtype))
    if config.workers == 0:
        return encode_inline(batches, BatchEncoder(spec, job.tokenizer))
    return encode_in_pool(batches, spec, config.workers)


class _Writing:
    """The main process's half of a run: ordered writing, bad-record policy, counters, checkpoints."""

    def __init__(self, job: Job, state: dict | None, keys: list[str] | None = None) -> None:
        self.job = job
        self.counters = Counters(**state["counters"]) if state else Counters(tokens=dict.fromkeys(job.keys, 0))
        self.outputs = Outputs(job.stage, job.keys if keys is None else keys, job.dtype, state)
        self.last_checkpoint = time.monotonic()
        self.worker_rss_kb = 0

    def _bad(self, batch: RawBatch, result: EncodedBatch) -> list[tuple[dict, str]]:
        found = [(batch.location(batch.numbers[index]), reason) for index, reason in result.bad]
        if batch.read_error:
            found.append((batch.location(batch.error_number), batch.read_error))
        return found

    def consume(self, batch: RawBatch, result: EncodedBatch) -> None:
        """Write one encoded batch (or stop at its first bad record under ``--on-error fail``)."""
        bad = self._bad(batch, result)
        if bad and self.job.config.on_error == "fail":
            raise BadRecordError(bad_record_message(*bad[0], self.job.prefix))
        for location, reason in bad:
            self.outputs.skipped.add(location, reason)
        self.outputs.add(result.tokens, result.lengths)
        if self.job.input_check:
            self.job.input_check.offer(batch, result)
        counters = self.counters
        counters.records_read += len(batch.payload) + bool(batch.read_error)
        counters.records_skipped += len(bad)
        counters.records_written += len(batch.payload) - len(result.bad)
        counters.blank_lines += batch.blank_lines
        counters.input_bytes = batch.progress
        counters.record_bytes += batch.record_bytes
        for key, flat in zip(self.job.keys, result.tokens):
            counters.tokens[key] += len(flat)
        self.worker_rss_kb = max(self.worker_rss_kb, result.peak_rss_kb)
        if time.monotonic() - self.last_checkpoint >= self.job.config.checkpoint_interval:
            self.checkpoint(vars(batch.resume))

    def checkpoint(self, resume: dict, phase: str = "running") -> None:
        """Make the outputs durable, then record where to resume (in that order)."""
        outputs = self.outputs.checkpoint()
        checkpoints.save(self.job.stage, {"phase": phase, "fingerprint": self.job.fingerprint(), "resume": resume,
                                           "counters": self.counters.to_dict(), **outputs})
        self.last_checkpoint = time.monotonic()

    def finalize(self) -> None:
        """Write indexes and sidecars, rename everything into place (upload it all, for a remote output), drop the
        checkpoint. Redone whole after a crash, which is safe: renames and uploads repeat with the same files."""
        self.outputs.finalize({key: self.job.meta(key, self.counters) for key in self.outputs.writers},
                              keep_skipped=self.counters.records_skipped > 0)
        if self.job.remote:
            publish_outputs(self.job.stage, self.job.prefix, self.job.keys)
        checkpoints.remove(self.job.stage)
        if self.job.remote:
            storage.clear_staging(self.job.prefix)

    def finish(self) -> None:
        """Wait for the input check, checkpoint as "finalizing" (a crash from here on only needs the renames
        redone), then finalize."""
        if self.job.input_check:
            self.job.encoder_reason += "; " + self.job.input_check.finish()
        self.checkpoint({"slice_index": len(self.job.slices)}, phase="finalizing")
        self.finalize()


def _write_all(job: Job, state: dict | None, on_batch: BatchHook | None) -> tuple[_Writing, Counters]:
    """Read, encode and write the whole shard from the checkpoint on; returns the writer and the
    counters at the start (to measure this process's own rates)."""
    writing = _Writing(job, state)
    start = Counters(**{**writing.counters.to_dict(), "tokens": dict(writing.counters.tokens)})
    if state is None:
        writing.checkpoint({"slice_index": 0})
    total = sum(piece.size for piece in job.slices)
    progress = Progress(total, start, job.config.quiet, job.config.log_interval, Path(job.prefix).name)
    try:
        for batch, result in _encoded(job, state):
            writing.consume(batch, result)
            progress.update(writing.counters)
            if on_batch:
                on_batch(writing.counters, writing.worker_rss_kb)
        writing.finish()
    except (BadRecordError, EncoderMismatch) as error:
        writing.outputs.abort()
        checkpoints.remove(job.stage)
        if isinstance(error, EncoderMismatch) and job.input_check.differences:
            record_difference(job.config.tokenizer, job.input_check.remembered())
        raise
    except OutputError as error:
        writing.outputs.close()
        raise error.for_command("--output-prefix", RESUME_HINT, _bytes_still_needed(job, writing.counters)) from None
    except BaseException:
        writing.outputs.close()
        raise
    finally:
        progress.close()
    return writing, start


def _bytes_still_needed(job: Job, counters: Counters) -> int | None:
    """About how many more bytes the outputs need: what was written per input byte, times the input left (None
    before any input was done, or when none is left: then the writer's own figure stands)."""
    total = sum(piece.size for piece in job.slices)
    done = counters.input_bytes
    if not done or done >= total:
        return None
    written = (counters.total_tokens * job.dtype.itemsize
               + INDEX_BYTES_PER_DOCUMENT * counters.records_written * len(job.keys))
    return int(written * (total - done) / done)


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
        peak_rss_mb=peak_rss_mb(), peak_worker_rss_mb=worker_rss_kb / 1024, skipped_file=skipped)


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


def _write(job: Job, state: dict | None, on_batch: BatchHook | None) -> tuple[_Writing, Counters]:
    """Write the outputs from ``state`` on (or only finish their renames, when the run died finalizing)."""
    if state and state["phase"] == "finalizing":
        writing = _Writing(job, state, unfinished_keys(job.stage, job.keys))
        writing.finalize()
        return writing, writing.counters
    return _write_all(job, state, on_batch)


def tokenize(config: TokenizeConfig, on_batch: BatchHook | None = None) -> RunStats:
    """Tokenize ``config.inputs`` into ``P_<key>_document.bin/.idx`` (+ sidecar) and return the statistics.

    Raises :class:`BadRecordError` (under ``on_error="fail"``) or another :class:`UserError` for
    problems a person must fix; an interrupted run leaves its checkpoint for ``resume=True``.
    ``on_batch(counters, worker_rss_kb)`` runs after each batch is written, with the largest peak RSS a
    pool worker has reported so far (``corpus autotune-workers`` times the steady state and sizes the
    workers with it); an exception it raises stops the run like an interrupt.
    """
    began = time.monotonic()
    job = prepare(config)
    startup = time.monotonic() - began
    try:
        return _run(job, config, on_batch, began, startup)
    finally:
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
            writing, start = _write(job, state, on_batch)
        except OutputError as error:
            raise error.for_command("--output-prefix", RESUME_HINT) from None
        counters, worker_rss_kb = writing.counters, writing.worker_rss_kb
    resumed = state is not None or done is not None
    if counters.records_written == 0:
        log.warning("%s: no document was written (%d records read, %d skipped): the outputs are empty datasets; "
                    "check --input and --json-keys", job.prefix, counters.records_read, counters.records_skipped)
    stats = _stats(job, counters, start, (time.monotonic() - began, startup), resumed, worker_rss_kb)
    if config.stats_json:
        write_stats_json(config.stats_json, stats)
    return stats
