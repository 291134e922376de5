"""The one hierarchy of errors meant for people, used by ``corpus`` and ``trainer`` alike.

Every error a user can cause (a bad file, option, key or input record) derives from :class:`UserError`;
the CLI catches it in one place (``cli/app.py``) and prints its message alone, without a traceback, with
exit status 1. The message names the thing (file, line, key or flag) and the fix.

The kinds every layer shares live here: :class:`ConfigError` (the one class for a wrong option or config value,
with its key), :class:`InputError` (an input file, record or dataset that is missing or unusable) and
``corpus.core.disk.OutputError`` (a place that cannot be written). A package defines its own class only where a
caller must tell that failure apart, and then in the package's ``errors.py`` (``corpus.storage.errors``,
``corpus.indexed.errors``, ``trainer.errors``…). Exceptions that never leave their module (control flow) are
private (``_Stopped``) and say why in their docstring.
"""

from __future__ import annotations

import typing

#: Where in a nested config a value sits: ``("sources", 1, "weight")``.
KeyPath = tuple[typing.Union[str, int], ...]


class UserError(Exception):
    """An error caused by input or options, with a message written for the person who ran the command.

    ``exit_code`` is the command's exit status when it ends with this error."""

    exit_code = 1


class ConfigError(UserError, ValueError):
    """A config value is wrong. ``key`` is a dotted path (``sources[1].weight``, ``training.train_iters``);
    ``file``/``line`` are filled in when the value came from a file."""

    def __init__(self, problem: str, key: str = "", file: str | None = None, line: int | None = None) -> None:
        self.problem, self.key, self.file, self.line = problem, key, file, line
        where = f"{file}:{line}: " if file and line else (f"{file}: " if file else "")
        super().__init__(f"{where}{key + ': ' if key else ''}{problem}")

    def located(self, prefix: KeyPath, file: str | None, line_of: typing.Callable[[KeyPath], int | None] | None
                ) -> "ConfigError":
        """The same error with ``prefix`` put before its key, in ``file`` at the line ``line_of`` gives that key."""
        path = prefix + parse_key(self.key)
        return type(self)(self.problem, format_key(path), file or self.file,
                          line_of(path) if line_of else self.line)


class InputError(UserError):
    """An input names nothing readable, or what it names cannot be used as asked (a missing or unsupported file,
    an empty glob, datasets that cannot be combined, metrics that hold no records)."""


def format_key(path: KeyPath) -> str:
    """``("sources", 1, "weight")`` -> ``sources[1].weight``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def parse_key(key: str) -> KeyPath:
    """The inverse of :func:`format_key`."""
    path: list[str | int] = []
    for piece in key.replace("[", ".[").split("."):
        if piece.startswith("["):
            path.append(int(piece[1:-1]))
        elif piece:
            path.append(piece)
    return tuple(path)
