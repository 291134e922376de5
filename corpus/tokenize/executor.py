"""Run the encoder over a stream of batches, in worker processes, and hand results back in order.

Bounded: at most ``2 * workers + 2`` batches are in flight, so reading never runs far ahead of
writing and memory stays flat however large the corpus. Workers start as the part workers of a run do
(:mod:`corpus.tokenize.processes`): never forked from this process, whose tokenizer's rayon thread pool a
child would inherit without its threads, and hang.
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Iterator

from corpus.readers import RawBatch
from corpus.tokenize.ahead import run_ahead
from corpus.tokenize.errors import WorkerDied
from corpus.tokenize.processes import worker_context
from corpus.tokenize.worker import BatchEncoder, EncodedBatch, WorkerSpec, encode_in_worker, start_worker


def encode_inline(batches: Iterator[RawBatch], encoder: BatchEncoder) -> Iterator[tuple[RawBatch, EncodedBatch]]:
    """``workers=0`` (the default): encode in this process, in two threads ahead of the caller's writing
    (one reads and decodes JSON, one runs the library's multi-threaded batch call), results in order."""
    decoded = run_ahead(batches, lambda batch: (batch, encoder.decode(batch.payload)), name="decode")
    return run_ahead(decoded, lambda pair: (pair[0], encoder.encode_extracted(pair[0].payload, pair[1])),
                     name="encode")


def encode_in_pool(batches: Iterator[RawBatch], spec: WorkerSpec, workers: int) -> Iterator[tuple[RawBatch,
                                                                                                  EncodedBatch]]:
    """Encode in ``workers`` worker processes; results come back in input order."""
    limit = 2 * workers + 2
    context = worker_context((spec.tokenizer, spec.threads))
    with ProcessPoolExecutor(workers, mp_context=context, initializer=start_worker,
                             initargs=(spec, dict(os.environ))) as pool:
        pending: deque = deque()
        try:
            for batch in batches:
                pending.append((batch, pool.submit(encode_in_worker, batch.payload)))
                if len(pending) >= limit:
                    done, future = pending.popleft()
                    yield done, future.result()
            while pending:
                done, future = pending.popleft()
                yield done, future.result()
        except BrokenProcessPool:
            raise WorkerDied("a tokenizer worker process died (out of memory or killed?); "
                             "rerun with --resume to continue from the last checkpoint") from None
        finally:
            for _, future in pending:
                future.cancel()
