"""A tokenize run resolved before any work: its inputs and shard, its tokenizer, how it is cut into parts and how
many processes and threads write them; and the look at the first records that refuses a wrong ``--json-keys``
before anything is written."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from corpus import storage
from corpus.indexed import token_dtype_for_vocab
from corpus.indexed.publish import output_stage
from corpus.indexed.sidecar import options_hash
from corpus.readers import ReadOptions, Slice, describe_location, expand_inputs, extract, read_slices
from corpus.tokenize import resume_state as checkpoints
from corpus.tokenize.config import TokenizeConfig
from corpus.tokenize.errors import BadRecordError
from corpus.tokenize.input_check import InputCheck
from corpus.tokenize.part import PartTask
from corpus.tokenize.plan import MIN_PARALLEL_BYTES, MIN_PARALLEL_CORES, Part, plan_parts
from corpus.tokenize.pool import PartPool
from corpus.tokenize.shards import Shard, plan_slices, resolve_shard
from corpus.tokenize.stats import Counters
from corpus.tokenize.worker import WorkerSpec
from corpus.tokenizers import TextTokenizer, select_encoder, settled_encoder

log = logging.getLogger("corpus.tokenize.run")

#: Bytes of input the reference library encodes again to check the fast encoder (besides the record limit).
SAMPLE_BYTES = 512 << 10


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
    parts: list[Part] = field(default_factory=list)
    """How the input is cut for the processes (one part: this process writes the outputs itself)."""
    processes: int = 1
    """Processes writing parts at once, this one included (with one part: encoder processes, 1 for none)."""
    threads: int = 1
    """Threads of each batch call."""
    input_check: InputCheck | None = None
    """The reference library's check of the first records, when the fast encoder was chosen."""
    state: dict | None = None
    """The checkpoint of the interrupted run to continue (``--resume``), whose parts this run keeps."""
    pool: PartPool | None = None
    """The worker processes of a run of several parts, started with the job."""
    _tokenizer_record: dict | None = field(default=None, init=False, repr=False)

    @property
    def keys(self) -> list[str]:
        return self.config.json_keys

    @property
    def remote(self) -> bool:
        """Whether the outputs go to an object store (written in :attr:`stage`, then uploaded)."""
        return storage.is_remote(self.prefix)

    @property
    def encoder_processes(self) -> int:
        """Encoder processes beside this one's reading, for a run of one part (0: it encodes itself)."""
        return self.processes if len(self.parts) == 1 and self.processes > 1 else 0

    def spec(self) -> WorkerSpec:
        """What another process needs to encode exactly as this run chose (the encoder fixed: no new check)."""
        encoder = "gigatoken" if _fast_encoder(self.tokenizer) else "reference"
        return WorkerSpec(self.config.tokenizer.replace(encoder=encoder), self.threads, tuple(self.keys), self.eod,
                          str(self.dtype))

    def task(self, index: int, prefix: str) -> PartTask:
        """The task of writing part ``index`` under ``prefix``."""
        config = self.config
        return PartTask(self.parts[index], prefix, self.spec(), config.batch_size, config.batch_bytes,
                        config.on_error, config.checkpoint_interval, self.prefix, self.encoder_processes)

    def save(self, record: dict) -> None:
        """Record the run's checkpoint ``record``, with what identifies the run (its fingerprint and parts) added."""
        checkpoints.save(self.stage, {**record, "fingerprint": self.fingerprint(),
                                      "plan": [part.record() for part in self.parts]})

    @property
    def stage(self) -> str:
        """The local prefix every file of the run is written under: :attr:`prefix` itself, or its staging prefix."""
        return output_stage(self.prefix)

    def tokenizer_record(self) -> dict:
        """The tokenizer's sidecar record, made once per run: it hashes the tokenizer's files, and every checkpoint
        records it (in :meth:`fingerprint`), on the thread that hands the workers their parts."""
        if self._tokenizer_record is None:
            self._tokenizer_record = self.tokenizer.describe()
        return self._tokenizer_record

    def fingerprint(self) -> dict:
        """Everything that changes the output bytes (a resume must match it exactly)."""
        record = {k: v for k, v in self.tokenizer_record().items() if k != "encoder"}
        return {"inputs": [{**s.file.identity(), "start": s.start, "end": s.end} for s in self.slices],
                "tokenizer": record, "json_keys": self.keys, "append_eod": self.config.append_eod,
                "shard": [self.shard.index, self.shard.count], "dtype": str(self.dtype)}

    def meta(self, key: str, counters: Counters) -> dict:
        """The sidecar of one key's output."""
        return {
            "tokenizer": self.tokenizer_record(), "encoder": self.tokenizer.encoder_name,
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
    """What the first records of the input hold: how many texts could be taken from them, the first bad one, as
    (location, reason), and whether any record (not the stream) was bad, so a wrong ``--json-keys`` is refused
    before any work."""

    usable: int = 0
    bad: tuple[dict, str] | None = None
    bad_record: bool = False


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
            sample.bad_record = sample.bad_record or bool(extracted.bad)
            for column in extracted.texts:
                sample.usable += len(column)
                text_bytes += sum(min(len(text), SAMPLE_BYTES) for text in column)  # a huge document counts its start
            records += len(batch.payload)
            if records >= limit or text_bytes >= SAMPLE_BYTES:
                break
    finally:
        batches.close()
    return sample


def _refuse_bad_sample(config: TokenizeConfig, sample: _Sample, prefix: str) -> None:
    """A bad record among the first ones stops the run now under ``--on-error fail``; under ``skip``, so does a
    sample without one good record (a misspelt ``--json-keys`` would skip the whole input). A stream cut or
    corrupt before its first whole record says nothing of the keys: under ``skip`` it is quarantined as every
    later cut is, whatever the codec."""
    if sample.bad is None or (config.on_error == "skip" and (sample.usable or not sample.bad_record)):
        return
    location, reason = sample.bad
    if config.on_error == "fail":
        raise BadRecordError(location, reason, prefix)
    unusable = (f"{describe_location(location)}: {reason}, and no record among the first {config.sample_records} "
                f"is usable: check --json-keys {' '.join(config.json_keys)}")
    raise BadRecordError(location, reason, prefix, message=unusable)


def _parts(config: TokenizeConfig, slices: list[Slice]) -> list[Part]:
    """The parts of a new run: for the workers asked for, else for every core when there are enough of them."""
    if config.workers:
        return plan_parts(slices, config.workers, config.min_part_bytes, 0)
    if config.processes < MIN_PARALLEL_CORES:
        return [Part(0, tuple(slices))]
    return plan_parts(slices, config.processes, config.min_part_bytes)


def _processes(config: TokenizeConfig, parts: list[Part], size: int) -> int:
    """Processes at work: one per part up to what was asked; for an input of one part that cannot be cut, encoder
    processes when asked for, or by default when it is large enough to repay their start."""
    if len(parts) > 1:
        return min(config.processes, len(parts))
    if config.workers:
        return config.workers
    if config.processes >= MIN_PARALLEL_CORES and size >= MIN_PARALLEL_BYTES:
        return config.processes
    return 1


def _tokenizer(config: TokenizeConfig, slices: list[Slice], prefix: str, threads: int
               ) -> tuple[TextTokenizer, str, InputCheck | None]:
    """The tokenizer, why it was chosen, and the check of the input when the fast encoder was chosen and the
    reference library is loaded (or ``check_input`` asks to load it); a bad first record refused first."""
    # The first records are read while the tokenizer is built: from an object store their first bytes take a
    # round trip or more, which the build (CPU) hides.
    with ThreadPoolExecutor(1, thread_name_prefix="blendforge-sample") as sampler:
        sampling = sampler.submit(_sample, slices, config.json_keys, config.sample_records)
        try:
            tokenizer, reason = select_encoder(config.tokenizer, (), threads)
        except Exception:
            _refuse_bad_sample(config, sampling.result(), prefix)  # a bad first record is the first thing to fix
            raise
    _refuse_bad_sample(config, sampling.result(), prefix)
    check = None
    if config.sample_records and _fast_encoder(tokenizer) and (config.check_input or tokenizer.loaded_reference):
        eod = tokenizer.require_eod() if config.append_eod else None
        check = InputCheck(tokenizer.loaded_reference or config.tokenizer, config.json_keys, config.sample_records,
                           SAMPLE_BYTES, tokenizer.encoder_name, eod, token_dtype_for_vocab(tokenizer.vocab_size))
    return tokenizer, reason, check


def _start_pool(config: TokenizeConfig, processes: int, threads: int) -> PartPool:
    """The run's worker processes (all but this process), each building the tokenizer the run will most likely
    choose as soon as it has started."""
    settled = settled_encoder(config.tokenizer)
    return PartPool(processes - 1, (settled, threads) if settled else None)


def prepare(config: TokenizeConfig) -> Job:
    """Resolve inputs, shard, parts and tokenizer; refuse a bad first record; start the check of the input when the
    fast encoder was chosen and the reference library is loaded (or ``check_input`` asks to load it)."""
    storage.configure(config.storage_options)
    files = expand_inputs(config.inputs)
    shard = resolve_shard(config.shard_index, config.num_shards)
    slices = plan_slices(files, shard)
    prefix = shard.prefix(config.output_prefix)
    size = sum(piece.size for piece in slices)
    state = checkpoints.load(output_stage(prefix)) if config.resume else None
    if state is not None:
        parts = [Part.from_record(index, record) for index, record in enumerate(state["plan"])]
    else:
        parts = _parts(config, slices)
    processes = _processes(config, parts, size)
    threads = config.threads_for(processes)
    # NOTE: the workers start in a thread while this one builds the run's tokenizer: starting the first worker waits
    # for the server that forks them to import what they run (about as long as the tokenizer takes to build).
    with ThreadPoolExecutor(1, thread_name_prefix="blendforge-start") as starter:
        starting = starter.submit(_start_pool, config, processes, threads) if len(parts) > 1 else None
        try:
            tokenizer, reason, check = _tokenizer(config, slices, prefix, threads)
            eod = tokenizer.require_eod() if config.append_eod else None
        except BaseException:
            if starting is not None and starting.exception() is None:
                starting.result().close()
            raise
        pool = starting.result() if starting is not None else None
    if shard.count > 1:
        log.info("shard %d of %d (from %s): %d slice(s) of %d input file(s)", shard.index, shard.count,
                 shard.source, len(slices), len(files))
    log.info("encoder: %s", reason)
    dtype = token_dtype_for_vocab(tokenizer.vocab_size)
    return Job(config, shard, prefix, slices, tokenizer, reason, dtype, eod, parts, processes, threads, check, state,
               pool)
