"""blendforge's data side: raw text to Megatron ``.bin/.idx`` token files, and those files to the samples a trainer
reads. Packages, lowest layer first (a package imports only the ones before it; ``tests/test_import_graph.py``
holds the code to that):

- ``core``: the error hierarchy, the one YAML/dict → dataclass validator, optional dependencies;
- ``indexed``: the ``.bin/.idx`` format (reader, writer), its sidecar, prefixes and merging;
- ``readers``: streaming records out of JSONL (plain, gzip, zstd) and Parquet inputs;
- ``tokenizers``: Megatron's tokenizer types on fast batch encoders, with Megatron's ids;
- ``tokenize``: the ``corpus tokenize`` pipeline; ``autotune``: its worker-count search;
- ``inspect``: ``corpus inspect``; ``blending``: blend files, index maps, datasets and the loader.

Every error a user can cause is a :class:`corpus.core.errors.UserError` naming the file, key or line and the fix;
files are written under temporary names and renamed when complete.
"""
