"""The parts of the tokenize pipeline (the entry point is :mod:`corpus.tokenize`): config, shard
planning, the worker side, the ordered executor, outputs and checkpoints, progress and statistics."""
