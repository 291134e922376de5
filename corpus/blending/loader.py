"""The torch side: split datasets as ``torch.utils.data.Dataset`` and a resumable micro-batch
loader sharded by data-parallel rank (the only module of the data path that imports torch).

Order is Megatron's ``MegatronPretrainingSampler``: global micro-step k covers samples
``[c, c + micro_batch * dp_size)`` with ``c = consumed_samples``, and rank r takes
``[c + r * micro_batch, c + (r + 1) * micro_batch)``. The maps already shuffle, so resuming is
exact: a loader made with ``consumed_samples=c`` yields what an uninterrupted one yields after
``c`` samples. Its state carries the blend fingerprint; loading a state made for another blend
raises :class:`UserError` unless ``allow_blend_change=True``. An online-mixed split's draw resumes exactly
under the same blend. Under another (allowed), each source goes on after the samples it gave (its position by
name), so that no sample is repeated or skipped where a source's maps are the same under both blends.

Each batch carries ``source_ids`` (int64 [micro_batch]): the source of each sample, an index into the
loader's ``source_names`` (the blend's sources in file order). A plain ``torch.utils.data.DataLoader`` over
a :class:`TorchSplitDataset` collates the same key, so a training loop of one's own can weigh or log its
losses per source::

    names = dataset.source_names
    for batch in torch.utils.data.DataLoader(dataset, batch_size=8):
        per_sample = (token_losses * batch["loss_mask"]).sum(1)
        for source in batch["source_ids"].unique().tolist():
            log(names[source], per_sample[batch["source_ids"] == source].sum())
"""

from __future__ import annotations

import logging
from typing import Iterator

import numpy as np

from corpus.core.optional import install_hint

try:
    import torch
except ModuleNotFoundError as error:  # a data-only install: say what to install, and what works without it
    raise ModuleNotFoundError(f"{__name__} gives torch tensors and needs torch, which is not installed: "
                              f"{install_hint('torch')}; corpus.blending.datasets.build_split_datasets gives the same "
                              "samples as numpy arrays without it", name="torch") from error

from corpus.blending.datasets import BlendDatasets, SampleCounts, SplitDataset, build_split_datasets
from corpus.blending.resolve import ResolvedBlend
from corpus.blending.schema import BlendConfig
from corpus.core.errors import UserError

log = logging.getLogger(__name__)


class TorchSplitDataset(torch.utils.data.Dataset):
    """A :class:`~corpus.blending.datasets.SplitDataset` returning torch tensors: ``tokens``, ``labels``,
    ``position_ids`` (int64 [S]), ``loss_mask`` (float32 [S]), ``source_ids`` (int64, 0-d: an index into
    :attr:`source_names`) and, when asked, ``cu_seqlens``."""

    def __init__(self, samples: SplitDataset) -> None:
        self.samples = samples

    @property
    def source_names(self) -> tuple[str, ...]:
        """The names ``source_ids`` index (the blend's sources in file order)."""
        return self.samples.source_names

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {name: torch.from_numpy(array) for name, array in self.samples[index].items()}


def build_datasets(blend: BlendConfig | ResolvedBlend, counts: SampleCounts, required: tuple[str, ...] = ("train",)
                   ) -> tuple[TorchSplitDataset | None, TorchSplitDataset | None, TorchSplitDataset | None,
                              BlendDatasets]:
    """(train, valid, test, the numpy-side :class:`BlendDatasets`) for ``counts`` samples.

    ``counts`` usually comes from :func:`corpus.blending.datasets.megatron_sample_counts`; a split the
    blend gives no share comes back None unless it is ``required``. The BlendDatasets carries the
    fingerprint, the sources' tokenizer facts and ``show_samples_command``."""
    built = build_split_datasets(blend, counts, required)
    wrap = lambda split: TorchSplitDataset(split) if split is not None else None  # noqa: E731
    return wrap(built.train), wrap(built.valid), wrap(built.test), built


class BlendLoader:
    """Micro-batches of one data-parallel rank, resumable from ``consumed_samples``.

    Yields dicts of tensors [micro_batch_size, S] (``source_ids`` [micro_batch_size], ``cu_seqlens``
    flattened over the micro-batch) until the next global micro-step would run past the dataset.
    ``consumed_samples`` counts samples of all ranks, as Megatron's does.
    """

    def __init__(self, dataset: TorchSplitDataset | SplitDataset, micro_batch_size: int, dp_rank: int = 0,
                 dp_size: int = 1, consumed_samples: int = 0, blend_fingerprint: str | None = None) -> None:
        if micro_batch_size < 1 or dp_size < 1 or not 0 <= dp_rank < dp_size:
            raise ValueError(f"bad sharding: micro_batch_size={micro_batch_size}, dp_rank={dp_rank}, dp_size={dp_size}")
        self.samples = dataset.samples if isinstance(dataset, TorchSplitDataset) else dataset
        self.micro_batch_size, self.dp_rank, self.dp_size = micro_batch_size, dp_rank, dp_size
        self.blend_fingerprint = blend_fingerprint
        self.consumed_samples = 0
        self._seek(consumed_samples)

    @property
    def source_names(self) -> tuple[str, ...]:
        """The names the batches' ``source_ids`` index (the blend's sources in file order)."""
        return self.samples.source_names

    @property
    def step_samples(self) -> int:
        """Samples one global micro-step consumes (all ranks)."""
        return self.micro_batch_size * self.dp_size

    def _seek(self, consumed: int) -> None:
        if consumed < 0 or consumed % self.step_samples:
            raise UserError(f"cannot resume at consumed_samples={consumed}: not a multiple of micro_batch_size "
                            "x "
                            f"dp_size = {self.step_samples}")
        self.consumed_samples = consumed

    def __len__(self) -> int:
        """Micro-batches left for this rank."""
        return max(0, (len(self.samples) - self.consumed_samples) // self.step_samples)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        draw = getattr(self.samples, "draw", None)
        while self.consumed_samples + self.step_samples <= len(self.samples):
            if draw is not None:  # every rank draws the whole global micro-step: the draws stay the same on all
                draw.draw_to(self.consumed_samples + self.step_samples)
            start = self.consumed_samples + self.dp_rank * self.micro_batch_size
            batch = self.samples.batch(np.arange(start, start + self.micro_batch_size))
            self.consumed_samples += self.step_samples
            yield {name: torch.from_numpy(array) for name, array in batch.items()}

    def state_dict(self) -> dict:
        """What a checkpoint needs to resume this loader exactly (an online-mixed split's draw too)."""
        state = {"consumed_samples": self.consumed_samples, "blend_fingerprint": self.blend_fingerprint,
                 "num_samples": len(self.samples)}
        if hasattr(self.samples, "taken"):
            state["source_samples"] = self.samples.taken(self.consumed_samples)
        draw = getattr(self.samples, "draw", None)
        if draw is not None:
            state["draw"] = draw.state_dict()
        return state

    def load_state_dict(self, state: dict, allow_blend_change: bool = False) -> None:
        """Resume from ``state``; refuses a state made for another blend unless ``allow_blend_change``."""
        theirs = state.get("blend_fingerprint")
        if theirs != self.blend_fingerprint:
            message = (f"the checkpoint's data came from another blend (fingerprint {str(theirs)[:12]}…, this blend "
                       f"{str(self.blend_fingerprint)[:12]}…): sources, weights, split, seq_length, seed or sample "
                       "options changed")
            if not allow_blend_change:
                raise UserError(message + "; resume with the original blend, or allow the change "
                                "(trainer run --override-blend-check; allow_blend_change=True in Python)")
            log.warning("%s; continuing as asked", message)
        if state.get("num_samples") not in (None, len(self.samples)):
            log.warning("the checkpoint's run asked for %s samples, this one for %d: the sample order after the "
                        "resume differs from an uninterrupted run", state["num_samples"], len(self.samples))
        self._seek(int(state["consumed_samples"]))
        draw = getattr(self.samples, "draw", None)
        if draw is not None and theirs == self.blend_fingerprint and "draw" in state:
            draw.load_state_dict(state["draw"], self.consumed_samples)
        elif theirs != self.blend_fingerprint and "source_samples" in state and hasattr(self.samples,
                                                                                     "continue_sources"):
            self.samples.continue_sources(state["source_samples"], self.consumed_samples)
        elif draw is not None:
            draw.continue_sources({}, self.consumed_samples)
