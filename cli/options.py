"""Option kinds the commands share: Megatron's greedy lists, Megatron options that do not apply here, and the one
``--storage-options`` of every command that takes paths."""

from __future__ import annotations

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


def _checked_storage_options(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    try:
        parse_options(value)
    except StorageError as error:
        raise click.UsageError(str(error), ctx) from None
    return value


#: ``--storage-options JSON`` for every command that takes paths; its value stays the JSON text (so a printed
#: command repeats it), :func:`storage_options_from` turns it into the dict a config holds.
storage_options_option = click.option(
    "--storage-options", metavar="JSON", callback=_checked_storage_options,
    help="Options of the filesystem behind s3:// (gs://, az://) paths, as JSON, e.g. "
         "'{\"endpoint_url\": \"http://localhost:9000\"}'. Endpoint, credentials and region otherwise come from "
         "AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE and AWS_REGION.")


def storage_options_from(text: str | None) -> dict | None:
    """The storage options a ``--storage-options`` value gives (None when it was not given)."""
    return parse_options(text) if text is not None else None


def refused_option(flag: str, why: str, takes_value: bool = False, hidden: bool = True):
    """The decorator adding a Megatron option that does not apply here: accepted by the parser so that giving it
    stops the command (exit status 1) with ``why`` (what to do instead), not with click's "No such option"."""

    def refuse(ctx: click.Context, param: click.Parameter, value) -> None:
        if value:
            raise click.ClickException(f"{flag} is not supported: {why}")

    return click.option(flag, is_flag=not takes_value, expose_value=False, callback=refuse, hidden=hidden,
                        help=f"Not supported: {why}")
