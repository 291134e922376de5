"""Split datasets over cached index maps (numpy only, no torch), and the sample counts a trainer
asks for.

``SplitDataset[i]`` is exactly the sample megatron-core's ``BlendedMegatronDatasetBuilder``
returns at index i for the same blend, split and sample count (``packing: concat``); ``tokens_of(i)``
gives its raw S + 1 token ids (what ``corpus blend --show-samples`` prints). With ``packing: best_fit``
samples are whole documents plus padding, and each batch carries their boundaries. Any map-style consumer works
with it (a torch ``DataLoader`` too); :mod:`corpus.blending.loader` wraps it for torch training.
Every sample also carries ``source_ids``, its source as an index into ``source_names`` (the blend's
sources in file order), which Megatron's samples drop.
"""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass

import numpy as np

from corpus.blending.build import SplitMaps, build_split_maps, check_maps_fit
from corpus.blending.counts import SampleCounts, megatron_sample_counts  # noqa: F401 - also imported from here (docs/blends.md)
from corpus.blending.errors import DrawError
from corpus.blending.index_maps import SPLIT_NAMES
from corpus.blending.mixing.draw import OnlineDraw
from corpus.blending.mixing.mixer import OnlineMixer
from corpus.blending.packing import piece_lengths
from corpus.blending.plan import SplitPlan, plan_split
from corpus.blending.resolve import ResolvedBlend, resolve_blend
from corpus.blending.samples import PAD_ID, make_batch, sample_from_batch
from corpus.blending.schema import BlendConfig
from corpus.blending.sources import Source

log = logging.getLogger(__name__)



#: A piece of a sample: (sequence id, offset in it, token count or None for "to its end").
Segment = tuple[int, int, "int | None"]


class _SourceSplit:
    """One source's maps in a split: Megatron's ``_query_document_sample_shuffle_indices``."""

    def __init__(self, source: Source, arrays: dict[str, np.ndarray], extra_token: int) -> None:
        self.source = source
        self.document_index = arrays["document_index"]
        self.sample_index = arrays["sample_index"]
        self.shuffle_index = arrays["shuffle_index"]
        self.extra_token = extra_token

    def segments(self, index: int) -> list[Segment]:
        """The document pieces sample ``index`` reads, in order."""
        position = int(self.shuffle_index[index])
        first_doc, first_offset = (int(v) for v in self.sample_index[position])
        last_doc, last_offset = (int(v) for v in self.sample_index[position + 1])
        documents = self.document_index
        if first_doc == last_doc:
            return [(int(documents[first_doc]), first_offset, last_offset - first_offset + self.extra_token)]
        return ([(int(documents[first_doc]), first_offset, None)]
                + [(int(documents[d]), 0, None) for d in range(first_doc + 1, last_doc)]
                + [(int(documents[last_doc]), 0, last_offset + self.extra_token)])


class _PackedSourceSplit:
    """One source's packed maps in a split (:mod:`corpus.blending.packing`)."""

    def __init__(self, source: Source, arrays: dict[str, np.ndarray], capacity: int) -> None:
        self.source = source
        self.piece_sequence = arrays["piece_sequence"]
        self.piece_offset = arrays["piece_offset"]
        self.sample_index = arrays["sample_index"]
        self.shuffle_index = arrays["shuffle_index"]
        self.capacity = capacity

    def segments(self, index: int) -> list[Segment]:
        """The document pieces of sample ``index``, in the order they sit in it (then padding)."""
        sample = int(self.shuffle_index[index])
        pieces = range(int(self.sample_index[sample]), int(self.sample_index[sample + 1]))
        sequences, offsets = self.piece_sequence[pieces.start:pieces.stop], self.piece_offset[pieces.start:pieces.stop]
        lengths = piece_lengths(self.source.lengths, sequences, offsets, self.capacity)
        return [(int(s), int(o), int(n)) for s, o, n in zip(sequences, offsets, lengths)]


class SplitDataset:
    """The samples of one split: ``len()`` is megatron-core's length for the same request."""

    def __init__(self, resolved: ResolvedBlend, split_maps: SplitMaps) -> None:
        self.plan: SplitPlan = split_maps.plan
        self.split = self.plan.split
        self.options = resolved.config.samples
        self.mixing = resolved.config.mixing
        self.eod_id = resolved.eod_id
        self.row_length = resolved.config.seq_length + self.options.extra_token
        self.packed = resolved.config.packing == "best_fit"
        """Samples of whole documents with padding; every batch carries their boundaries."""
        self.pad_id = resolved.pad_id if self.packed else 0
        self._members = [_PackedSourceSplit(m.source, a, self.row_length) if self.packed
                         else _SourceSplit(m.source, a, self.options.extra_token)
                         for m, a in zip(self.plan.members, split_maps.members)]
        self.source_names: tuple[str, ...] = resolved.config.source_names()
        """The blend's sources in file order: what ``source_ids`` index (also sources this split lacks)."""
        self._member_sources = np.array([self.source_names.index(m.name) for m in self.plan.members], np.int64)
        self._dataset_index = split_maps.dataset_index
        self._dataset_sample_index = split_maps.dataset_sample_index
        self._lengths = [arrays["shuffle_index"].shape[0] for arrays in split_maps.members]
        self._shifts: np.ndarray | None = None
        """Per member, how far a resume under another blend moved its samples on (:meth:`continue_sources`)."""
        self.draw: OnlineDraw | None = None
        """An online-mixed split's draw (:mod:`corpus.blending.mixing.draw`): the weights in force decide each
        sample's source when it is first read; :meth:`set_weights` changes them."""
        if self.plan.mode == "online":
            self.draw = OnlineDraw(tuple(m.name for m in self.plan.members), self.plan.blend_weights,
                                   [m["sample_index"].shape[0] - 1 for m in split_maps.members])
        self.maps_built = split_maps.built
        """Cache entries this process built for the split (0: all came from the cache)."""

    def __len__(self) -> int:
        return self.plan.size

    def locate(self, index: int) -> tuple[int, int]:
        """(member, sample within that member's maps) of blended sample ``index``."""
        if not 0 <= index < len(self):
            raise IndexError(f"{self.split} sample {index} out of range (0..{len(self) - 1})")
        if self.draw is not None:
            return self.draw.locate(index)
        if self._dataset_index is None:
            member, sample = 0, index
        else:
            member, sample = int(self._dataset_index[index]), int(self._dataset_sample_index[index])
        if self._shifts is not None:
            sample = (sample + int(self._shifts[member])) % self._lengths[member]
        return member, sample

    def source_name(self, index: int) -> str:
        """The name of the source sample ``index`` comes from."""
        return self.plan.members[self.locate(index)[0]].name

    def source_ids(self, indices: list[int] | np.ndarray) -> np.ndarray:
        """The source of each of ``indices`` as an index into :attr:`source_names` (int64)."""
        indices = np.asarray(indices, dtype=np.int64)
        if indices.size and not (0 <= indices.min() and indices.max() < len(self)):
            raise IndexError(f"{self.split} samples {indices.min()}..{indices.max()} out of range (0..{len(self) - 1})")
        if self.draw is not None:
            return self._member_sources[self.draw.sources_of(indices)]
        if self._dataset_index is None:
            return np.full(indices.shape, self._member_sources[0])
        return self._member_sources[self._dataset_index[indices]]

    def taken(self, consumed: int) -> dict[str, int]:
        """How far blended samples ``[0, consumed)`` read into each source: the samples it gave, and the ones a
        resume under another blend went past (what a later resume under another blend continues after)."""
        if self.draw is not None:
            self.draw.draw_to(consumed)
            if consumed != self.draw.drawn:
                raise DrawError(f"the draws up to sample {consumed} are asked, but samples up to "
                                f"{self.draw.drawn - 1} are drawn")
            return dict(zip(self.mixed_names, self.draw.totals.tolist()))
        counts = self._given(consumed) + (self._shifts if self._shifts is not None else 0)
        return dict(zip(self.mixed_names, counts.tolist()))

    def _given(self, consumed: int) -> np.ndarray:
        """How many of blended samples ``[0, consumed)`` each member gives, by this blend's index."""
        if self._dataset_index is None:
            return np.array([consumed], dtype=np.int64)
        return np.bincount(self._dataset_index[:consumed], minlength=len(self.plan.members)).astype(np.int64)

    def continue_sources(self, taken: dict[str, int], at: int) -> None:
        """Read on from blended sample ``at`` with each source's samples going on after the ``taken`` it already gave
        (by name; a resume under another blend, which would otherwise read each source from where *this* blend's
        index reaches it by then). None is repeated or skipped where a source's maps are the same under both blends
        (the same passes over it: always so for a source read less than once); a source this blend would read past
        its maps starts them again, with a warning."""
        if self.draw is not None:
            self.draw.continue_sources(taken, at)
            return
        here = dict(zip(self.mixed_names, self._given(at).tolist()))
        self._shifts = np.array([int(taken.get(name, 0)) - here[name] for name in self.mixed_names], dtype=np.int64)
        final = dict(zip(self.mixed_names, self._given(len(self)).tolist()))
        for name, shift, length in zip(self.mixed_names, self._shifts, self._lengths):
            if final[name] + shift > length:
                log.warning("resumed under another blend, %s would read %d samples past its maps (%d): they repeat "
                            "its first samples", name, final[name] + shift - length, length)

    @property
    def mixed_names(self) -> tuple[str, ...]:
        """The sources whose weights online mixing moves, in the order of its weights (this split's)."""
        return tuple(member.name for member in self.plan.members)

    def online_mixer(self) -> OnlineMixer:
        """A mixer for this online-mixed split: the blend's ``mixing`` settings, its sources' weights as the
        prior, and the per-source arrays it observes indexed as ``source_ids`` are (:attr:`source_names`)."""
        if self.draw is None:
            raise ValueError(f"the {self.split} split is not mixed online; add mixing: {{kind: online}} to the blend")
        return OnlineMixer(self.mixing, self.mixed_names, self.plan.blend_weights, self.source_names)

    def set_weights(self, weights: np.ndarray, at: int) -> None:
        """Draw this online-mixed split's samples from blended sample ``at`` on with ``weights`` (in the order of
        :attr:`mixed_names`); ``at`` is the first sample not read yet (the loader's ``consumed_samples``)."""
        if self.draw is None:
            raise ValueError(f"the {self.split} split is not mixed online; its weights are fixed by the blend")
        self.draw.set_weights(weights, at)

    def shard_of(self, index: int) -> str:
        """The shard prefix holding the first token of sample ``index``: for a glob source, which of its files
        the sample starts in (a sample may run on into the next shard); for one file, its prefix."""
        member, sample = self.locate(index)
        split = self._members[member]
        return split.source.shard_of(split.segments(sample)[0][0])

    def fill_rows(self, indices: list[int] | np.ndarray, rows: np.ndarray, starts: np.ndarray | None = None) -> None:
        """Write the raw tokens of ``indices`` into ``rows`` [len(indices), S + extra]; ``starts`` (bool, same
        shape) gets True where each document piece, and the padding after them, begins."""
        for number, (row, index) in enumerate(zip(rows, indices)):
            self._fill(int(index), row, None if starts is None else starts[number])

    def _fill(self, index: int, row: np.ndarray, starts: np.ndarray | None) -> list[tuple[int, int, int, int]]:
        """Sample ``index`` into ``row`` (padding with PAD_ID); (row position, sequence, offset, tokens) of each
        document piece in it."""
        member, sample = self.locate(index)
        split = self._members[member]
        placed, filled = [], 0
        for sequence, offset, length in split.segments(sample):
            part = split.source.read(sequence, offset, length)
            row[filled : filled + len(part)] = part
            placed.append((filled, sequence, offset, len(part)))
            filled += len(part)
        row[filled:] = PAD_ID
        if starts is not None:
            starts[[at for at, _, _, _ in placed] + ([filled] if filled < len(row) else [])] = True
        return placed

    def view(self, index: int) -> tuple[np.ndarray, list[tuple[int, int, int, int]]]:
        """The S + extra raw token ids of sample ``index`` (inputs plus the last label; padding is PAD_ID) and
        where each document piece sits in it: (row position, sequence id, offset in the document, tokens)."""
        row = np.empty(self.row_length, dtype=np.int64)
        return row, self._fill(index, row, None)

    def tokens_of(self, index: int) -> np.ndarray:
        """The S + extra raw token ids of sample ``index`` (inputs plus the last label)."""
        return self.view(index)[0]

    def batch(self, indices: list[int] | np.ndarray) -> dict[str, np.ndarray]:
        """The samples of ``indices`` stacked: ``tokens``, ``labels``… each [len(indices), S], and
        ``source_ids`` [len(indices)]."""
        rows = np.empty((len(indices), self.row_length), dtype=np.int64)
        starts = np.zeros(rows.shape, dtype=bool) if self.packed else None
        self.fill_rows(indices, rows, starts)
        return {**make_batch(rows, self.options, self.eod_id, starts, self.pad_id),
                "source_ids": self.source_ids(indices)}

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
    check_maps_fit(resolved, plans.values())
    datasets = {split: SplitDataset(resolved, build_split_maps(resolved, plan)) if plan else None
                for split, plan in plans.items()}
    return BlendDatasets(resolved, counts, **datasets)
