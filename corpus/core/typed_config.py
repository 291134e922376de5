"""YAML -> typed dataclasses, with every mistake reported as ``file:line: key: problem; fix``.

Used by blend files (and reusable by any other YAML config). Unknown keys are rejected with the
list of known ones; a value of the wrong type names the type wanted. ``__post_init__`` checks of a
dataclass raise :class:`ConfigError` with a key relative to that dataclass; :func:`build` adds the
key path, the file and the line.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path

import yaml

from corpus.core.errors import CorpusError

KeyPath = tuple[typing.Union[str, int], ...]


class ConfigError(CorpusError, ValueError):
    """A config value is wrong. ``key`` is a dotted path (``sources[1].weight``); ``file``/``line``
    are filled in when the value came from a file."""

    def __init__(self, problem: str, key: str = "", file: str | None = None, line: int | None = None) -> None:
        self.problem, self.key, self.file, self.line = problem, key, file, line
        where = f"{file}:{line}: " if file and line else (f"{file}: " if file else "")
        super().__init__(f"{where}{key + ': ' if key else ''}{problem}")

    def located(self, prefix: KeyPath, source: "YamlSource | None") -> "ConfigError":
        """The same error with ``prefix`` prepended to its key and the file/line of that key."""
        path = prefix + parse_key(self.key)
        file = source.file if source else self.file
        line = source.line(path) if source else self.line
        return type(self)(self.problem, format_key(path), file, line)


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


class YamlSource:
    """A parsed YAML file and the line of every key in it."""

    def __init__(self, file: str, data: object, lines: dict[KeyPath, int]) -> None:
        self.file, self.data, self.lines = file, data, lines

    def line(self, path: KeyPath) -> int | None:
        """The line of ``path``, or of its nearest parent that has one."""
        while path not in self.lines and path:
            path = path[:-1]
        return self.lines.get(path)


def read_yaml(path: str | Path, error: type[ConfigError] = ConfigError) -> YamlSource:
    """Parse a YAML file, keeping the line of each mapping key and list item."""
    file = str(path)
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise error("no such file", file=file) from None
    except OSError as failure:
        raise error(f"cannot read ({failure.strerror})", file=file) from None
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as failure:
        mark = getattr(failure, "problem_mark", None)
        problem = getattr(failure, "problem", None) or str(failure)
        raise error(f"not valid YAML: {problem}", file=file, line=mark.line + 1 if mark else None) from None
    finally:
        loader.dispose()
    lines: dict[KeyPath, int] = {}
    if node is not None:
        _record_lines(node, (), lines)
    return YamlSource(file, data, lines)


def _record_lines(node: yaml.Node, path: KeyPath, lines: dict[KeyPath, int]) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            lines[path + (key_node.value,)] = key_node.start_mark.line + 1
            _record_lines(value_node, path + (key_node.value,), lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _record_lines(item, path + (index,), lines)


def yaml_fields(cls: type) -> list[dataclasses.Field]:
    """The fields a YAML mapping may set (``metadata={"yaml": False}`` marks internal ones)."""
    return [f for f in dataclasses.fields(cls) if f.init and f.metadata.get("yaml", True)]


def build(cls: type, value: object, path: KeyPath = (), source: YamlSource | None = None,
          error: type[ConfigError] = ConfigError, extra: dict | None = None):
    """Make a ``cls`` from a mapping, checking keys and types; ``extra`` sets non-YAML fields."""
    if not isinstance(value, dict):
        raise error(f"expected a mapping of {_names(cls)}, got {_describe(value)}").located(path, source)
    known = {f.name: f for f in yaml_fields(cls)}
    unknown = [k for k in value if k not in known]
    if unknown:
        raise error(f"unknown key {unknown[0]!r} (known keys: {', '.join(known)})").located(path + (unknown[0],), source)
    hints = typing.get_type_hints(cls)
    kwargs = dict(extra or {})
    for name, field in known.items():
        if name in value:
            kwargs[name] = coerce(value[name], hints[name], path + (name,), source, error)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise error(f"missing required key {name!r}").located(path + (name,), source)
    try:
        return cls(**kwargs)
    except ConfigError as failure:
        raise failure.located(path, source) from None


def coerce(value: object, hint: object, path: KeyPath, source: YamlSource | None, error: type[ConfigError] = ConfigError):
    """Check ``value`` against a type hint (bool/int/float/str, Optional, tuple[X, ...],
    dict[str, X], dataclasses) and convert lists to tuples."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        failures = []
        for option in options:
            try:
                return coerce(value, option, path, source, error)
            except ConfigError as failure:
                if failure.key != format_key(path):  # right shape, wrong inside: that error is the one
                    raise
                failures.append(failure)
        raise failures[-1] if len(options) == 1 else error(
            f"expected {' or '.join(_type_name(o) for o in options)}, got {_describe(value)}").located(path, source)
    if origin is tuple and isinstance(value, list):
        return tuple(coerce(item, args[0], path + (i,), source, error) for i, item in enumerate(value))
    if origin is dict and isinstance(value, dict):
        return {key: coerce(item, args[1], path + (key,), source, error) for key, item in value.items()}
    if dataclasses.is_dataclass(hint):
        return build(hint, value, path, source, error)
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint in (bool, str) and isinstance(value, hint):
        return value
    raise error(f"expected {_type_name(hint)}, got {_describe(value)}").located(path, source)


def _type_name(hint: object) -> str:
    if dataclasses.is_dataclass(hint):
        return f"a mapping of {_names(hint)}"
    origin = typing.get_origin(hint)
    if origin is tuple:
        return f"a list of {_type_name(typing.get_args(hint)[0])}"
    if origin is dict:
        return f"a mapping of {_type_name(typing.get_args(hint)[1])}"
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string"}.get(hint, str(hint))


def _names(cls: type) -> str:
    return "{" + ", ".join(f.name for f in yaml_fields(cls)) + "}"


def _describe(value: object) -> str:
    return f"{type(value).__name__} {value!r}" if not isinstance(value, (dict, list)) else type(value).__name__
