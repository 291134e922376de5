"""The sample ``corpus autotune-workers`` measures on: the first records of the input, read once.

Every trial then reads the same copy, a JSONL file in the autotuner's temporary folder that was just
written (so it sits in the page cache for the first trial as for the last), never the input itself:
disk caching cannot favour later trials, and a slow or remote input file system does not blur the
comparison (an ``s3://`` input is read once, here). JSONL lines are copied byte for byte (JSON decoding of
the real records is part of what workers do); Parquet rows become JSON objects of the json keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson

from corpus import storage
from corpus.core.atomic_write import atomic_file
from corpus.readers import ColumnPayload, LinePayload, ReadOptions, expand_inputs, read_slices
from corpus.tokenize.config import TokenizeConfig
from corpus.tokenize.shards import Shard, plan_slices

#: Records per read while copying the sample (reading only; trials use their own batch sizes).
COPY_BATCH = 1000


@dataclass(frozen=True)
class Sample:
    """The copied sample."""

    path: str
    documents: int
    bytes: int
    """Size of the JSONL copy (uncompressed): the basis of every trial's MB/s."""
    whole_input: bool
    """The input had no more records than the sample holds."""


def _lines(payload: LinePayload | ColumnPayload, keys: list[str]) -> list[bytes]:
    """JSONL lines of one batch: raw lines as read, or one object per Parquet row."""
    if isinstance(payload, LinePayload):
        return payload.lines
    columns = [(key, column) for key, column in zip(keys, payload.columns) if column is not None]
    return [orjson.dumps({key: column[row] for key, column in columns}) for row in range(payload.rows)]


def write_sample(config: TokenizeConfig, max_documents: int, path: Path) -> Sample:
    """Copy the first ``max_documents`` records of ``config.inputs`` (in input order) to ``path``."""
    storage.configure(config.storage_options)
    slices = plan_slices(expand_inputs(config.inputs), Shard(0, 1, "autotune-workers"))
    batches = read_slices(slices, ReadOptions(config.json_keys, min(COPY_BATCH, max_documents), 4 << 20))
    documents = size = 0
    whole = True
    try:
        with atomic_file(path) as out:
            for batch in batches:
                lines = _lines(batch.payload, config.json_keys)
                if documents + len(lines) > max_documents:
                    whole = False
                lines = lines[: max_documents - documents]
                chunk = b"".join(line + b"\n" for line in lines)
                out.write(chunk)
                documents, size = documents + len(lines), size + len(chunk)
                if not whole:
                    break
    finally:
        batches.close()
    return Sample(str(path), documents, size, whole)
