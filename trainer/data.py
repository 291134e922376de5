"""The bridge from the data side (blends, datasets, the resumable loader in ``corpus``) to the loop.

Whatever the source (a blend file, Megatron's ``--data-path``, or ``--mock-data``), the loop gets
:class:`TrainData`: one resumable loader per split yielding micro-batches, dicts of [micro_batch, S]
tensors ``tokens``, ``labels``, ``loss_mask``, ``position_ids``, plus what the model's vocabulary and
document masking need from the tokenizer.

Sample counts follow Megatron: train = train_iters × global batch; valid = (train_iters // eval_interval
+ 1) × eval_iters × global batch (each evaluation reads fresh batches); test = eval_iters × global batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Protocol

import numpy as np
import torch

from trainer.config import TrainConfig
from trainer.parallel_state import ParallelState

SPLITS = ("train", "valid", "test")


class Loader(Protocol):
    """A resumable stream of micro-batches (the contract of ``corpus``'s loader)."""

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


@dataclass
class TrainData:
    """Loaders per split (None where the split is empty or not asked for) and tokenizer facts."""

    loaders: dict[str, Loader | None]
    seq_length: int
    vocab_size: int | None
    eod_id: int | None
    description: str
    reproduce: dict[str, str]


def sample_counts(config: TrainConfig, global_batch_size: int) -> dict[str, int]:
    """Samples each split must supply over the whole run (Megatron's formula, see module docstring)."""
    train_iters, logging = config.training.train_iters, config.logging
    evaluations = train_iters // logging.eval_interval + 1
    return {"train": train_iters * global_batch_size,
            "valid": evaluations * logging.eval_iters * global_batch_size,
            "test": logging.eval_iters * global_batch_size}


class MockDataset(torch.utils.data.Dataset):
    """Synthetic documents for benchmarks and smoke tests (``--mock-data``): each sample packs documents of
    random length whose tokens count up from a random start (learnable), each ended by the EOD id 0.
    Sample ``i`` depends only on (seed, i), so any slice is cheap and reproducible."""

    eod_id = 0

    def __init__(self, num_samples: int, seq_length: int, vocab_size: int, seed: int) -> None:
        self.num_samples, self.seq_length, self.vocab_size, self.seed = num_samples, seq_length, vocab_size, seed

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        rng = np.random.default_rng([self.seed, index])
        pieces, size = [], 0
        while size < self.seq_length + 1:
            length = int(rng.integers(8, max(9, self.seq_length)))
            start = int(rng.integers(1, self.vocab_size))
            document = (start + np.arange(length - 1)) % (self.vocab_size - 1) + 1
            pieces += [document, [self.eod_id]]
            size += length
        sequence = torch.from_numpy(np.concatenate(pieces)[: self.seq_length + 1].astype(np.int64))
        return {"tokens": sequence[:-1], "labels": sequence[1:], "loss_mask": torch.ones(self.seq_length),
                "position_ids": torch.arange(self.seq_length)}


class SampleLoader:
    """TEMPORARY until corpus's loader lands: micro-batches of consecutive samples, resumable."""

    def __init__(self, dataset, micro_batch_size: int, dp_rank: int, dp_size: int, consumed_samples: int,
                 fingerprint: str) -> None:
        self.dataset, self.micro, self.dp_rank, self.dp_size = dataset, micro_batch_size, dp_rank, dp_size
        self.consumed, self.fingerprint = consumed_samples, fingerprint

    def __iter__(self):
        while self.consumed + self.micro * self.dp_size <= len(self.dataset):
            first = self.consumed + self.dp_rank * self.micro
            samples = [self.dataset[i] for i in range(first, first + self.micro)]
            self.consumed += self.micro * self.dp_size
            yield {key: torch.stack([s[key] for s in samples]) for key in samples[0]}

    def state_dict(self) -> dict:
        return {"consumed_samples": self.consumed, "fingerprint": self.fingerprint}

    def load_state_dict(self, state: dict) -> None:
        self.consumed = state["consumed_samples"]


MOCK_VOCAB_SIZE = 32768


def build_data(config: TrainConfig, parallel: ParallelState, global_batch_size: int) -> TrainData:
    """Loaders for every split the run reads, from the configured source."""
    counts = sample_counts(config, global_batch_size)
    vocab = config.model.vocab_size or MOCK_VOCAB_SIZE
    seq = config.data.seq_length
    loaders = {}
    for index, split in enumerate(SPLITS):
        dataset = MockDataset(counts[split], seq, vocab, config.training.seed + index)
        loaders[split] = SampleLoader(dataset, config.training.micro_batch_size, parallel.dp_rank, parallel.dp_size,
                                      0, "mock") if counts[split] else None
    return TrainData(loaders, seq, vocab, MockDataset.eod_id, f"mock data (vocab {vocab})", {})
