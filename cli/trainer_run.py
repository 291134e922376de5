"""``trainer run``: train a GPT. Every option comes from a field of ``trainer.config.schema.TrainConfig`` (its
Megatron-style flag and help), so flags, YAML keys (``--config``) and docs stay one table."""

from __future__ import annotations

import dataclasses
import os
import typing
from typing import TYPE_CHECKING, Any, Literal

import click

from cli.options import GreedyOption
from trainer.config.loading import config_fields

if TYPE_CHECKING:
    from trainer.run.loop import WindowLoss


def _option_for(section: str, name: str, meta: dict, kind: Any, default: Any) -> list[click.Option]:
    dest = f"{section}__{name}"
    help_text = meta["help"] + (f" [default: {default}]" if default not in (None, False, []) else "")
    base = typing.get_args(kind)[0] if typing.get_origin(kind) in (typing.Union, type(int | None)) else kind
    names = [meta["flag"], *meta.get("aliases", ())]
    if base is bool:
        flags = names if default is False else [f"{meta['flag']}/--no-{meta['flag'][2:]}"]
        options = [click.Option([*flags, dest], is_flag=True, default=None, help=help_text)]
    elif typing.get_origin(base) is list:
        options = [GreedyOption([*names, dest], help=help_text)]
    elif typing.get_origin(base) is Literal:
        options = [click.Option([*names, dest], type=click.Choice(typing.get_args(base)), help=help_text)]
    else:
        options = [click.Option([*names, dest], type=base, help=help_text)]
    for switch, value in meta["switches"].items():
        options.append(click.Option([switch, dest], flag_value=value, help=f"Same as {meta['flag']} {value}."))
    return options


def _params() -> list[click.Parameter]:
    params = [click.Option(["--config"], type=click.Path(dir_okay=False), help="YAML file with the same sections "
                           "as trainer.config.schema.TrainConfig; flags override it.")]
    for section, name, field, kind in config_fields():
        if field.metadata.get("flag"):
            default = field.default_factory() if field.default is dataclasses.MISSING else field.default
            params += _option_for(section, name, field.metadata, kind, default)
    return params


def _overrides(ctx: click.Context, values: dict) -> dict:
    """Only what the user typed: nested ``{section: {field: value}}``."""
    nested: dict = {}
    for dest, value in values.items():
        typed = ctx.get_parameter_source(dest) == click.core.ParameterSource.COMMANDLINE
        if value is None or dest == "config" or not typed:
            continue
        section, name = dest.split("__")
        if isinstance(value, tuple):  # a greedy list option: every word given, over all its repeats
            value = list(value)
        nested.setdefault(section, {})[name] = value
    return nested


def _run(**values: Any) -> None:
    from trainer.config.loading import load_config
    from trainer.run.loop import train

    ctx = click.get_current_context()
    config = load_config(values.get("config"), _overrides(ctx, values))
    result = train(config)
    if os.environ.get("RANK", "0") != "0":  # torchrun: rank 0 speaks for the run
        return
    where = f"; checkpoint {result.checkpoint}" if result.checkpoint else ""
    click.echo(f"stopped at step {result.iteration} ({result.stopped_by}){_loss_note(result.loss)}{where}")


def _loss_note(window: WindowLoss | None) -> str:
    """The summary's loss: the last log line's, of one step or the mean over its interval."""
    if window is None:
        return ""
    steps = f"step {window.first}" if window.first == window.last else f"mean of steps {window.first}-{window.last}"
    return f", loss {window.loss:.4f} ({steps}, as logged)"


run = click.Command(
    "run", callback=_run, params=_params(),
    help="Train a GPT on a blend (--blend FILE), Megatron-style --data-path, or --mock-data. "
         "Flags use Megatron's spellings; see docs/trainer-run.md.",
    context_settings={"max_content_width": 110},
)
