"""Token rows -> the arrays a GPT step consumes, vectorised over a micro-batch, numpy only.

Megatron's ``GPTDataset.__getitem__`` semantics (``_get_ltor_masks_and_position_ids``):

- with ``add_extra_token_to_sequence`` a row holds S + 1 tokens: ``tokens = row[:-1]``,
  ``labels = row[1:]``; without it ``tokens = row`` and the last label is padding;
- ``loss_mask`` is 1.0, 0.0 where the *input* token is EOD (``eod_mask_loss``) and where the
  label is padding; padding ids become 0 in tokens and labels;
- ``position_ids`` restart after every EOD input token with ``reset_position_ids``;
- ``cu_seqlens`` (``reset_attention_mask``): cumulative segment starts over the flattened
  micro-batch, a new segment after every EOD input token and at every row start — what
  varlen attention kernels (flash-attn, cuDNN/TE "thd") take for document-masked attention;
- packed rows (``packing: best_fit``) bring their document boundaries: positions and segments restart
  at each document piece and at the padding, which is loss-masked (it is never a label).
"""

from __future__ import annotations

import numpy as np

from corpus.blending.schema import SampleOptions

#: Megatron's pad id when the tokenizer has none; never a real token id.
PAD_ID = -1


def make_batch(rows: np.ndarray, options: SampleOptions, eod_id: int | None, starts: np.ndarray | None = None,
               pad_id: int = 0) -> dict[str, np.ndarray]:
    """The sample arrays of ``rows`` [B, S + extra] (int64): each [B, S], ``cu_seqlens`` 1-D. ``starts`` (bool,
    like ``rows``; packed samples) marks where each document piece and the padding begin: positions restart and
    segments split there, whatever the reset options say. Padding is fed as ``pad_id``."""
    if options.add_extra_token_to_sequence:
        tokens, labels = rows[:, :-1].copy(), rows[:, 1:].copy()
    else:
        tokens = rows.copy()
        labels = np.roll(rows, -1, axis=1)
        labels[:, -1] = PAD_ID
    batch, length = tokens.shape
    loss_mask = np.ones((batch, length), dtype=np.float32)
    if options.eod_mask_loss:
        loss_mask[tokens == eod_id] = 0.0
    padded_labels = labels == PAD_ID
    loss_mask[padded_labels] = 0.0
    labels[padded_labels] = 0
    tokens[tokens == PAD_ID] = pad_id
    positions = np.tile(np.arange(length, dtype=np.int64), (batch, 1))  # writable: torch.from_numpy needs that
    result = {"tokens": tokens, "labels": labels, "loss_mask": loss_mask}
    packed = starts is not None
    if packed or options.reset_position_ids or options.reset_attention_mask:
        if packed:
            new_segment = starts[:, :length].copy()
        else:
            new_segment = np.zeros((batch, length), dtype=bool)
            new_segment[:, 1:] = rows[:, : length - 1] == eod_id
        if packed or options.reset_position_ids:
            restarts = np.maximum.accumulate(np.where(new_segment, positions, 0), axis=1)
            positions = positions - restarts
        if packed or options.reset_attention_mask:
            new_segment[:, 0] = True
            flat = np.flatnonzero(new_segment.reshape(-1))
            result["cu_seqlens"] = np.append(flat, batch * length).astype(np.int32)
    result["position_ids"] = positions
    return result


def sample_from_batch(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The single sample of a one-row batch ([S] arrays, 0-d ``source_ids``; ``cu_seqlens`` unchanged)."""
    # NOTE: ``[0, ...]`` keeps a 1-D array's element an array (0-d), which torch.from_numpy takes
    return {name: (array if name == "cu_seqlens" else array[0, ...]) for name, array in batch.items()}
