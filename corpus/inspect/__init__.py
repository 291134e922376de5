"""``corpus inspect``: what a ``.bin/.idx`` pair holds, and everything wrong with it.

Modules: ``run`` (:class:`~corpus.inspect.run.InspectConfig` → :func:`~corpus.inspect.run.inspect`), ``summary``
(header, counts, length statistics from the ``.idx`` alone), ``stats`` (the vectorised statistics), ``checks``
(``--check``: every problem, not only the first), ``show`` (``--show``: decoded documents), ``plot`` (``--plot``).
"""
