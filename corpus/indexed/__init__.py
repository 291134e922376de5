"""The Megatron-compatible ``.bin/.idx`` token format: a validating memory-mapped reader and a
streaming writer.

The byte layout is documented in ``format``.

Every problem with a file is raised as :class:`IndexFormatError`, which names the file and what is
wrong, so a corrupt pair never surfaces as a numpy traceback or a silent wrong read.

Modules: ``errors`` (:class:`IndexFormatError` and the others callers tell apart), ``format`` (layout, paths),
``reader`` (:class:`IndexedReader`), ``writer`` (:class:`IndexedWriter`). Import the public names from here.
"""

from corpus.indexed.errors import IndexFormatError
from corpus.indexed.format import (
    CODE_BY_DTYPE,
    DTYPE_BY_CODE,
    HEADER_SIZE,
    MAGIC,
    VERSION,
    IndexHeader,
    bin_path,
    cast_tokens,
    exists,
    idx_path,
    index_arrays,
    read_header,
    strip_suffix,
    token_dtype_for_vocab,
)
from corpus.indexed.reader import IndexedReader
from corpus.indexed.writer import IndexedWriter, finish_interrupted_finalize

__all__ = [
    "CODE_BY_DTYPE", "DTYPE_BY_CODE", "HEADER_SIZE", "MAGIC", "VERSION", "IndexFormatError", "IndexHeader",
    "IndexedReader", "IndexedWriter", "bin_path", "cast_tokens", "exists", "finish_interrupted_finalize", "idx_path",
    "index_arrays", "read_header", "strip_suffix", "token_dtype_for_vocab",
]
