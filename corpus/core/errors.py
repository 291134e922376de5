"""The one base class of errors meant for people.

Every error a user can cause (bad file, bad option, bad input record) derives from
:class:`CorpusError`; the CLI prints its message alone (no traceback) and exits non-zero.
Its message names the thing (file, line, key) and the fix.
"""


class CorpusError(Exception):
    """An error caused by input or options, with a message written for the person who ran the command."""
