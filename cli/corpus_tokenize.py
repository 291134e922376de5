"""``corpus tokenize``: Megatron's ``preprocess_data.py`` options, a streaming multiprocess pipeline.

    corpus tokenize --input data/*.jsonl.zst --output-prefix out/web --json-keys text title \\
        --tokenizer-type HuggingFaceTokenizer --tokenizer-model tokenizer.json --append-eod --workers 2
"""

from __future__ import annotations

import logging

import click

from cli.errors import friendly_errors
from corpus.errors import CorpusError
from corpus.tokenizers import TOKENIZER_TYPES
from corpus.tokenizers.config import ENCODERS, TIKTOKEN_PATTERNS


class GreedyOption(click.Option):
    """An option that takes every following value up to the next option, like argparse's ``nargs='+'``
    (Megatron's ``--json-keys text title``); it may also be repeated."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, multiple=True, **kwargs)

    def add_to_parser(self, parser, ctx) -> None:
        super().add_to_parser(parser, ctx)
        for name in self.opts:
            option = parser._long_opt.get(name)
            original = option.process

            def process(value, state, original=original) -> None:
                original(value, state)
                while state.rargs and not state.rargs[0].startswith("--"):
                    original(state.rargs.pop(0), state)

            option.process = process


class UnsupportedError(CorpusError):
    """A Megatron option this tool deliberately does not implement."""


def _tokenizer_config(options: dict):
    from corpus.tokenizers import TokenizerConfig

    return TokenizerConfig(
        type=options["tokenizer_type"], model=options["tokenizer_model"], vocab_file=options["vocab_file"],
        merge_file=options["merge_file"], vocab_size=options["vocab_size"], tiktoken_pattern=options["tiktoken_pattern"],
        tiktoken_num_special_tokens=options["tiktoken_num_special_tokens"],
        hf_include_special_tokens=not options["tokenizer_hf_no_include_special_tokens"],
        eod_id=options["eod_id"], bos_id=options["bos_id"], encoder=options["encoder"])


def _config(options: dict):
    from corpus.pipeline.config import TokenizeConfig

    return TokenizeConfig(
        inputs=list(options["inputs"]), output_prefix=options["output_prefix"], tokenizer=_tokenizer_config(options),
        json_keys=list(options["json_keys"]) or ["text"], append_eod=options["append_eod"], workers=options["workers"],
        threads_per_worker=options["threads_per_worker"], batch_size=options["batch_size"],
        on_error=options["on_error"], resume=options["resume"], checkpoint_interval=options["checkpoint_interval"],
        shard_index=options["shard_index"], num_shards=options["num_shards"], quiet=options["quiet"],
        log_interval=options["log_interval"], stats_json=options["stats_json"])


@click.command("tokenize")
@click.option("--input", "inputs", cls=GreedyOption, required=True,
              help="JSONL (.jsonl/.json, .gz, .zst) or Parquet files, globs or directories; several allowed, order kept.")
@click.option("--output-prefix", required=True, help="Outputs are PREFIX_<key>_document.bin/.idx/.meta.json.")
@click.option("--json-keys", cls=GreedyOption, help="Keys to tokenize, one output pair each (default: text); "
              "nested keys like meta.title work.")
@click.option("--tokenizer-type", required=True, type=click.Choice(list(TOKENIZER_TYPES)), help="Megatron's tokenizer type.")
@click.option("--tokenizer-model", help="tokenizer.json (or its directory), SentencePiece .model, tiktoken JSON/.tiktoken.")
@click.option("--vocab-file", help="GPT-2 vocab.json (GPT2BPETokenizer).")
@click.option("--merge-file", help="GPT-2 merges.txt (GPT2BPETokenizer).")
@click.option("--vocab-size", type=int, help="Vocabulary size (NullTokenizer; TikTokenizer's total size).")
@click.option("--tiktoken-pattern", type=click.Choice(TIKTOKEN_PATTERNS), default="v2", show_default=True)
@click.option("--tiktoken-num-special-tokens", type=int, default=1000, show_default=True)
@click.option("--tokenizer-hf-no-include-special-tokens", is_flag=True,
              help="HuggingFaceTokenizer: do not add the post-processor's special tokens (e.g. a leading BOS).")
@click.option("--eod-id", type=int, help="Override the end-of-document id that --append-eod adds.")
@click.option("--bos-id", type=int, help="Override the beginning-of-sequence id (recorded in the sidecar).")
@click.option("--encoder", type=click.Choice(ENCODERS), default="auto", show_default=True,
              help="auto: gigatoken when proven identical on a sample of the input, else the reference library.")
@click.option("--append-eod", is_flag=True, help="Add EOD after every document that has at least one token.")
@click.option("--workers", type=int, default=0, show_default=True,
              help="Encoder processes; 0 encodes in this process with a multi-threaded batch call.")
@click.option("--threads-per-worker", type=int,
              help="Library threads per batch call [default: the cores divided among the workers].")
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
@click.option("--split-sentences", is_flag=True, help="Not supported (Megatron's NLTK sentence splitting).")
@click.option("--keep-newlines", is_flag=True, hidden=True)
@friendly_errors
def tokenize_command(**options) -> None:
    """Tokenize JSONL/Parquet text into Megatron .bin/.idx files (Megatron's preprocess_data.py options)."""
    from corpus.pipeline.stats import RunStats
    from corpus.tokenize import tokenize as run

    if options["split_sentences"] or options["keep_newlines"]:
        raise UnsupportedError("--split-sentences/--keep-newlines are not supported: corpus tokenize writes one "
                               "sequence per document (Megatron's default); drop the option")
    if options["quiet"]:
        logging.getLogger("corpus").setLevel(logging.WARNING)
    try:
        stats: RunStats = run(_config(options))
    except KeyboardInterrupt:
        raise click.ClickException("interrupted; rerun the same command with --resume to continue") from None
    if not options["quiet"]:
        click.echo(stats.summary())
