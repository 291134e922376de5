"""``TokenizeConfig``: every option of ``corpus tokenize``, typed, validated, with Megatron's names."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from corpus.core.cores import available_cores
from corpus.core.errors import ConfigError
from corpus.core.typed_config import build
from corpus.tokenize.plan import MIN_PART_BYTES
from corpus.tokenizers.config import TokenizerConfig

ON_ERROR = ("fail", "skip")


@dataclass
class TokenizeConfig:
    """What to tokenize, how, and where to write it."""

    inputs: list[str]
    """``--input``: files, globs or directories (.jsonl, .json, .jsonl.gz, .jsonl.zst, .parquet), in order."""
    output_prefix: str
    """``--output-prefix P``: outputs are ``P_<key>_document.bin/.idx/.meta.json``."""
    tokenizer: TokenizerConfig
    """The tokenizer (``--tokenizer-type``, ``--tokenizer-model``, ...)."""
    json_keys: list[str] = field(default_factory=lambda: ["text"])
    """``--json-keys``: one output pair per key; ``meta.title`` reads a nested field."""
    append_eod: bool = False
    """``--append-eod``: add the EOD id after every document that encoded to at least one token."""
    workers: int = 0
    """``--workers``: processes (this one and worker processes) that each read, decode, encode and write a part of the
    input, joined in order at the end; 0 (the default): one per core this process may use. An input that cannot be
    cut (one ``.gz``/``.zst`` file) is read by this process and encoded by the workers; one under 48 MB, with the
    default, by this process alone."""
    threads_per_worker: int | None = None
    """``--threads-per-worker``: threads the tokenizer library may use inside each batch call; default: the cores
    shared out between the processes at work (1 with one process per core)."""
    batch_size: int = 1000
    """``--batch-size``: records per encode call (never changes the output)."""
    batch_bytes: int = 4 << 20
    """A batch also ends once it holds this many bytes of JSONL, so huge documents travel alone."""
    min_part_bytes: int = MIN_PART_BYTES
    """The smallest part (input bytes) the input is cut into for the workers, but the last (never changes the
    output)."""
    on_error: str = "fail"
    """``--on-error``: ``fail`` stops at the first bad record (no output left); ``skip`` skips it and lists
    it in ``P.skipped.jsonl``."""
    resume: bool = False
    """``--resume``: continue an interrupted run from its last checkpoint (the result is byte-identical)."""
    checkpoint_interval: float = 30.0
    """``--checkpoint-interval``: seconds between checkpoints (0: after every batch)."""
    shard_index: int | None = None
    """``--shard-index``: this process's slice of the input (default: SLURM_PROCID or RANK, else 0)."""
    num_shards: int | None = None
    """``--num-shards``: how many slices (default: SLURM_NTASKS or WORLD_SIZE, else 1)."""
    quiet: bool = False
    """``--quiet``: no progress bar, log lines or summary."""
    log_interval: float = 30.0
    """``--log-interval``: seconds between progress log lines when stderr is not a terminal."""
    stats_json: str | None = None
    """``--stats-json FILE``: write the run's statistics as JSON."""
    sample_records: int = 64
    """Records from the start of the input that the reference library encodes again, while the run proceeds, to
    prove the fast encoder gave its ids (0: none; the tokenizer's own check still runs)."""
    check_input: bool = False
    """``--check-input``: check the input so on every run. Without it, only runs that load the reference library
    anyway (the first with a tokenizer, whose check is not cached yet) check their input: loading it is the
    start-up the cached check saves."""
    storage_options: dict[str, Any] | None = None
    """``--storage-options``: options of the filesystem behind ``s3://`` (and other URL) inputs and outputs, e.g.
    ``{"endpoint_url": …}``; endpoint, credentials and region otherwise come from the standard AWS variables."""

    def __post_init__(self) -> None:
        self.inputs = [str(path) for path in self.inputs]
        self.json_keys = list(self.json_keys)
        checks = {
            "inputs": (bool(self.inputs), "give at least one --input"),
            "json_keys": (bool(self.json_keys) and len(set(self.json_keys)) == len(self.json_keys),
                          "give one or more distinct --json-keys"),
            "workers": (self.workers >= 0, "--workers must be 0 (encode in the main process) or more"),
            "threads_per_worker": (self.threads_per_worker is None or self.threads_per_worker >= 1,
                                   "--threads-per-worker must be at least 1"),
            "batch_size": (self.batch_size >= 1, "--batch-size must be at least 1"),
            "batch_bytes": (self.batch_bytes >= 1, "batch_bytes must be at least 1"),
            "min_part_bytes": (self.min_part_bytes >= 1, "min_part_bytes must be at least 1"),
            "on_error": (self.on_error in ON_ERROR, f"--on-error must be one of {', '.join(ON_ERROR)}"),
            "checkpoint_interval": (self.checkpoint_interval >= 0, "--checkpoint-interval must be >= 0 seconds"),
            "log_interval": (self.log_interval > 0, "--log-interval must be > 0 seconds"),
            "sample_records": (self.sample_records >= 0, "sample_records must be >= 0"),
        }
        for name, (ok, message) in checks.items():
            if not ok:
                raise ConfigError(f"{message} (got {getattr(self, name)!r})")
        if self.output_prefix.endswith(("/", os.sep)):
            folder = self.output_prefix.rstrip("/" + os.sep) or self.output_prefix
            raise ConfigError(
                f"--output-prefix {self.output_prefix} ends with a folder separator, so the outputs would be named "
                f"{self.output_prefix}_{self.json_keys[0]}_document.*; end it with a file name, e.g. "
                f"--output-prefix {os.path.join(folder, 'web')}")
        if not isinstance(self.tokenizer, TokenizerConfig):
            raise ConfigError(f"tokenizer must be a TokenizerConfig, not {type(self.tokenizer).__name__}")

    @property
    def processes(self) -> int:
        """The processes asked for: ``workers``, else one per core this process may use."""
        return self.workers or available_cores()

    def threads_for(self, busy: int) -> int:
        """Threads per batch call when ``busy`` processes encode at once: ``threads_per_worker``, else the cores
        shared out between them."""
        if self.threads_per_worker is not None:
            return self.threads_per_worker
        return max(1, available_cores() // max(busy, 1))

    def replace(self, **changes) -> "TokenizeConfig":
        """A copy with some options changed (validated again)."""
        return dataclasses.replace(self, **changes)


def config_from_mapping(values: dict) -> TokenizeConfig:
    """Build a config from a plain dict (e.g. JSON or YAML), through the project's validator: unknown keys and
    wrongly typed values are named; the ``tokenizer`` mapping becomes a :class:`TokenizerConfig`."""
    return build(TokenizeConfig, values, where="tokenize config")
