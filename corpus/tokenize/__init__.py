"""``corpus tokenize``: records in input order from the readers, encoded in batches and written to one ``.bin/.idx``
pair per json key, on every core: the input is cut into parts that processes write side by side and a thread joins
in order, with checkpoints for ``--resume``.

Contract: the output bytes never depend on ``workers``, ``batch_size``, threads or parts; a record is written to
every key or to none; a run resumed after any crash ends byte-identical to an uninterrupted one; shards
concatenated in order equal the unsharded output. Entry point: :func:`corpus.tokenize.run.tokenize` with a
:class:`corpus.tokenize.config.TokenizeConfig`.

Modules: ``config`` (every option), ``shards`` (which slice of the input this process reads), ``plan`` (the parts of
a run), ``job`` (the run resolved: inputs, parts, processes, tokenizer), ``worker`` (decode + encode one batch),
``executor`` and ``ahead`` (ordered, bounded encoding of one part, inline or pooled), ``part`` (writing one part),
``pool`` (the processes writing parts), ``join`` (the parts joined into the outputs), ``parallel`` (a run of several
parts), ``outputs`` (the writers and the skipped-records list), ``resume_state`` (the checkpoint file), ``ending``
(finalize or abandon), ``progress``, ``stats``, and ``run`` (the whole run).
"""
