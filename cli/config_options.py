"""Command-line options generated from a typed config: every field declared with
:func:`~corpus.core.typed_config.knob` and a ``flag`` becomes an option whose spelling, help, choices and default
come from that declaration, so a command restates none of them.

An option's destination is the field's path joined by ``__`` (``tokenizer__model``); :func:`given_values` turns
what the user typed back into the nested mapping :func:`build_config` makes the config from. Options left out stay
unset, so the dataclass's default is the only one. A field holding a mapping is ``--storage-options``
(:func:`corpus.storage.storage_options_knob`, the one such field): its JSON is checked and parsed here, for every
command alike.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Collection, Iterator, Mapping

import click
from click.core import ParameterSource

from cli.options import STORAGE_OPTIONS, GreedyOption
from corpus.core.typed_config import field_default

#: Joins a nested field's path into one option destination.
SEPARATOR = "__"


class LiveChoice(click.Choice):
    """A choice among the keys of a live collection (a registry), read whenever a value is checked or help shown, so
    an entry registered after the command was built is accepted and listed."""

    def __init__(self, source: Collection[str]) -> None:
        self.source = source
        super().__init__(tuple(source))

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(self.source)

    @choices.setter
    def choices(self, _value: Any) -> None:
        """Set by click's constructor: the live collection stays the truth."""


def _field_hints(cls: type) -> Iterator[tuple[dataclasses.Field, Any]]:
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        yield field, hints[field.name]


def _without_none(hint: Any) -> tuple[Any, bool]:
    """``X`` of ``X | None`` (and whether None was allowed)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return (args[0] if len(args) == 1 else hint), len(args) < len(typing.get_args(hint))
    return hint, False


def _help(meta: Mapping, default: Any) -> str:
    """The field's help and, when it has a default worth showing, ``[default: …]`` (a list as its words)."""
    if default is dataclasses.MISSING or default is None or default is False:
        return meta["help"]
    shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
    return meta["help"] + (f" [default: {shown}]" if shown else "")


def _option(dest: str, meta: Mapping, kind: Any, default: Any, settings: Mapping[str, Any]) -> list[click.Parameter]:
    """The click parameters of one field: its flag (or argument) and its switches."""
    names = [meta["flag"], *meta["aliases"]] if meta["flag"] else []
    required = default is dataclasses.MISSING
    common = {"help": _help(meta, default), "metavar": meta["metavar"], **settings}
    if names and not names[0].startswith("-"):  # an upper-case name: a positional argument
        nargs = -1 if typing.get_origin(kind) in (list, tuple) else 1
        extra = {key: common[key] for key in ("type",) if key in common}
        metavar = names[0] + ("..." if nargs == -1 else "")
        return [click.Argument([dest], nargs=nargs, required=common.get("required", required), metavar=metavar,
                               **extra)]
    options: list[click.Parameter] = []
    if names:
        common.setdefault("required", required)
        if kind is bool and default is False:  # a switch on: it sets True (said, so a printed command can tell)
            options.append(click.Option([*names, dest], is_flag=True, flag_value=True, default=None, **common))
        elif kind is bool:
            options.append(click.Option([f"{names[0]}/--no-{names[0][2:]}", dest], is_flag=True, default=None,
                                        **common))
        elif typing.get_origin(kind) in (list, tuple):
            options.append(GreedyOption([*names, dest], **common))
        elif typing.get_origin(kind) is dict:  # --storage-options (see the module docstring)
            common.setdefault("type", STORAGE_OPTIONS)
            options.append(click.Option([*names, dest], **common))
        else:
            choices = (typing.get_args(kind) if typing.get_origin(kind) is typing.Literal else meta["choices"])
            common.setdefault("type", LiveChoice(choices) if choices is not None else kind)
            options.append(click.Option([*names, dest], **common))
    for switch, value in meta["switches"].items():
        said = f"Same as {meta['flag']} {value}." if meta["flag"] else meta["help"]
        options.append(click.Option([switch, dest], flag_value=value, default=None, help=said))
    return options


def config_options(cls: type, *, only: Collection[str] | None = None, settings: Mapping[str, Mapping] | None = None,
                   path: tuple[str, ...] = ()) -> list[click.Parameter]:
    """The options of every flagged field of ``cls``, nested configs included, in field order.

    ``only``: dotted field paths to keep (a nested config's path keeps all of it); ``settings``: click keyword
    arguments per dotted path, for what a command does differently (a parameter type that parses a value, a field
    required by the config but filled in by the command)."""
    settings = settings or {}
    params: list[click.Parameter] = []
    for field, hint in _field_hints(cls):
        here = path + (field.name,)
        dotted = ".".join(here)
        if only is not None and not any(dotted == kept or dotted.startswith(kept + ".")
                                        or kept.startswith(dotted + ".") for kept in only):
            continue
        kind, _ = _without_none(hint)
        if dataclasses.is_dataclass(kind) and not field.metadata.get("flag"):  # a section: its fields are flags
            params += config_options(kind, only=only, settings=settings, path=here)
        elif field.metadata.get("flag") or field.metadata.get("switches"):
            params += _option(SEPARATOR.join(here), field.metadata, kind, field_default(field),
                              settings.get(dotted, {}))
    return params


def given_values(ctx: click.Context, values: Mapping[str, Any]) -> dict:
    """What the user typed among ``values`` (a command's parameters), nested by field path; greedy lists as
    lists. Options left at their default are left out, so the config's own default applies."""
    nested: dict = {}
    for dest, value in values.items():
        if value is None or ctx.get_parameter_source(dest) is ParameterSource.DEFAULT:
            continue
        *sections, name = dest.split(SEPARATOR)
        place = nested
        for section in sections:
            place = place.setdefault(section, {})
        place[name] = list(value) if isinstance(value, tuple) else value
    return nested


def build_config(cls: type, values: Mapping[str, Any], path: tuple[str, ...] = ()) -> Any:
    """``cls`` made from ``values`` (as :func:`given_values` nests them); an optional nested config nobody gave a
    value of stays None. A nested config missing a required value is a usage error naming the flags."""
    kwargs = dict(values)
    for field, hint in _field_hints(cls):
        kind, optional = _without_none(hint)
        section = isinstance(kwargs.get(field.name), Mapping) or (field.name not in kwargs and not optional)
        if dataclasses.is_dataclass(kind) and section:
            kwargs[field.name] = build_config(kind, kwargs.get(field.name, {}), path + (field.name,))
    missing = [field for field in dataclasses.fields(cls)
               if field_default(field) is dataclasses.MISSING and field.name not in kwargs]
    if missing and path:
        given = [_spelling(cls, name) for name in values]
        needed = " and ".join(_spelling(cls, field.name) for field in missing)
        raise click.UsageError(f"{'/'.join(given)}: the {path[-1]} options need {needed}")
    return cls(**kwargs)


def _spelling(cls: type, name: str) -> str:
    """How the user spells field ``name`` of ``cls``: its flag, else its first switch, else the name."""
    field = next(field for field in dataclasses.fields(cls) if field.name == name)
    return field.metadata.get("flag") or next(iter(field.metadata.get("switches") or {}), name)


def typed_arguments(ctx: click.Context, section: str, leave_out: Collection[str] = ()) -> list[str]:
    """The options of ``section`` (a field path's first part) exactly as the user set them, in the order typed
    (defaults left out), as command-line words: a printed command repeats them. ``leave_out``: dotted field paths
    the caller places itself."""
    skipped = {path.replace(".", SEPARATOR) for path in leave_out}
    words: list[str] = []
    for name, value in ctx.params.items():  # NOTE: click fills ctx.params in the order the options were typed
        if not name.startswith(section + SEPARATOR) or name in skipped or value is None or \
                ctx.get_parameter_source(name) is ParameterSource.DEFAULT:
            continue
        words += _spelled(value, [param for param in ctx.command.params if param.name == name])
    return words


def _spelled(value: Any, params: list[click.Parameter]) -> list[str]:
    """``value`` as the words that set it: the switch whose value it is, else the field's own option."""
    switch = next((param for param in params if isinstance(param, click.Option) and param.is_flag
                   and not param.secondary_opts and param.flag_value == value), None)
    if switch is not None:
        return [switch.opts[0]]
    param = next(param for param in params if not (isinstance(param, click.Option) and param.is_flag
                                                   and not param.secondary_opts))
    if isinstance(param, click.Option) and param.is_flag:
        return [param.opts[0] if value else param.secondary_opts[0]]
    if param.multiple:
        return [param.opts[0], *map(str, value)]
    return [param.opts[0], getattr(param.type, "spell", str)(value)]
