"""Option kinds the commands share: Megatron's greedy lists, Megatron options that do not apply here, and the
parsing of the one ``--storage-options`` of every command that takes paths."""

from __future__ import annotations

import json

import click

from corpus.storage import StorageError, parse_options


class GreedyOption(click.Option):
    """An option that takes every following word up to the next ``--flag``, like argparse's ``nargs='+'``
    (Megatron's ``--json-keys text title``, ``--data-path 0.7 web 0.3 code``); it may also be repeated. Its
    value is the tuple of all the words given."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, multiple=True, **kwargs)

    def add_to_parser(self, parser, ctx) -> None:
        super().add_to_parser(parser, ctx)
        for name in self.opts:
            option = parser._long_opt.get(name) or parser._short_opt.get(name)
            original = option.process

            def process(value, state, original=original) -> None:
                original(value, state)
                while state.rargs and not state.rargs[0].startswith("--"):
                    original(state.rargs.pop(0), state)

            option.process = process


class StorageOptionsType(click.ParamType):
    """``--storage-options JSON``: checked and parsed into the dict a config holds; :meth:`spell` writes it back,
    so a printed command repeats it."""

    name = "json"

    def convert(self, value, param, ctx) -> dict:
        if isinstance(value, dict):
            return value
        try:
            return parse_options(value)
        except StorageError as error:
            raise click.UsageError(str(error), ctx) from None

    @staticmethod
    def spell(value: dict) -> str:
        return json.dumps(value, separators=(",", ":"))


STORAGE_OPTIONS = StorageOptionsType()


def refused_option(flag: str, why: str, takes_value: bool = False, hidden: bool = True):
    """The decorator adding a Megatron option that does not apply here: accepted by the parser so that giving it
    stops the command (exit status 1) with ``why`` (what to do instead), not with click's "No such option"."""

    def refuse(ctx: click.Context, param: click.Parameter, value) -> None:
        if value:
            raise click.ClickException(f"{flag} is not supported: {why}")

    return click.option(flag, is_flag=not takes_value, expose_value=False, callback=refuse, hidden=hidden,
                        help=f"Not supported: {why}")
