"""``TokenizeConfig``: every option of ``corpus tokenize``, typed, validated, with Megatron's names."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import MISSING, dataclass
from typing import Any

from corpus.core.cores import available_cores
from corpus.core.errors import ConfigError
from corpus.core.typed_config import build, knob
from corpus.storage import storage_options_knob
from corpus.tokenize.plan import MIN_PART_BYTES
from corpus.tokenizers.config import TokenizerConfig

ON_ERROR = ("fail", "skip")


@dataclass
class TokenizeConfig:
    """What to tokenize, how, and where to write it."""

    inputs: list[str] = knob(
        MISSING, "JSONL (.jsonl/.json, .gz, .zst) or Parquet files, globs or directories, local or s3:// URLs; "
        "several allowed, order kept.", "--input")
    output_prefix: str = knob(
        MISSING, "Outputs are PREFIX_<key>_document.bin/.idx/.meta.json (an s3:// prefix: written locally, then "
        "uploaded, .idx last).", "--output-prefix")
    tokenizer: TokenizerConfig = knob(MISSING, "The tokenizer (--tokenizer-type, --tokenizer-model, ...).")
    json_keys: list[str] = knob(["text"], "Keys to tokenize, one output pair each; nested keys like meta.title "
                                "work.", "--json-keys")
    append_eod: bool = knob(False, "Add EOD after every document that has at least one token.", "--append-eod")
    workers: int = knob(
        0, "Processes that each read, encode and write parts of the input, joined in order; 0: one per core this "
        "process may use (an input that cannot be cut, one .gz/.zst file, is read by this process and encoded by the "
        "workers; small inputs and 1-2 cores: this process alone).", "--workers")
    threads_per_worker: int | None = knob(
        None, "Library threads per batch call [default: the cores divided among the processes].",
        "--threads-per-worker")
    batch_size: int = knob(1000, "Records per encode call (never changes the output).", "--batch-size")
    batch_bytes: int = knob(4 << 20, "A batch also ends once it holds this many bytes of JSONL, so huge documents "
                            "travel alone.")
    min_part_bytes: int = knob(MIN_PART_BYTES, "The smallest part (input bytes) the input is cut into for the "
                               "workers, but the last (never changes the output).")
    on_error: str = knob("fail", "Bad records: fail at the first (no output left), or skip and list them in "
                         "PREFIX.skipped.jsonl.", "--on-error", choices=ON_ERROR)
    resume: bool = knob(False, "Continue an interrupted run from its checkpoint (byte-identical result).", "--resume")
    checkpoint_interval: float = knob(30.0, "Seconds between checkpoints (0: after every batch).",
                                      "--checkpoint-interval")
    shard_index: int | None = knob(None, "This process's shard (default: SLURM_PROCID, RANK, else 0).",
                                   "--shard-index")
    num_shards: int | None = knob(None, "Number of shards (default: SLURM_NTASKS, WORLD_SIZE, else 1).",
                                  "--num-shards")
    quiet: bool = knob(False, "No progress bar, log lines or summary.", "--quiet")
    log_interval: float = knob(30.0, "Seconds between progress lines when stderr is not a terminal.",
                               "--log-interval")
    stats_json: str | None = knob(None, "Write the run's statistics to this JSON file.", "--stats-json")
    sample_records: int = knob(64, "Records from the start of the input that the reference library encodes again, "
                               "while the run proceeds, to prove the fast encoder gave its ids (0: none; the "
                               "tokenizer's own check still runs).")
    check_input: bool = knob(
        False, "With the fast encoder: compare its ids on the first records with the reference library's on every "
        "run, not only on the first run with a tokenizer (loads the reference library).", "--check-input")
    storage_options: dict[str, Any] | None = storage_options_knob()

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
