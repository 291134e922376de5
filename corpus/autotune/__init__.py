"""``corpus autotune-workers``: the fastest ``workers`` / ``batch_size`` / ``threads_per_worker`` for this machine,
tokenizer and input, measured on a sample with the real pipeline in fresh processes, leaving nothing behind.

Modules: ``search`` (:class:`~corpus.autotune.search.AutotuneConfig` → :func:`~corpus.autotune.search.autotune`, the
staged search and its time budget), ``sample`` (the sample, read once), ``trial`` (one configuration in its own
process group), ``report`` (rates, noise, the recommendation and its table).
"""
