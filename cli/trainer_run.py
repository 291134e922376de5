"""``trainer run``: train a GPT. Every option comes from a field of ``trainer.config.schema.TrainConfig`` (its
Megatron-style flag and help), so flags, YAML keys (``--config``) and docs stay one table."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import click

from cli.config_options import config_options, given_values
from trainer.config.schema import TrainConfig

if TYPE_CHECKING:
    from trainer.run.loop import WindowLoss


def _params() -> list[click.Parameter]:
    params = [click.Option(["--config"], type=click.Path(dir_okay=False), help="YAML file with the same sections "
                           "as trainer.config.schema.TrainConfig; flags override it.")]
    return params + config_options(TrainConfig)


def _run(**values: Any) -> None:
    from trainer.config.loading import load_config
    from trainer.run.loop import train

    ctx = click.get_current_context()
    overrides = given_values(ctx, values)
    config = load_config(overrides.pop("config", None), overrides)
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
