"""Decode and validate raw records into the text of each json key (runs in the workers).

Every bad record is named with the reason a person needs to fix it: malformed JSON, invalid UTF-8,
not a JSON object, a missing key, a null or non-string value. A record with one bad key is bad as a
whole, so the outputs of all keys stay aligned document for document. Empty text is not an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import orjson

from corpus.readers.batches import ColumnPayload, LinePayload

_MISSING = object()
_JSON_TYPES = {dict: "object", list: "array", int: "number", float: "number", bool: "boolean", type(None): "null"}


@dataclass
class Extracted:
    """The texts of the good records (``texts[k][j]``: key k of the j-th good record) and the bad ones
    as ``(index in the batch, reason)``, in batch order."""

    texts: list[list[str]]
    bad: list[tuple[int, str]]


def _json_problem(line: bytes, error: Exception) -> str:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as bad:
        return f"invalid UTF-8 at byte {bad.start} of the line ({line[bad.start:bad.start + 4]!r})"
    return f"malformed JSON: {error}"


def _lookup(record: dict, key: str, path: list[str]) -> object:
    """``record[key]``, else the nested value at ``meta.title``-style ``path``."""
    if key in record:
        return record[key]
    value: object = record
    for name in path:
        if type(value) is not dict or name not in value:
            return _MISSING
        value = value[name]
    return value


def _value_problem(key: str, value: object) -> str:
    if value is _MISSING:
        return f"missing key '{key}'"
    kind = _JSON_TYPES.get(type(value), type(value).__name__)
    shown = repr(value)
    return f"key '{key}' is {'null' if value is None else f'a JSON {kind} ({shown[:40]})'}, not a string"


def _from_lines(payload: LinePayload, keys: list[str]) -> Extracted:
    paths = [key.split(".") for key in keys]
    texts: list[list[str]] = [[] for _ in keys]
    bad: list[tuple[int, str]] = []
    for index, line in enumerate(payload.lines):
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as error:
            bad.append((index, _json_problem(line, error)))
            continue
        if type(record) is not dict:
            bad.append((index, f"not a JSON object but a JSON {_JSON_TYPES.get(type(record), 'value')}"))
            continue
        values = [_lookup(record, key, path) for key, path in zip(keys, paths)]
        problem = next((_value_problem(k, v) for k, v in zip(keys, values) if type(v) is not str), None)
        if problem:
            bad.append((index, problem))
            continue
        for column, value in zip(texts, values):
            column.append(value)
    return Extracted(texts, bad)


def _from_columns(payload: ColumnPayload, keys: list[str]) -> Extracted:
    texts: list[list[str]] = [[] for _ in keys]
    bad: list[tuple[int, str]] = []
    for row in range(payload.rows):
        problem = next((payload.problems[k] for k in range(len(keys)) if payload.problems[k]), None)
        if problem is None:
            problem = next((f"key '{keys[k]}' is null, not a string" for k in range(len(keys))
                            if payload.columns[k][row] is None), None)
        if problem:
            bad.append((row, problem))
            continue
        for column, values in zip(texts, payload.columns):
            column.append(values[row])
    return Extracted(texts, bad)


#: How to extract each kind of payload a reader produces.
EXTRACTORS: dict[type, Callable[..., Extracted]] = {LinePayload: _from_lines, ColumnPayload: _from_columns}


def extract(payload: LinePayload | ColumnPayload, keys: list[str]) -> Extracted:
    """Validate a batch and pull out each key's text (see :class:`Extracted`)."""
    return EXTRACTORS[type(payload)](payload, keys)
