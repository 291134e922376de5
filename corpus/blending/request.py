"""``BlendRequest``: what ``corpus blend`` is asked to do with a blend file (plan it, prebuild its index maps or print
its samples) and for which sample counts, typed and validated like every command's config."""

from __future__ import annotations

from dataclasses import MISSING, dataclass
from typing import Any

from corpus.blending.counts import EVAL_INTERVAL, EVAL_ITERS, SampleCounts, megatron_sample_counts
from corpus.blending.index_maps import SPLIT_NAMES
from corpus.core.errors import ConfigError
from corpus.core.typed_config import knob
from corpus.storage import storage_options_knob


@dataclass
class BlendRequest:
    """One ``corpus blend`` run. At most one of ``dry_run`` (the default action), ``build`` and ``sample_range``."""

    file: str = knob(MISSING, "The blend YAML file.", "FILE")
    split: str = knob("train", "Split for --num-samples and --show-samples.", "--split", choices=SPLIT_NAMES)
    num_samples: int | None = knob(
        None, "Samples asked of --split (what the trainer asks: train-iters x global batch for train).",
        "--num-samples")
    train_iters: int | None = knob(None, "With --global-batch-size: every split's count, as Megatron computes it.",
                                   "--train-iters")
    global_batch_size: int | None = knob(None, "Samples per optimizer step (all ranks).", "--global-batch-size")
    eval_interval: int = knob(EVAL_INTERVAL, "Steps between evaluations (valid count, with --train-iters); the "
                              "trainer's default.", "--eval-interval")
    eval_iters: int = knob(EVAL_ITERS, "Batches per evaluation (valid and test counts, with --train-iters); the "
                           "trainer's default.", "--eval-iters")
    seq_length: int | None = knob(None, "Override the blend's seq_length (as the trainer's does).", "--seq-length")
    seed: int | None = knob(None, "Override the blend's seed.", "--seed")
    dry_run: bool = knob(False, "Plan only (the default action): documents, tokens, weights, epochs, samples.",
                         "--dry-run")
    build: bool = knob(False, "Build every index map the request needs (offline; no GPU, no torch).", "--build")
    sample_range: tuple[int, int] | str | None = knob(
        None, "Print samples A..B-1 of --split as the trainer sees them, decoded with the sources' tokenizer, with "
        "where each document starts (+N: N tokens into it) and the padding.", "--show-samples", metavar="A:B")
    ids: bool = knob(False, "With --show-samples: print raw token ids instead of text.", "--ids")
    storage_options: dict[str, Any] | None = storage_options_knob()

    def __post_init__(self) -> None:
        if isinstance(self.sample_range, str):  # as a command line spells it
            self.sample_range = _parse_range(self.sample_range)
        least = {"num_samples": 0, "train_iters": 1, "global_batch_size": 1, "eval_interval": 1, "eval_iters": 0,
                 "seq_length": 2, "seed": 0}
        for name, low in least.items():
            value = getattr(self, name)
            if value is not None and value < low:
                raise ConfigError(f"--{name.replace('_', '-')} {value}: must be at least {low}")
        if self.split not in SPLIT_NAMES:
            raise ConfigError(f"--split {self.split!r} is not one of {', '.join(SPLIT_NAMES)}")
        if self.dry_run + self.build + (self.sample_range is not None) > 1:
            raise ConfigError("choose one of --dry-run, --build and --show-samples")
        if self.ids and self.sample_range is None:
            raise ConfigError("--ids prints the ids of shown samples: add --show-samples A:B")
        if (self.train_iters is None) != (self.global_batch_size is None):
            raise ConfigError("--train-iters and --global-batch-size go together")
        if self.num_samples is not None and self.train_iters is not None:
            raise ConfigError("give --num-samples or --train-iters/--global-batch-size, not both")
        if self.build and self.counts() is None:
            raise ConfigError("--build needs --num-samples or --train-iters/--global-batch-size")

    def counts(self) -> SampleCounts | None:
        """The samples asked of each split, as the trainer would ask them; None when no count was given."""
        if self.train_iters is not None:
            return megatron_sample_counts(self.train_iters, self.global_batch_size, self.eval_interval,
                                          self.eval_iters)
        return SampleCounts(**{self.split: self.num_samples}) if self.num_samples is not None else None

    @property
    def required(self) -> tuple[str, ...]:
        """The splits that must have samples: --split with --num-samples, else train."""
        return (self.split,) if self.num_samples is not None else ("train",)


def _parse_range(text: str) -> tuple[int, int]:
    """``"A:B"`` as ``(A, B)``, with 0 <= A < B."""
    try:
        start, stop = (int(part) for part in text.split(":"))
    except ValueError:
        raise ConfigError(f"--show-samples {text!r}: write START:STOP, e.g. 0:8") from None
    if not 0 <= start < stop:
        raise ConfigError(f"--show-samples {text!r}: need 0 <= START < STOP")
    return start, stop
