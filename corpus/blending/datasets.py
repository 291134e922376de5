"""Split datasets over cached index maps (numpy only, no torch), and the sample counts a trainer
asks for.

``SplitDataset[i]`` is exactly the sample megatron-core's ``BlendedMegatronDatasetBuilder``
returns at index i for the same blend, split and sample count; ``tokens_of(i)`` gives its raw
S + 1 token ids (what ``corpus blend --show-samples`` prints). Any map-style consumer works
with it (a torch ``DataLoader`` too); :mod:`corpus.blending.loader` wraps it for torch training.
Every sample also carries ``source_ids``, its source as an index into ``source_names`` (the blend's
sources in file order), which Megatron's samples drop.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

import numpy as np

from corpus.blending.build import SplitMaps, build_split_maps
from corpus.blending.index_maps import SPLIT_NAMES
from corpus.blending.plan import SplitPlan, plan_split
from corpus.blending.resolve import ResolvedBlend, resolve_blend
from corpus.blending.samples import PAD_ID, make_batch, sample_from_batch
from corpus.blending.schema import BlendConfig
from corpus.blending.sources import Source


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


class _SourceSplit:
    """One source's maps in a split: Megatron's ``_query_document_sample_shuffle_indices``."""

    def __init__(self, source: Source, arrays: dict[str, np.ndarray]) -> None:
        self.source = source
        self.document_index = arrays["document_index"]
        self.sample_index = arrays["sample_index"]
        self.shuffle_index = arrays["shuffle_index"]

    def shard_of(self, index: int) -> str:
        """The shard prefix holding the first token of sample ``index``."""
        first_doc = int(self.sample_index[int(self.shuffle_index[index])][0])
        return self.source.shard_of(int(self.document_index[first_doc]))

    def fill(self, index: int, out: np.ndarray, extra_token: int) -> None:
        """Write the tokens of sample ``index`` into ``out`` (padding with PAD_ID if short)."""
        position = int(self.shuffle_index[index])
        first_doc, first_offset = (int(v) for v in self.sample_index[position])
        last_doc, last_offset = (int(v) for v in self.sample_index[position + 1])
        read = self.source.read
        if first_doc == last_doc:
            parts = [read(self.document_index[first_doc], first_offset, last_offset - first_offset + extra_token)]
        else:
            parts = [read(self.document_index[first_doc], first_offset)]
            parts += [read(self.document_index[d]) for d in range(first_doc + 1, last_doc)]
            parts.append(read(self.document_index[last_doc], 0, last_offset + extra_token))
        filled = 0
        for part in parts:
            out[filled : filled + len(part)] = part
            filled += len(part)
        out[filled:] = PAD_ID


class SplitDataset:
    """The samples of one split: ``len()`` is megatron-core's length for the same request."""

    def __init__(self, resolved: ResolvedBlend, split_maps: SplitMaps) -> None:
        self.plan: SplitPlan = split_maps.plan
        self.split = self.plan.split
        self.options = resolved.config.samples
        self.eod_id = resolved.eod_id
        self.row_length = resolved.config.seq_length + self.options.extra_token
        self._members = [_SourceSplit(m.source, a) for m, a in zip(self.plan.members, split_maps.members)]
        self.source_names: tuple[str, ...] = resolved.config.source_names()
        """The blend's sources in file order: what ``source_ids`` index (also sources this split lacks)."""
        self._member_sources = np.array([self.source_names.index(m.name) for m in self.plan.members], np.int64)
        self._dataset_index = split_maps.dataset_index
        self._dataset_sample_index = split_maps.dataset_sample_index
        self.maps_built = split_maps.built
        """Cache entries this process built for the split (0: all came from the cache)."""

    def __len__(self) -> int:
        return self.plan.size

    def locate(self, index: int) -> tuple[int, int]:
        """(member, sample within that member's maps) of blended sample ``index``."""
        if not 0 <= index < len(self):
            raise IndexError(f"{self.split} sample {index} out of range (0..{len(self) - 1})")
        if self._dataset_index is None:
            return 0, index
        return int(self._dataset_index[index]), int(self._dataset_sample_index[index])

    def source_name(self, index: int) -> str:
        """The name of the source sample ``index`` comes from."""
        return self.plan.members[self.locate(index)[0]].name

    def source_ids(self, indices: list[int] | np.ndarray) -> np.ndarray:
        """The source of each of ``indices`` as an index into :attr:`source_names` (int64)."""
        indices = np.asarray(indices, dtype=np.int64)
        if indices.size and not (0 <= indices.min() and indices.max() < len(self)):
            raise IndexError(f"{self.split} samples {indices.min()}..{indices.max()} out of range (0..{len(self) - 1})")
        if self._dataset_index is None:
            return np.full(indices.shape, self._member_sources[0])
        return self._member_sources[self._dataset_index[indices]]

    def shard_of(self, index: int) -> str:
        """The shard prefix holding the first token of sample ``index``: for a glob source, which of its files
        the sample starts in (a sample may run on into the next shard); for one file, its prefix."""
        member, sample = self.locate(index)
        return self._members[member].shard_of(sample)

    def fill_rows(self, indices: list[int] | np.ndarray, rows: np.ndarray) -> None:
        """Write the raw tokens of ``indices`` into ``rows`` [len(indices), S + extra]."""
        extra = self.options.extra_token
        for row, index in zip(rows, indices):
            member, sample = self.locate(int(index))
            self._members[member].fill(sample, row, extra)

    def tokens_of(self, index: int) -> np.ndarray:
        """The S + extra raw token ids of sample ``index`` (inputs plus the last label)."""
        rows = np.empty((1, self.row_length), dtype=np.int64)
        self.fill_rows([index], rows)
        return rows[0]

    def batch(self, indices: list[int] | np.ndarray) -> dict[str, np.ndarray]:
        """The samples of ``indices`` stacked: ``tokens``, ``labels``… each [len(indices), S], and
        ``source_ids`` [len(indices)]."""
        rows = np.empty((len(indices), self.row_length), dtype=np.int64)
        self.fill_rows(indices, rows)
        return {**make_batch(rows, self.options, self.eod_id), "source_ids": self.source_ids(indices)}

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        return sample_from_batch(self.batch([index]))


@dataclass
class BlendDatasets:
    """The datasets of a blend for given sample counts (None for a split not built)."""

    resolved: ResolvedBlend
    counts: SampleCounts
    train: SplitDataset | None
    valid: SplitDataset | None
    test: SplitDataset | None

    @property
    def fingerprint(self) -> str:
        """The blend fingerprint a loader stores in its state."""
        return self.resolved.fingerprint

    def split(self, name: str) -> SplitDataset | None:
        """The dataset of split ``name`` (None when not built)."""
        return getattr(self, name)

    def show_samples_command(self, split: str, start: int, stop: int) -> str:
        """The ``corpus blend`` command printing samples ``[start, stop)`` of ``split`` exactly as
        this request sees them (same file, seq_length, seed and sample count)."""
        return show_samples_command(self.resolved.config, split, self.counts.of(split), start, stop)


def show_samples_command(config: BlendConfig, split: str, num_samples: int, start: int, stop: int) -> str:
    """``corpus blend FILE --split S --num-samples N --seq-length L --seed X --show-samples A:B --json``.
    A blend built in Python has no file: save it first with :func:`corpus.blending.schema.dump_blend`."""
    if not config.origin or config.origin.startswith("--"):
        raise ValueError("this blend has no file; write it with corpus.blending.schema.dump_blend(config, path) and "
                         "load that")
    words = ["corpus", "blend", config.origin, "--split", split, "--num-samples", str(num_samples),
             "--seq-length", str(config.seq_length), "--seed", str(config.seed), "--show-samples", f"{start}:{stop}",
             "--json"]
    return " ".join(shlex.quote(word) for word in words)


def plan_all(resolved: ResolvedBlend, counts: SampleCounts, required: tuple[str, ...] = ("train",)
             ) -> dict[str, SplitPlan | None]:
    """The plan of each split, all checked before anything is built. A split outside ``required``
    that the blend gives no share is skipped (None), as megatron-core skips it."""
    return {split: plan_split(resolved, split, counts.of(split), split in required) for split in SPLIT_NAMES}


def build_split_datasets(blend: BlendConfig | ResolvedBlend, counts: SampleCounts,
                         required: tuple[str, ...] = ("train",)) -> BlendDatasets:
    """Resolve ``blend``, plan every split, build (or load) their maps, and open the datasets.
    Asking samples of a ``required`` split the blend gives no share is an error."""
    resolved = blend if isinstance(blend, ResolvedBlend) else resolve_blend(blend)
    plans = plan_all(resolved, counts, required)
    datasets = {split: SplitDataset(resolved, build_split_maps(resolved, plan)) if plan else None
                for split, plan in plans.items()}
    return BlendDatasets(resolved, counts, **datasets)
