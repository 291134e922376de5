"""``corpus tokenize``: Megatron's ``preprocess_data.py`` options, a streaming multiprocess pipeline.

    corpus tokenize --input data/*.jsonl.zst --output-prefix out/web --json-keys text title \\
        --tokenizer-type HuggingFaceTokenizer --tokenizer-model tokenizer.json --append-eod --workers 2
"""

from __future__ import annotations

import logging

import click

from cli.config_options import build_config, config_options, given_values
from cli.options import refused_option
from corpus.tokenize.config import TokenizeConfig

#: Megatron's ``preprocess_data.py`` options that do not apply to ``corpus tokenize``, and why.
ONE_SEQUENCE_PER_DOCUMENT = ("corpus tokenize writes one sequence per document (Megatron's default); drop the "
                             "option")
PARTITIONS = ("corpus tokenize cuts the input into parts for its --workers itself and joins them in order (nothing "
              "to merge); to split the work over nodes use --shard-index/--num-shards and list the shards in a blend")
DATASET_IMPL = "corpus tokenize always writes Megatron's mmap .bin/.idx format; drop the option"
KEEP_SEQUENTIAL_SAMPLES = ("records are always written in input order, whatever --workers (there are no --partitions "
                           "to reorder them); drop the option")
LANG = "--lang only chooses the sentence splitter of --split-sentences, which corpus tokenize does not do; drop it"

#: What ``corpus tokenize`` does differently from the generated options: refusing a folder for ``--stats-json``
#: before any work.
SETTINGS = {"stats_json": {"type": click.Path(dir_okay=False)}}


@click.command("tokenize", params=config_options(TokenizeConfig, settings=SETTINGS))
@refused_option("--split-sentences", ONE_SEQUENCE_PER_DOCUMENT, hidden=False)
@refused_option("--keep-newlines", ONE_SEQUENCE_PER_DOCUMENT)
@refused_option("--partitions", PARTITIONS, takes_value=True)
@refused_option("--dataset-impl", DATASET_IMPL, takes_value=True)
@refused_option("--keep-sequential-samples", KEEP_SEQUENTIAL_SAMPLES)
@refused_option("--lang", LANG, takes_value=True)
@click.pass_context
def tokenize_command(ctx: click.Context, **options) -> None:
    """Tokenize JSONL/Parquet text into Megatron .bin/.idx files (Megatron's preprocess_data.py options)."""
    from corpus.tokenize.run import tokenize as run
    from corpus.tokenize.stats import RunStats

    config: TokenizeConfig = build_config(TokenizeConfig, given_values(ctx, options))
    if config.quiet:
        logging.getLogger("corpus").setLevel(logging.WARNING)
    try:
        stats: RunStats = run(config)
    except KeyboardInterrupt:
        raise click.ClickException("interrupted; rerun the same command with --resume to continue") from None
    if not config.quiet:
        click.echo(stats.summary())
