"""From a YAML file and flags to a checked :class:`~trainer.config.schema.TrainConfig`.

Layers merge key by key (``merge``), then ``from_dict`` builds each section's dataclass, rejecting
unknown keys and values of the wrong type with the file and key path in the message. ``config_fields``
lists every leaf field: the CLI builds its flags from it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml

from trainer.config.schema import TrainConfig
from trainer.errors import ConfigError


def from_dict(cls: type, data: Mapping[str, Any], where: str = "config", key: str = "") -> Any:
    """Build dataclass ``cls`` from a nested mapping, rejecting unknown keys and wrongly typed values.

    ``where`` names the source (a file, or ``flags``) and ``key`` the path inside it, for error messages.
    """
    at = f"{where}: {key}" if key else where
    if not isinstance(data, Mapping):
        raise ConfigError(f"{at}: expected a mapping of keys, got {type(data).__name__}")
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(f"{at}: unknown key(s) {', '.join(unknown)}; known keys: {', '.join(known)}")
    hints = typing.get_type_hints(cls)
    values = {}
    for name, value in data.items():
        kind, inner = hints[name], f"{key}.{name}" if key else name
        values[name] = (from_dict(kind, value, where, inner) if is_dataclass(kind)
                        else _checked(value, kind, f"{where}: {inner}"))
    try:
        return cls(**values)
    except ConfigError as error:
        raise ConfigError(f"{at}: {error}") from None


def _checked(value: Any, kind: Any, where: str) -> Any:
    """``value`` if it fits the annotation ``kind`` (ints accepted for floats), else a ConfigError."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        for option in args:
            try:
                return _checked(value, option, where)
            except ConfigError:
                continue
    elif origin is Literal:
        if value in args:
            return value
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(map(str, args))}")
    elif origin is list:
        items = value.split() if isinstance(value, str) else value
        if isinstance(items, list):
            return [_checked(item, args[0], f"{where}[{i}]") for i, item in enumerate(items)]
    elif kind is type(None):
        if value is None:
            return None
    elif kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    elif kind is str and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    elif isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    raise ConfigError(f"{where}: expected {_type_name(kind)}, got {value!r}")


def _type_name(kind: Any) -> str:
    args = typing.get_args(kind)
    return " or ".join(_type_name(a) for a in args) if args else getattr(kind, "__name__", str(kind))


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Nested dict merge: ``override`` wins, sub-mappings merge key by key."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> TrainConfig:
    """The run configuration from an optional YAML file and flag overrides (nested by section).

    Sections absent from both are built from their dataclass defaults (so ``data`` must be given).
    """
    layers: dict[str, Any] = {}
    where = "flags"
    if path is not None:
        where = str(path)
        try:
            loaded = yaml.safe_load(Path(path).read_text()) or {}
        except FileNotFoundError:
            raise ConfigError(f"--config {path}: no such file") from None
        except yaml.YAMLError as error:
            raise ConfigError(f"{path}: not valid YAML ({error})") from None
        if not isinstance(loaded, Mapping):
            raise ConfigError(f"{path}: expected a mapping of sections ({', '.join(f.name for f in fields(TrainConfig))})")
        layers = dict(loaded)
        where = f"{path} (with flags)" if overrides else str(path)
    layers = merge(layers, overrides or {})
    sections = {f.name: layers.get(f.name, {}) for f in fields(TrainConfig)}
    unknown = sorted(set(layers) - set(sections))
    if unknown:
        raise ConfigError(f"{where}: unknown section(s) {', '.join(unknown)}; known: {', '.join(sections)}")
    return from_dict(TrainConfig, sections, where)


def config_fields(cls: type = TrainConfig) -> list[tuple[str, str, dataclasses.Field, Any]]:
    """Every leaf field as ``(section, name, field, type)``, in declaration order (what the CLI exposes)."""
    rows = []
    for section in fields(cls):
        section_type = typing.get_type_hints(cls)[section.name]
        hints = typing.get_type_hints(section_type)
        rows += [(section.name, leaf.name, leaf, hints[leaf.name]) for leaf in fields(section_type)]
    return rows
