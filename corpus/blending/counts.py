"""The samples a trainer asks of each split, counted as Megatron counts them, and the evaluation defaults that
decide the valid and test counts: one place that both ``corpus blend`` (predicting them) and the trainer read.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Megatron's evaluation defaults: steps between evaluations, and global batches per evaluation. The trainer's
#: ``--eval-interval``/``--eval-iters`` default to them, and ``corpus blend`` predicts the trainer's valid and test
#: sample counts with the same values.
EVAL_INTERVAL = 1000
EVAL_ITERS = 100


@dataclass(frozen=True)
class SampleCounts:
    """Samples per split, as a trainer asks for them."""

    train: int = 0
    valid: int = 0
    test: int = 0

    def of(self, split: str) -> int:
        """The count of ``split`` (train, valid or test)."""
        return getattr(self, split)


def megatron_sample_counts(train_iters: int, global_batch_size: int, eval_interval: int,
                           eval_iters: int) -> SampleCounts:
    """Megatron's ``get_train_valid_test_num_samples``: train = iters x global batch; valid =
    (iters // eval_interval + 1) x eval_iters x global batch; test = eval_iters x global batch."""
    valid_iters = (train_iters // eval_interval + 1) * eval_iters if eval_interval > 0 else 0
    return SampleCounts(train_iters * global_batch_size, valid_iters * global_batch_size,
                        eval_iters * global_batch_size)
