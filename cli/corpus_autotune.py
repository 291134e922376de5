"""``corpus autotune-workers``: measure pipeline configurations on a sample of the input and print the
``corpus tokenize`` command to run (Megatron's ``--find-optimal-num-workers``, done without touching
real outputs).

    corpus autotune-workers --input data/*.jsonl.zst --json-keys text --tokenizer-type HuggingFaceTokenizer \\
        --tokenizer-model tokenizer.json --append-eod --output-prefix out/web --time-budget 300
"""

from __future__ import annotations

import json
import shlex

import click

from cli.options import GreedyOption
from cli.tokenize_options import input_options, shared_arguments, shared_fields, tokenizer_options

#: Stands for the output prefix in the printed command when --output-prefix is not given.
PLACEHOLDER = "OUTPUT_PREFIX"

_CANDIDATE_LISTS = {"workers_to_check": "--workers-to-check", "batch_sizes_to_check": "--batch-sizes-to-check",
                    "threads_per_worker_to_check": "--threads-per-worker-to-check"}


def _config(options: dict):
    from corpus.autotune.search import AutotuneConfig, parse_candidates
    from corpus.tokenize.config import TokenizeConfig

    tokenize = TokenizeConfig(**shared_fields(options), output_prefix=options["output_prefix"] or PLACEHOLDER)
    lists = {name: parse_candidates(options[name], flag) if options[name] else None
             for name, flag in _CANDIDATE_LISTS.items()}
    return AutotuneConfig(tokenize, **lists, max_documents=options["max_documents"],
                          time_budget=options["time_budget"], repeats=options["repeats"], temp_dir=options["temp_dir"])


def _command(ctx: click.Context, best) -> str:
    """The ``corpus tokenize`` command with the user's input and tokenizer options and the best settings."""
    prefix = ctx.params["output_prefix"] or PLACEHOLDER
    words = ["corpus", "tokenize", *shared_arguments(ctx), "--output-prefix", prefix, "--workers", str(best.workers),
             "--batch-size", str(best.batch_size), "--threads-per-worker", str(best.threads_per_worker)]
    return shlex.join(words)


@click.command("autotune-workers")
@input_options
@tokenizer_options
@click.option("--output-prefix", help="Put this prefix in the printed command (nothing is written there).")
@click.option("--max-documents", type=int, default=100_000, show_default=True,
              help="Records of the sample every trial runs on (the first ones of the input, read once).")
@click.option("--time-budget", type=float, metavar="SECONDS",
              help="About how long the whole sweep may take; trials stop early to fit (default: each runs "
                   "the whole sample).")
@click.option("--workers-to-check", cls=GreedyOption,
              help="Process counts to measure, e.g. 1 2 4 or 1,2,4 (default: 1, 2, 4, ... up to the cores "
                   "available), each with corpus tokenize's default threads for it.")
@click.option("--batch-sizes-to-check", cls=GreedyOption, help="Batch sizes to measure (default: 250 1000 4000).")
@click.option("--threads-per-worker-to-check", cls=GreedyOption,
              help="Library threads per worker to try at the fastest workers and batch size (default: half and "
                   "double corpus tokenize's default there).")
@click.option("--repeats", type=int, default=2, show_default=True,
              help="Extra runs of the fastest configuration, to measure the noise.")
@click.option("--temp-dir", type=click.Path(file_okay=False),
              help="Where the temporary folder goes (default: the system's; use the output file system to "
                   "include its write speed).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: trials, best, command.")
@click.pass_context
def autotune_command(ctx: click.Context, as_json: bool, **options) -> None:
    """Find the fastest --workers/--batch-size/--threads-per-worker for corpus tokenize on this machine."""
    from corpus.autotune.search import autotune

    try:
        result = autotune(_config(options))
    except KeyboardInterrupt:
        click.echo("interrupted: the trials were stopped and their temporary files removed", err=True)
        raise click.exceptions.Exit(130) from None
    command = _command(ctx, result.best)
    if as_json:
        click.echo(json.dumps({**result.to_dict(), "command": command}, indent=2))
        return
    click.echo(result.report())
    click.echo(f"\nrun:\n  {command}")
    if not options["output_prefix"]:
        click.echo(f"(replace {PLACEHOLDER}, or pass --output-prefix to have it filled in)")
