"""The bridge from the data side (blends, datasets, the resumable loader in ``corpus``) to the loop.

Whatever the source (a blend file, Megatron's ``--data-path``, or ``--mock-data``), the loop gets
:class:`TrainData`: one resumable loader per split yielding micro-batches, dicts of [micro_batch, S]
tensors ``tokens``, ``labels``, ``loss_mask``, ``position_ids`` and ``source_ids`` [micro_batch], plus what
the model's vocabulary and document masking need from the tokenizer, the names and weights ``source_ids``
refer to, and each source's fixed validation samples (per-source telemetry).

Sample counts follow Megatron: train = train_iters × global batch; valid = (train_iters // eval_interval
+ 1) × eval_iters × global batch (each evaluation reads fresh batches); test = eval_iters × global batch.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Iterator, Protocol

import numpy as np
import torch

from corpus.blending.counts import SampleCounts, megatron_sample_counts
from corpus.blending.datasets import SplitDataset, build_split_datasets, show_samples_command
from corpus.blending.index_maps import normalize
from corpus.blending.loader import BlendLoader, build_datasets
from corpus.blending.resolve import ResolvedBlend, blend_tokenizer, resolve_blend
from corpus.blending.samples import make_batch
from corpus.blending.schedule import WeightSchedule
from corpus.blending.schema import (
    BlendConfig,
    SampleOptions,
    apply_overrides,
    blend_from_data_path,
    dump_blend,
    load_blend,
)
from corpus.core.errors import ConfigError
from corpus.indexed.sidecar import options_hash
from corpus.tokenizers import TextTokenizer
from corpus.tokenizers.config import config_from_flags
from corpus.tokenizers.decode import cached_tokenizer
from corpus.tokenizers.match import data_mismatch
from corpus.tokenizers.registry import lookup
from trainer.config.schema import DataConfig, TrainConfig
from trainer.parallel.state import ParallelState

log = logging.getLogger(__name__)

SPLITS = ("train", "valid", "test")
MOCK_VOCAB_SIZE = 32768  # DESIGN §7's vocabulary, for --mock-data without --vocab-size


class Loader(Protocol):
    """A resumable stream of micro-batches (the contract of :class:`corpus.blending.loader.BlendLoader`)."""

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict, allow_blend_change: bool = False) -> None: ...


@dataclass
class TrainData:
    """Loaders per split (None where the split is empty or not asked for), tokenizer facts, and the sources."""

    loaders: dict[str, Loader | None]
    seq_length: int
    vocab_size: int | None
    eod_id: int | None
    tokenizer: dict | None
    description: str
    reproduce: dict[str, str]
    document_masked: bool = False
    """Whether batches carry ``cu_seqlens`` (``reset_attention_mask``, or a ``best_fit`` blend's samples)."""
    source_names: tuple[str, ...] = ()
    """What the batches' ``source_ids`` index."""
    source_weights: tuple[float | None, ...] = ()
    """Each source's normalised train weight (None: unweighted, or not a train source)."""
    source_valid: dict[str, Loader] = field(default_factory=dict)
    """Each source's fixed validation samples, alone (``--eval-samples-per-source``)."""
    source_valid_samples: int = 0
    """How many of them each evaluation reads (whole global batches)."""
    schedule: WeightSchedule | None = None
    """The train split's weight schedule, laid over the run's train samples (None: fixed weights)."""
    online: SplitDataset | None = None
    """The train split when online mixing moves its weights (its draw takes the mixer's weights; None otherwise)."""


@dataclass
class OpenedData:
    """The run's data opened but not indexed: its blend with the sources open (None with ``--mock-data``) and the
    tokenizer settled, so that every check needing the sequence length or the vocabulary runs before any index
    map is built."""

    seq_length: int
    vocab_size: int | None
    """The tokenizer's vocabulary (None where nothing names the data's tokenizer)."""
    eod_id: int | None
    tokenizer: dict | None
    """The tokenizer's record (what a sidecar's ``tokenizer`` holds)."""
    document_masked: bool
    """Whether batches will carry ``cu_seqlens`` (see :attr:`TrainData.document_masked`)."""
    resolved: ResolvedBlend | None = None
    vocab_size_sized_tokenizer: bool = False
    """Whether ``--vocab-size`` was the tokenizer's size (NullTokenizer's, as in Megatron) rather than the model's:
    the model then embeds the tokenizer's vocabulary, its EOD included."""


def sample_counts(config: TrainConfig, global_batch_size: int) -> SampleCounts:
    """Samples each split must supply over the whole run (Megatron's formula, see module docstring)."""
    logging = config.logging
    return megatron_sample_counts(config.training.train_iters, global_batch_size, logging.eval_interval,
                                  logging.eval_iters)


def _sample_options(data: DataConfig) -> dict:
    """The sample flags the user turned on (off means: keep the blend's setting)."""
    return {name: True for name in ("eod_mask_loss", "reset_position_ids", "reset_attention_mask")
            if getattr(data, name)}


class MockSamples:
    """Synthetic documents for benchmarks and smoke tests (``--mock-data``): each sample packs documents
    of random length whose tokens count up from a random start (learnable), each ended by EOD id 0.
    Sample ``i`` depends only on (seed, i); batches go through the same :func:`make_batch` as real data."""

    eod_id = 0
    source_names = ("mock",)

    def __init__(self, num_samples: int, seq_length: int, vocab_size: int, seed: int, options: SampleOptions) -> None:
        self.num_samples, self.seq_length, self.vocab_size, self.seed = num_samples, seq_length, vocab_size, seed
        self.options = options

    def __len__(self) -> int:
        return self.num_samples

    def row(self, index: int) -> np.ndarray:
        """The S + 1 token ids of sample ``index``."""
        rng = np.random.default_rng([self.seed, index])
        pieces, size = [], 0
        while size < self.seq_length + 1:
            length = int(rng.integers(8, max(9, self.seq_length)))
            start = int(rng.integers(1, self.vocab_size))
            pieces += [(start + np.arange(length - 1)) % (self.vocab_size - 1) + 1, [self.eod_id]]
            size += length
        return np.concatenate(pieces)[: self.seq_length + 1].astype(np.int64)

    def batch(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """Samples ``indices`` stacked, as :meth:`corpus.blending.datasets.SplitDataset.batch` returns them."""
        batch = make_batch(np.stack([self.row(int(i)) for i in indices]), self.options, self.eod_id)
        return {**batch, "source_ids": np.zeros(len(indices), dtype=np.int64)}


def _mock_data(config: TrainConfig, opened: OpenedData, parallel: ParallelState,
               counts: SampleCounts) -> TrainData:
    data, seed, vocab = config.data, config.training.seed, opened.vocab_size
    options = SampleOptions(**_sample_options(data))
    fingerprint = "mock-" + options_hash({"seed": seed, "vocab": vocab, "seq": data.seq_length,
                                          **_sample_options(data)})
    loaders = {}
    for index, split in enumerate(SPLITS):
        samples = MockSamples(counts.of(split), data.seq_length, vocab, seed + index, options)
        loaders[split] = (BlendLoader(samples, config.training.micro_batch_size, parallel.dp_rank, parallel.dp_size,
                                      0, fingerprint) if counts.of(split) else None)
    return TrainData(loaders, data.seq_length, vocab, MockSamples.eod_id, None,
                     f"mock data (vocab {vocab}, EOD 0)", {}, document_masked=opened.document_masked,
                     source_names=MockSamples.source_names, source_weights=(1.0,))


def load_blend_config(config: TrainConfig) -> BlendConfig:
    """The blend the run reads: ``--blend`` or ``--data-path`` with the trainer's overrides applied
    (``--seq-length``, ``--split``, ``--data-cache-path``, the sample flags)."""
    data = config.data
    overrides = {"seq_length": data.seq_length, "cache_dir": data.data_cache_path, **_sample_options(data)}
    if data.blend:
        return load_blend(data.blend, split=data.split, **overrides)
    blend = blend_from_data_path(data.data_path, data.split, data.seq_length,
                                 seed=config.training.seed, cache_dir=data.data_cache_path)
    return apply_overrides(blend, **_sample_options(data))


def _reproduce(config: TrainConfig, blend: BlendConfig, counts: SampleCounts, global_batch: int,
               splits: list[str]) -> dict[str, str]:
    """``corpus blend`` commands printing the samples of the first step (step n: samples (n-1)·G to n·G).
    A ``--data-path`` blend is saved next to the checkpoints first, so the command has a file to read."""
    if not blend.origin or blend.origin.startswith("--"):
        if not config.checkpoint.save:
            return {}
        path = f"{config.checkpoint.save}/data_path_blend.yaml"
        Path(config.checkpoint.save).mkdir(parents=True, exist_ok=True)
        dump_blend(blend, path)
        blend = replace(blend, origin=path)
    return {split: show_samples_command(blend, split, counts.of(split), 0, global_batch) for split in splits}


def _sizes_tokenizer(data: DataConfig) -> bool:
    """Whether ``--tokenizer-type`` takes its size from ``--vocab-size`` (NullTokenizer, as Megatron's does)."""
    return data.tokenizer_type is not None and "vocab_size" in lookup(data.tokenizer_type).needs


def _flag_tokenizer(config: TrainConfig) -> TextTokenizer | None:
    """The tokenizer ``--tokenizer-type``/``--tokenizer-model``/``--vocab-file``/``--merge-file`` (and
    ``--vocab-size`` where the type takes it) name, built (so a wrong flag is refused before any work), or None
    without ``--tokenizer-type``."""
    data = config.data
    vocab_size = config.model.vocab_size if _sizes_tokenizer(data) else None
    named = config_from_flags({**asdict(data), "vocab_size": vocab_size})
    return cached_tokenizer(named) if named is not None else None


def _check_flag_tokenizer(tokenizer: TextTokenizer, resolved: ResolvedBlend) -> None:
    """The flags' tokenizer must be the one the sidecars record (family, file contents and EOD id), when they
    record one."""
    record = resolved.tokenizer
    if record is None:
        return
    described = tokenizer.describe()
    mismatch = data_mismatch(record, described["type"], described["fingerprint"], tokenizer.eod,
                             resolved.recorded_eod_id())
    if mismatch is None:
        return
    if mismatch.aspect == "type":
        raise ConfigError(f"--tokenizer-type {described['type']}: the data was tokenized with {mismatch.recorded} "
                          "(its .meta.json says so); drop the tokenizer flags or give the data's tokenizer")
    if mismatch.aspect == "files":
        raise ConfigError(f"--tokenizer-model/--vocab-file: not the tokenizer the data was made with (its .meta.json "
                          f"records {record.get('model') or record.get('vocab_file')}, sha256 "
                          f"{mismatch.recorded[:12]}…, these files {mismatch.expected[:12]}…); drop the "
                          "tokenizer flags or give the data's files")
    raise ConfigError(f"--tokenizer-type {described['type']}: its EOD id is {tokenizer.eod}, but the data's "
                      f".meta.json records EOD id {mismatch.recorded}; drop the tokenizer flags (the sidecars name the "
                      "tokenizer) or give the one the data was made with")


def tokenizer_facts(flagged: TextTokenizer | None, resolved: ResolvedBlend) -> tuple[int | None, dict | None]:
    """The vocabulary size and tokenizer record the model takes: the sidecars'; else the flags' tokenizer; else the
    blend's ``tokenizer:`` (data written by Megatron has no sidecar)."""
    if resolved.vocab_size is not None:
        return resolved.vocab_size, resolved.tokenizer
    if flagged is None:
        named = blend_tokenizer(resolved)
        flagged = cached_tokenizer(named) if named is not None else None
    return (flagged.vocab_size, flagged.describe()) if flagged is not None else (None, None)


def open_data(config: TrainConfig) -> OpenedData:
    """Open the run's data without indexing it: the blend read, its sources opened, the tokenizer settled and
    checked against the sidecars. The flags' tokenizer gives its EOD id to data whose sidecars record none, as
    Megatron's ``pretrain_gpt.py`` takes ``tokenizer.eod``. The EOD id settled is written into the blend
    (``samples.eod_id``), so that what reads it again (per-source validation, the saved blend the logged
    ``corpus blend`` command reads) sees the same samples."""
    data = config.data
    if data.mock_data:
        return OpenedData(data.seq_length, config.model.vocab_size or MOCK_VOCAB_SIZE, MockSamples.eod_id, None,
                          data.reset_attention_mask)
    flagged = _flag_tokenizer(config)
    resolved = resolve_blend(load_blend_config(config), flagged.eod if flagged is not None else None)
    if flagged is not None:
        _check_flag_tokenizer(flagged, resolved)
    resolved = replace(resolved, config=apply_overrides(resolved.config, eod_id=resolved.eod_id))
    blend = resolved.config
    vocab_size, tokenizer = tokenizer_facts(flagged, resolved)
    return OpenedData(blend.seq_length, vocab_size, resolved.eod_id, tokenizer,
                      blend.packing == "best_fit" or blend.samples.reset_attention_mask, resolved,
                      _sizes_tokenizer(data))


def build_data(config: TrainConfig, opened: OpenedData, parallel: ParallelState, global_batch_size: int) -> TrainData:
    """Loaders for every split the run reads, from the data :func:`open_data` opened (the index maps are built
    here)."""
    counts = sample_counts(config, global_batch_size)
    if opened.resolved is None:
        return _mock_data(config, opened, parallel, counts)
    resolved = opened.resolved
    blend = resolved.config
    train, valid, test, built = build_datasets(resolved, counts)
    loaders = {split: BlendLoader(dataset, config.training.micro_batch_size, parallel.dp_rank, parallel.dp_size, 0,
                                  built.fingerprint) if dataset is not None else None
               for split, dataset in zip(SPLITS, (train, valid, test))}
    packed = blend.packing == "best_fit"
    description = (f"blend {blend.origin} ({len(resolved.all_sources())} sources, vocab {opened.vocab_size}, "
                   f"EOD {resolved.eod_id}, {'best-fit packed, pad ' + str(resolved.pad_id) if packed else 'concat'}, "
                   f"fingerprint {built.fingerprint[:12]})")
    if blend.mixing is not None:
        mixing = blend.mixing
        description += (f"; train weights mixed online by {mixing.rule} every {mixing.update_interval} steps from the "
                        f"sources' weights, floor {mixing.floor}, losses rounded to {mixing.loss_decimals} decimals")
    wanted = -(-config.logging.eval_samples_per_source // global_batch_size) * global_batch_size
    source_valid = (source_valid_loaders(config, blend, parallel, wanted) if loaders["valid"] is not None else {})
    return TrainData(loaders, blend.seq_length, opened.vocab_size, resolved.eod_id, opened.tokenizer,
                     description, _reproduce(config, blend, counts, global_batch_size,
                                             [split for split, loader in loaders.items() if loader is not None]),
                     document_masked=opened.document_masked, source_names=blend.source_names(),
                     source_weights=train_weights(blend), source_valid=source_valid,
                     source_valid_samples=wanted if source_valid else 0,
                     schedule=built.train.plan.schedule if built.train is not None else None,
                     online=built.train if built.train is not None and built.train.draw is not None else None)


def train_weights(blend: BlendConfig) -> tuple[float | None, ...]:
    """Each of ``blend.source_names()``'s normalised weight in the train split (None where it has none; a
    schedule's first phase)."""
    sources, asked = blend.split_sources("train"), blend.weights_of("train")
    if asked is None:
        return (None,) * len(blend.source_names())
    weights = dict(zip((source.name for source in sources), normalize(list(asked))))
    return tuple(weights.get(name) for name in blend.source_names())


def _alone(blend: BlendConfig, name: str) -> BlendConfig:
    """``blend`` with its valid source ``name`` alone and uncapped (nothing to mix): Megatron's GPTDataset of that
    source's valid share. Weighted, so that a share shorter than one sample repeats as the blend's own valid split
    repeats it; repeating is harmless for evaluation, so ``max_epochs`` does not apply."""
    source = next(s for s in blend.split_sources("valid") if s.name == name)
    source = replace(source, weight=1.0, max_epochs=None)
    alone = {"valid": (source,)} if isinstance(blend.sources, dict) else (source,)
    return replace(blend, sources=alone, max_epochs=None, schedule=None, mixing=None)


def source_valid_loaders(config: TrainConfig, blend: BlendConfig, parallel: ParallelState,
                         wanted: int) -> dict[str, BlendLoader]:
    """Per source of the valid split, a loader over its first ``wanted`` validation samples (``--eval-samples-
    per-source`` rounded up to whole global batches, which every rank steps through together); read from the start
    at every evaluation, so each one sees the same samples. A source with no validation data is left out (logged)."""
    if config.logging.log_per_source == "off" or not config.logging.eval_iters or not wanted:
        return {}
    loaders = {}
    for name in (source.name for source in blend.split_sources("valid")):
        try:
            built = build_split_datasets(_alone(blend, name), SampleCounts(valid=wanted), required=("valid",))
        except ConfigError as error:
            log.info("no per-source validation of %s: %s", name, error.problem)
            continue
        loaders[name] = BlendLoader(built.valid, config.training.micro_batch_size, parallel.dp_rank,
                                    parallel.dp_size, 0, built.fingerprint)
    if loaders:
        log.info("per-source validation: the first %d valid samples of %s, alone, at every evaluation", wanted,
                 ", ".join(loaders))
    return loaders
