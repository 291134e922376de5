"""``corpus merge``: concatenate many ``.bin/.idx`` pairs into one, streaming.

The output equals, byte for byte, writing the concatenated documents directly: inputs are taken in
the order given (each glob or directory sorted), data is copied block by block, and lengths and
document indices pass through bounded spill buffers, so memory does not grow with the corpus. Inputs and output
may be remote (``s3://…``): a remote output is written in a local staging folder and uploaded when complete
(:mod:`corpus.indexed.publish`).
"""

from __future__ import annotations

import errno
import logging
import os
from dataclasses import MISSING, dataclass
from typing import Any

from corpus import storage
from corpus.core.disk import OutputError, free_bytes
from corpus.core.errors import InputError
from corpus.core.typed_config import knob
from corpus.indexed import IndexedWriter, bin_path, idx_path, read_header, sidecar
from corpus.indexed.prefixes import expand_all
from corpus.indexed.publish import output_stage, publish_pair

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MergeConfig:
    """What ``corpus merge`` joins, and where (the command's flags are generated from these fields)."""

    inputs: list[str] = knob(MISSING, "Prefixes, .idx/.bin paths, globs or directories (several after one --input, "
                             "or --input repeated); order is kept (globs sorted).", "--input")
    output_prefix: str = knob(MISSING, "Prefix of the merged pair (PREFIX.bin/.idx).", "--output-prefix")
    storage_options: dict[str, Any] | None = storage.storage_options_knob()


@dataclass(frozen=True)
class MergeResult:
    """What a merge wrote."""

    output_prefix: str
    inputs: list[str]
    num_documents: int
    num_sequences: int
    num_tokens: int


def _check_compatible(prefixes: list[str]) -> tuple[object, dict | None]:
    """Refuse mixed dtypes or tokenizers before any byte is written; returns the dtype and first sidecar."""
    dtypes = {p: read_header(idx_path(p)).dtype for p in prefixes}
    if len(set(dtypes.values())) > 1:
        listing = ", ".join(f"{p} ({d})" for p, d in dtypes.items())
        raise InputError(f"inputs have different token dtypes: {listing}; re-tokenize them with one tokenizer")
    metas = {p: sidecar.read(p) for p in prefixes}
    identities = {p: sidecar.tokenizer_identity(m) for p, m in metas.items()}
    known = {p: i for p, i in identities.items() if i is not None}
    if len(set(known.values())) > 1:
        first = next(iter(known))
        other = next(p for p, i in known.items() if i != known[first])
        raise InputError(
            f"inputs were tokenized differently: {first} used {known[first][:2]}, {other} used {known[other][:2]}; "
            "merge only files made with the same tokenizer and options"
        )
    if known and len(known) < len(prefixes):
        missing = [p for p in prefixes if p not in known]
        log.warning("%d input(s) have no tokenizer record (e.g. %s); assuming they match the others", len(missing),
                    missing[0])
    first_meta = next((metas[p] for p in prefixes if metas[p]), None)
    return next(iter(dtypes.values())), first_meta


def merge(inputs: list[str] | tuple[str, ...], output_prefix: str, storage_options: dict | None = None
          ) -> MergeResult:
    """Merge the datasets named by ``inputs`` (prefixes, globs, directories) into ``output_prefix``.
    ``storage_options``: see :func:`corpus.storage.configure`."""
    storage.configure(storage_options)
    output_prefix = str(output_prefix)
    prefixes = expand_all(inputs)
    if output_prefix in prefixes:
        raise InputError(f"output prefix {output_prefix} is also an input; choose another --output-prefix")
    dtype, first_meta = _check_compatible(prefixes)
    needed = sum(storage.info(bin_path(p)).size + storage.info(idx_path(p)).size for p in prefixes)
    stage = output_stage(output_prefix)
    free = free_bytes(f"{stage}.bin")
    if free is not None and free < needed:  # refused before a byte is written, not after minutes of copying
        raise OutputError(f"{stage}.bin", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), needed,
                          "--output-prefix", "run the merge again")
    meta = {"merged_from": prefixes}
    if first_meta:
        meta.update({key: first_meta[key] for key in ("tokenizer", "encoder", "vocab_size", "eod_id", "bos_id",
                                                      "json_key", "append_eod") if key in first_meta})
    try:
        with IndexedWriter(stage, dtype) as writer:
            for prefix in prefixes:
                writer.add_index(prefix)
            writer.finalize(meta)
    except OutputError as error:  # the partial files are gone (the writer aborts): the whole size is needed again
        raise error.for_command("--output-prefix", "run the merge again", needed) from None
    if stage != output_prefix:
        publish_pair(stage, output_prefix)
        storage.clear_staging(output_prefix)
    return MergeResult(output_prefix, prefixes, writer.num_documents, writer.num_sequences, writer.num_tokens)
