"""From a YAML file and flags to a checked :class:`~trainer.config.schema.TrainConfig`.

Layers merge key by key (:func:`merge`: the YAML file, then the flags), then the project's one validator
(:func:`corpus.core.typed_config.build`) builds each section's dataclass, rejecting unknown keys and values of
the wrong type with the file, line and key path in the message.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any, Mapping

from corpus.core.errors import ConfigError
from corpus.core.typed_config import YamlSource, build, read_yaml
from trainer.config.schema import TrainConfig


def from_dict(cls: type, data: Mapping[str, Any], where: str = "config") -> Any:
    """Build dataclass ``cls`` from a nested mapping, rejecting unknown keys and wrongly typed values;
    ``where`` names the mapping's origin (a file, ``flags``) in error messages."""
    return build(cls, data, where=where)


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Nested dict merge: ``override`` wins, sub-mappings merge key by key."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _read_file(path: str | Path) -> YamlSource:
    """``--config``'s YAML file, which must hold a mapping of sections."""
    source = read_yaml(path)
    if source.data is None:
        source.data = {}
    if not isinstance(source.data, Mapping):
        raise ConfigError(f"expected a mapping of sections ({', '.join(f.name for f in fields(TrainConfig))})",
                          file=str(path), line=source.line(()))
    return source


def load_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> TrainConfig:
    """The run configuration from an optional YAML file and flag overrides (nested by section).

    Sections absent from both are built from their dataclass defaults (so ``data`` must be given). A mistake in
    a value the file set names the file and its line; one in a flag names ``flags``."""
    source = _read_file(path) if path is not None else None
    layers = merge(source.data if source else {}, overrides or {})
    sections = {f.name: layers.get(f.name, {}) for f in fields(TrainConfig)}
    unknown = sorted(set(layers) - set(sections))
    where = "flags" if source is None else (f"{path} (with flags)" if overrides else str(path))
    if unknown:
        raise ConfigError(f"unknown section(s) {', '.join(unknown)}; known: {', '.join(sections)}", file=where,
                          line=source.line((unknown[0],)) if source else None)
    if source is not None:
        source = YamlSource(where, sections, source.lines)
    return build(TrainConfig, sections, source=source, where=where)
