"""``corpus tokenize``: records in input order from the readers, encoded in batches (inline or in spawned workers),
written to one ``.bin/.idx`` pair per json key, with checkpoints for ``--resume``.

Contract: the output bytes never depend on ``workers``, ``batch_size`` or threads; a record is written to every
key or to none; a run resumed after any crash ends byte-identical to an uninterrupted one; shards concatenated in
order equal the unsharded output. Entry point: :func:`corpus.tokenize.run.tokenize` with a
:class:`corpus.tokenize.config.TokenizeConfig`.

Modules: ``config`` (every option), ``shards`` (which slice of the input this process reads), ``worker``
(decode + encode one batch), ``executor`` and ``ahead`` (ordered, bounded encoding, inline or pooled), ``outputs``
(the writers and the skipped-records list), ``resume_state`` (the checkpoint file), ``progress``, ``stats``, and
``run`` (the whole run).
"""
