"""The encoder side of the pipeline: decode a raw batch, encode every json key, pack numpy arrays.

Runs in worker processes (or in the main process with ``workers=0``). NOTE: a worker's tokenizer is the one the
server that forked it built without encoding (:mod:`corpus.tokenize.server_tokenizer`), or is built here, inside the
worker, from a picklable :class:`WorkerSpec`; a tokenizer object (and its rayon thread pool) never crosses a process
boundary, and no process that has encoded is forked.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from corpus.indexed import cast_tokens
from corpus.readers import ColumnPayload, Extracted, LinePayload, extract
from corpus.tokenize.processes import join_run
from corpus.tokenize.server_tokenizer import prebuilt
from corpus.tokenize.stats import own_peak_rss_kb
from corpus.tokenizers import TextTokenizer, TokenizeError, TokenizerConfig, select_encoder
from corpus.tokenizers.flat import around_texts


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs to encode exactly as the main process decided."""

    tokenizer: TokenizerConfig
    """With ``encoder`` fixed to the encoder the main process selected."""
    threads: int
    keys: tuple[str, ...]
    eod: int | None
    """The id appended after every non-empty document (``--append-eod``), else None."""
    dtype: str


@dataclass
class EncodedBatch:
    """A batch's documents per key (``tokens[k]`` flat, ``lengths[k][j]`` tokens of good record j, EOD
    included; 0 = a document with no sequence) and its bad records as (index in batch, reason)."""

    tokens: list[np.ndarray]
    lengths: list[np.ndarray]
    bad: list[tuple[int, str]]
    peak_rss_kb: int


def pack(flat: np.ndarray, lengths: np.ndarray, dtype: np.dtype, eod: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Cast a batch's flat ids to the output dtype, adding EOD after every non-empty document
    (Megatron checks the token list, not the text: an empty list gets no EOD and no sequence)."""
    flat = cast_tokens(flat, dtype)
    if eod is None:
        return flat, lengths
    return around_texts(flat, lengths, [], [eod], chosen=lengths > 0)


class BatchEncoder:
    """Decode, validate and encode raw batches with one tokenizer."""

    def __init__(self, spec: WorkerSpec, tokenizer: TextTokenizer | None = None) -> None:
        self.spec = spec
        self.dtype = np.dtype(spec.dtype)
        self.tokenizer = tokenizer or select_encoder(spec.tokenizer, [], spec.threads)[0]

    def _encode_all(self, texts: list[list[str]], good: list[int], bad: list[tuple[int, str]]) -> list[tuple]:
        """Flat ids and lengths of every key; a text the library refuses makes its whole record bad
        (dropped from every key, so the outputs stay aligned)."""
        while True:
            try:
                return [self.tokenizer.encode_batch_flat(column) for column in texts]
            except TokenizeError as error:
                bad.append((good.pop(error.index), f"cannot tokenize: {error.reason}"))
                for column in texts:
                    del column[error.index]

    def encode(self, payload: LinePayload | ColumnPayload) -> EncodedBatch:
        """Encode one batch (see :class:`EncodedBatch`)."""
        return self.encode_extracted(payload, self.decode(payload))

    def decode(self, payload: LinePayload | ColumnPayload) -> Extracted:
        """The batch's texts per key and its bad records (JSON decoding and validation)."""
        return extract(payload, list(self.spec.keys))

    def encode_extracted(self, payload: LinePayload | ColumnPayload, extracted: Extracted) -> EncodedBatch:
        """Encode one batch already through :meth:`decode`."""
        bad_indices = {index for index, _ in extracted.bad}
        good = [index for index in range(len(payload)) if index not in bad_indices]
        ids = self._encode_all(extracted.texts, good, extracted.bad)
        packed = [pack(flat, lengths, self.dtype, self.spec.eod) for flat, lengths in ids]
        return EncodedBatch([p[0] for p in packed], [p[1] for p in packed], sorted(extracted.bad),
                            own_peak_rss_kb())


_encoder: BatchEncoder | None = None


def start_worker(spec: WorkerSpec, environment: dict[str, str]) -> None:
    """Process-pool initializer: go when the run goes, take the run's ``environment``, take the tokenizer the server
    that forked this worker built (:mod:`corpus.tokenize.server_tokenizer`), else build this worker's own once."""
    global _encoder
    join_run(environment)
    _encoder = BatchEncoder(spec, prebuilt(spec.tokenizer, spec.threads))


def encode_in_worker(payload: LinePayload | ColumnPayload) -> EncodedBatch:
    """Process-pool task: encode one batch with the worker's tokenizer."""
    assert _encoder is not None, "start_worker was not run in this process"
    return _encoder.encode(payload)
