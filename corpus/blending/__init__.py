"""Blends: the declaration of what a trainer reads, turned into megatron-core's samples, exactly.

Flow: ``schema`` (the blend file as :class:`~corpus.blending.schema.BlendConfig`) → ``resolve`` (its sources
opened and checked against each other: ``sources`` reads one prefix or a glob of shards as one file) → ``plan``
(Megatron's builder rules per split) → ``build`` (index maps through ``map_cache``, their arithmetic in
``index_maps`` and the sequential loops in ``loops``/``loops_numba``) → ``datasets`` (numpy samples, ``samples``
makes the batch arrays) → ``loader`` (the torch side: a resumable, data-parallel loader). ``report`` is
``corpus blend``'s dry run, prebuild and sample dump.

Contract: for the same sources, split, seed, sequence length and sample counts, every sample equals
megatron-core's ``BlendedMegatronDatasetBuilder``'s (a conformance test). Nothing here imports torch but
``loader``; the compiled loops load only when a map is built.
"""
