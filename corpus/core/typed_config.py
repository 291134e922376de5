"""The one way a YAML file or a plain mapping becomes a typed, validated dataclass: blend files, tokenize
configs, tokenizer configs and trainer configs all go through :func:`build`.

Every mistake is a :class:`~corpus.core.errors.ConfigError` reading ``file:line: key.path: problem; fix``:
unknown keys are rejected with the list of known ones, a missing required key is named, a value of the wrong
type names the type wanted. ``__post_init__`` checks of a dataclass raise ``ConfigError`` with a key relative
to that dataclass (or none); :func:`build` adds the key path, the file and the line.

Types understood: ``bool``/``int``/``float``/``str`` (an integer is a number, a bool is neither), ``Literal``,
``Optional`` and other unions, ``tuple[X, ...]`` and ``list[X]`` from a YAML list (a ``list`` also from a string of
words, as a command line spells it), ``dict[str, X]``, nested dataclasses, and ``Any`` (taken as it is: options
handed on to a library, such as storage options).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from corpus.core.errors import ConfigError, KeyPath, format_key


def knob(default: Any, help: str, flag: str | None = None, *, switches: Mapping[str, Any] | None = None,
         aliases: tuple[str, ...] = (), choices: Iterable[str] | None = None, metavar: str | None = None) -> Any:
    """A documented config field, the one description of a setting: its default, its help text and its command-line
    spelling, from which ``cli/config_options.py`` makes the option (so no default or help is written twice).

    ``default`` is ``dataclasses.MISSING`` for a required field (a list default is copied for every instance).
    ``flag`` is the option's spelling (None: not a flag; an upper-case name such as ``DATASETS``: a positional
    argument); ``aliases`` other spellings of it (``--tp``);
    ``switches`` extra value-less flags and the value each sets (``--bf16`` sets ``bf16``); ``choices`` the values a
    ``str`` field accepts, as a live collection (a registry's keys: an entry added later is accepted too)."""
    metadata = {"help": help, "flag": flag, "switches": dict(switches or {}), "aliases": tuple(aliases),
                "choices": choices, "metavar": metavar}
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=metadata)
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def field_default(field: dataclasses.Field) -> Any:
    """The default of ``field`` (a fresh one from its factory), or ``dataclasses.MISSING`` when it is required."""
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


class YamlSource:
    """A parsed YAML file and the line of every key in it."""

    def __init__(self, file: str, data: object, lines: dict[KeyPath, int]) -> None:
        self.file, self.data, self.lines = file, data, lines

    def line(self, path: KeyPath) -> int | None:
        """The line of ``path``, or of its nearest parent that has one."""
        while path not in self.lines and path:
            path = path[:-1]
        return self.lines.get(path)


def read_yaml(path: str | Path) -> YamlSource:
    """Parse a YAML file, keeping the line of each mapping key and list item.

    The file must be UTF-8 (what every config of the project is written in; a Latin-1 comment or a UTF-16 file is
    named by its first bad byte, not decoded into other characters), and no mapping may give a key twice (YAML
    would keep the last one silently)."""
    file = str(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError("no such file", file=file) from None
    except OSError as failure:
        raise ConfigError(f"cannot read ({failure.strerror})", file=file) from None
    text = _utf8_text(raw, file)
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as failure:
        mark = getattr(failure, "problem_mark", None)
        problem = getattr(failure, "problem", None) or str(failure)
        raise ConfigError(f"not valid YAML: {problem}", file=file, line=mark.line + 1 if mark else None) from None
    finally:
        loader.dispose()
    lines: dict[KeyPath, int] = {}
    if node is not None:
        _record_lines(node, (), lines, file)
    return YamlSource(file, data, lines)


def _utf8_text(raw: bytes, file: str) -> str:
    """``raw`` decoded as UTF-8 (a UTF-8 byte-order mark allowed); anything else is a :class:`ConfigError` naming
    the line and byte offset of the first byte that is not UTF-8."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as failure:
        line = raw.count(b"\n", 0, failure.start) + 1
        byte = raw[failure.start]
        encoding = " (a UTF-16 byte-order mark)" if raw[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise ConfigError(f"not UTF-8: byte 0x{byte:02x} at offset {failure.start}{encoding} cannot be decoded; save "
                          "the file as UTF-8", file=file, line=line) from None


def _record_lines(node: yaml.Node, path: KeyPath, lines: dict[KeyPath, int], file: str) -> None:
    """Record the line of every key and item under ``node``; a key given twice in one mapping is a
    :class:`ConfigError` naming both lines."""
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        first: dict[str, yaml.Mark] = {}
        for key_node, value_node in node.value:
            key, mark = key_node.value, key_node.start_mark
            if isinstance(key_node, yaml.ScalarNode):
                if key in first:
                    raise ConfigError(f"key {key!r} is given twice ({_both_places(first[key], mark)}); keep one",
                                      format_key(path + (key,)), file, mark.line + 1)
                first[key] = mark
            lines[path + (key,)] = mark.line + 1
            _record_lines(value_node, path + (key,), lines, file)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _record_lines(item, path + (index,), lines, file)


def _both_places(earlier: yaml.Mark, later: yaml.Mark) -> str:
    """``lines 2 and 5``, or ``line 2, columns 4 and 19`` when both are on one line (a flow mapping)."""
    if earlier.line == later.line:
        return f"line {later.line + 1}, columns {earlier.column + 1} and {later.column + 1}"
    return f"lines {earlier.line + 1} and {later.line + 1}"


def yaml_fields(cls: type) -> list[dataclasses.Field]:
    """The fields a mapping may set (``metadata={"yaml": False}`` marks ones the loader fills in itself)."""
    return [f for f in dataclasses.fields(cls) if f.init and f.metadata.get("yaml", True)]


class _Place:
    """Where the values being checked came from: a file (with lines when it was YAML) or a name such as
    ``flags``."""

    def __init__(self, source: YamlSource | None, where: str | None) -> None:
        self.source = source
        self.file = source.file if source else where

    def fail(self, problem: str, path: KeyPath) -> ConfigError:
        return ConfigError(problem).located(path, self.file, self.source.line if self.source else None)


def build(cls: type, value: object, path: KeyPath = (), source: YamlSource | None = None,
          extra: dict | None = None, where: str | None = None):
    """A ``cls`` made from the mapping ``value``, its keys and value types checked.

    ``path`` is where ``value`` sits in the file, ``source`` the YAML file it came from (for lines) or ``where``
    names its origin otherwise (``"flags"``, a file read elsewhere); ``extra`` sets fields a mapping may not."""
    return _build(cls, value, path, _Place(source, where), extra)


def _build(cls: type, value: object, path: KeyPath, place: _Place, extra: dict | None = None):
    if not isinstance(value, dict):
        raise place.fail(f"expected a mapping of {_names(cls)}, got {_describe(value)}", path)
    known = {f.name: f for f in yaml_fields(cls)}
    unknown = [k for k in value if k not in known]
    if unknown:
        raise place.fail(f"unknown key(s) {', '.join(map(str, unknown))}; known keys: {', '.join(sorted(known))}",
                         path + (unknown[0],))
    hints = typing.get_type_hints(cls)
    kwargs = dict(extra or {})
    for name, field in known.items():
        if name in value:
            kwargs[name] = _coerce(value[name], hints[name], path + (name,), place)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise place.fail(f"missing required key {name!r}", path + (name,))
    try:
        return cls(**kwargs)
    except ConfigError as failure:
        raise failure.located(path, place.file, place.source.line if place.source else None) from None


def coerce(value: object, hint: object, path: KeyPath = (), source: YamlSource | None = None,
           where: str | None = None):
    """``value`` checked against the type ``hint`` (see the module docstring), lists made tuples where the hint
    is a tuple; a :class:`ConfigError` at ``path`` otherwise."""
    return _coerce(value, hint, path, _Place(source, where))


def _coerce(value: object, hint: object, path: KeyPath, place: _Place):
    if hint is typing.Any:
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        failures = []
        for option in options:
            try:
                return _coerce(value, option, path, place)
            except ConfigError as failure:
                if failure.key != format_key(path):  # right shape, wrong inside: that error is the one
                    raise
                failures.append(failure)
        raise failures[-1] if len(options) == 1 else place.fail(
            f"expected {' or '.join(_type_name(o) for o in options)}, got {_describe(value)}", path)
    if origin is typing.Literal:
        if any(value == option and type(value) is type(option) for option in args):
            return value
        raise place.fail(f"{value!r} is not one of {', '.join(map(str, args))}", path)
    if origin in (tuple, list):
        items = value.split() if isinstance(value, str) and origin is list else value
        if isinstance(items, (list, tuple)):
            checked = [_coerce(item, args[0], path + (i,), place) for i, item in enumerate(items)]
            return tuple(checked) if origin is tuple else checked
    if origin is dict and isinstance(value, dict):
        return {key: _coerce(item, args[1], path + (key,), place) for key, item in value.items()}
    if dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return value
        return _build(hint, value, path, place)
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint in (bool, str) and isinstance(value, hint):
        return value
    raise place.fail(f"expected {_type_name(hint)}, got {_describe(value)}", path)


def _type_name(hint: object) -> str:
    if dataclasses.is_dataclass(hint):
        return f"a mapping of {_names(hint)}"
    origin = typing.get_origin(hint)
    if origin in (tuple, list):
        return f"a list of {_type_name(typing.get_args(hint)[0])}"
    if origin is dict:
        return f"a mapping of {_type_name(typing.get_args(hint)[1])}"
    if origin is typing.Literal:
        return f"one of {', '.join(map(str, typing.get_args(hint)))}"
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string"}.get(hint, str(hint))


def _names(cls: type) -> str:
    return "{" + ", ".join(f.name for f in yaml_fields(cls)) + "}"


def _describe(value: object) -> str:
    return f"{type(value).__name__} {value!r}" if not isinstance(value, (dict, list)) else type(value).__name__
