"""blendforge's data side: readers, tokenizers, the ``.bin/.idx`` format, the tokenize pipeline,
blends, index maps and datasets. See corpus/README.md for the module map."""
