"""``corpus autotune-workers``: measure pipeline configurations on a sample of the input and print the
``corpus tokenize`` command to run (Megatron's ``--find-optimal-num-workers``, done without touching
real outputs).

    corpus autotune-workers --input data/*.jsonl.zst --json-keys text --tokenizer-type HuggingFaceTokenizer \\
        --tokenizer-model tokenizer.json --append-eod --output-prefix out/web --time-budget 300
"""

from __future__ import annotations

import dataclasses
import json
import shlex

import click

from cli.config_options import build_config, config_options, given_values, typed_arguments
from corpus.autotune.search import AutotuneConfig

#: Stands for the output prefix in the printed command when --output-prefix is not given.
PLACEHOLDER = "OUTPUT_PREFIX"

#: The fields of the run to tune that the user gives: what to read and the tokenizer (the rest is tuned).
RUN_FIELDS = ("tokenize.inputs", "tokenize.json_keys", "tokenize.append_eod", "tokenize.storage_options",
             "tokenize.tokenizer", "tokenize.output_prefix")
FIELDS = (*RUN_FIELDS, *(f.name for f in dataclasses.fields(AutotuneConfig) if f.name != "tokenize"))
#: What the command does differently: parsed values, and the output prefix, which only fills in the printed command,
#: may be left out.
SETTINGS = {"temp_dir": {"type": click.Path(file_okay=False)},
            "tokenize.output_prefix": {"required": False, "help": "Put this prefix in the printed command (nothing "
                                       "is written there)."}}


def _command(ctx: click.Context, best) -> str:
    """The ``corpus tokenize`` command with the user's input and tokenizer options and the best settings."""
    prefix = ctx.params["tokenize__output_prefix"] or PLACEHOLDER
    words = ["corpus", "tokenize", *typed_arguments(ctx, "tokenize", leave_out=["tokenize.output_prefix"]),
             "--output-prefix", prefix, "--workers", str(best.workers), "--batch-size", str(best.batch_size),
             "--threads-per-worker", str(best.threads_per_worker)]
    return shlex.join(words)


@click.command("autotune-workers", params=config_options(AutotuneConfig, only=FIELDS, settings=SETTINGS))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: trials, best, command.")
@click.pass_context
def autotune_command(ctx: click.Context, as_json: bool, **options) -> None:
    """Find the fastest --workers/--batch-size/--threads-per-worker for corpus tokenize on this machine."""
    from corpus.autotune.search import autotune

    values = given_values(ctx, options)
    values["tokenize"].setdefault("output_prefix", PLACEHOLDER)
    try:
        result = autotune(build_config(AutotuneConfig, values))
    except KeyboardInterrupt:
        click.echo("interrupted: the trials were stopped and their temporary files removed", err=True)
        raise click.exceptions.Exit(130) from None
    command = _command(ctx, result.best)
    if as_json:
        click.echo(json.dumps({**result.to_dict(), "command": command}, indent=2))
        return
    click.echo(result.report())
    click.echo(f"\nrun:\n  {command}")
    if not options["tokenize__output_prefix"]:
        click.echo(f"(replace {PLACEHOLDER}, or pass --output-prefix to have it filled in)")
