"""``corpus tokenize``: Megatron's ``preprocess_data.py`` options, a streaming multiprocess pipeline.

    corpus tokenize --input data/*.jsonl.zst --output-prefix out/web --json-keys text title \\
        --tokenizer-type HuggingFaceTokenizer --tokenizer-model tokenizer.json --append-eod --workers 2
"""

from __future__ import annotations

import logging

import click

from cli.options import refused_option
from cli.tokenize_options import input_options, shared_fields, tokenizer_options

#: Megatron's ``preprocess_data.py`` options that do not apply to ``corpus tokenize``, and why.
ONE_SEQUENCE_PER_DOCUMENT = ("corpus tokenize writes one sequence per document (Megatron's default); drop the "
                             "option")
PARTITIONS = ("corpus tokenize cuts the input into parts for its --workers itself and joins them in order (nothing "
              "to merge); to split the work over nodes use --shard-index/--num-shards and list the shards in a blend")
DATASET_IMPL = "corpus tokenize always writes Megatron's mmap .bin/.idx format; drop the option"
KEEP_SEQUENTIAL_SAMPLES = ("records are always written in input order, whatever --workers (there are no --partitions "
                           "to reorder them); drop the option")
LANG = "--lang only chooses the sentence splitter of --split-sentences, which corpus tokenize does not do; drop it"

def _config(options: dict):
    from corpus.tokenize.config import TokenizeConfig

    return TokenizeConfig(
        **shared_fields(options), output_prefix=options["output_prefix"], workers=options["workers"],
        threads_per_worker=options["threads_per_worker"], batch_size=options["batch_size"],
        on_error=options["on_error"], resume=options["resume"], checkpoint_interval=options["checkpoint_interval"],
        shard_index=options["shard_index"], num_shards=options["num_shards"], quiet=options["quiet"],
        log_interval=options["log_interval"], stats_json=options["stats_json"], check_input=options["check_input"])


@click.command("tokenize")
@input_options
@click.option("--output-prefix", required=True, help="Outputs are PREFIX_<key>_document.bin/.idx/.meta.json (an "
              "s3:// prefix: written locally, then uploaded, .idx last).")
@tokenizer_options
@click.option("--workers", type=int, default=0, show_default=True,
              help="Processes that each read, encode and write parts of the input, joined in order; 0: one per core "
                   "this process may use (small inputs and 1-2 cores: this process alone).")
@click.option("--threads-per-worker", type=int,
              help="Library threads per batch call [default: the cores divided among the processes].")
@click.option("--batch-size", type=int, default=1000, show_default=True, help="Records per encode call.")
@click.option("--on-error", type=click.Choice(["fail", "skip"]), default="fail", show_default=True,
              help="Bad records: fail at the first (no output left), or skip and list them in PREFIX.skipped.jsonl.")
@click.option("--resume", is_flag=True, help="Continue an interrupted run from its checkpoint (byte-identical result).")
@click.option("--checkpoint-interval", type=float, default=30.0, show_default=True, help="Seconds between checkpoints.")
@click.option("--shard-index", type=int, help="This process's shard (default: SLURM_PROCID, RANK, else 0).")
@click.option("--num-shards", type=int, help="Number of shards (default: SLURM_NTASKS, WORLD_SIZE, else 1).")
@click.option("--quiet", is_flag=True, help="No progress bar, log lines or summary.")
@click.option("--log-interval", type=float, default=30.0, show_default=True,
              help="Seconds between progress lines when stderr is not a terminal.")
@click.option("--stats-json", type=click.Path(dir_okay=False), help="Write the run's statistics to this JSON file.")
@click.option("--check-input", is_flag=True,
              help="With the fast encoder: compare its ids on the first records with the reference library's on "
                   "every run, not only on the first run with a tokenizer (loads the reference library).")
@refused_option("--split-sentences", ONE_SEQUENCE_PER_DOCUMENT, hidden=False)
@refused_option("--keep-newlines", ONE_SEQUENCE_PER_DOCUMENT)
@refused_option("--partitions", PARTITIONS, takes_value=True)
@refused_option("--dataset-impl", DATASET_IMPL, takes_value=True)
@refused_option("--keep-sequential-samples", KEEP_SEQUENTIAL_SAMPLES)
@refused_option("--lang", LANG, takes_value=True)
def tokenize_command(**options) -> None:
    """Tokenize JSONL/Parquet text into Megatron .bin/.idx files (Megatron's preprocess_data.py options)."""
    from corpus.tokenize.run import tokenize as run
    from corpus.tokenize.stats import RunStats

    if options["quiet"]:
        logging.getLogger("corpus").setLevel(logging.WARNING)
    try:
        stats: RunStats = run(_config(options))
    except KeyboardInterrupt:
        raise click.ClickException("interrupted; rerun the same command with --resume to continue") from None
    if not options["quiet"]:
        click.echo(stats.summary())
