"""The options ``corpus tokenize`` shares with the commands that run its pipeline (``corpus
autotune-workers``): what to read (``--input``, ``--json-keys``, ``--append-eod``) and the tokenizer.
One definition each, so the commands accept exactly the same spellings, and the way back from parsed
options to a command line (the autotuner prints the ``corpus tokenize`` command to run).
"""

from __future__ import annotations

from typing import Callable

import click
from click.core import ParameterSource

from cli.options import GreedyOption, storage_options_from, storage_options_option
from corpus.tokenizers import TOKENIZER_TYPES
from corpus.tokenizers.config import ENCODERS, TIKTOKEN_PATTERNS

INPUT_OPTIONS = (
    click.option("--input", "inputs", cls=GreedyOption, required=True,
                 help="JSONL (.jsonl/.json, .gz, .zst) or Parquet files, globs or directories, local or s3:// "
                      "URLs; several allowed, order kept."),
    click.option("--json-keys", cls=GreedyOption, help="Keys to tokenize, one output pair each (default: text); "
                 "nested keys like meta.title work."),
    click.option("--append-eod", is_flag=True, help="Add EOD after every document that has at least one token."),
    storage_options_option,
)

TOKENIZER_OPTIONS = (
    click.option("--tokenizer-type", required=True, type=click.Choice(list(TOKENIZER_TYPES)),
                 help="Megatron's tokenizer type."),
    click.option("--tokenizer-model", help="tokenizer.json (or its directory), SentencePiece .model, tiktoken "
                 "JSON/.tiktoken."),
    click.option("--vocab-file", help="GPT-2 vocab.json (GPT2BPETokenizer)."),
    click.option("--merge-file", help="GPT-2 merges.txt (GPT2BPETokenizer)."),
    click.option("--vocab-size", type=int, help="Vocabulary size (NullTokenizer; TikTokenizer's total size)."),
    click.option("--tiktoken-pattern", type=click.Choice(TIKTOKEN_PATTERNS), default="v2", show_default=True,
                 help="TikTokenizer: Megatron's split regex (v1, v2) and shifted ids, or 'file': the vocabulary's own "
                      "encoding (e.g. cl100k_base's regex and ids)."),
    click.option("--tiktoken-num-special-tokens", type=int, default=1000, show_default=True),
    click.option("--tokenizer-hf-no-include-special-tokens", is_flag=True,
                 help="HuggingFaceTokenizer: do not add the post-processor's special tokens (e.g. a leading BOS)."),
    click.option("--eod-id", type=int, help="Override the end-of-document id that --append-eod adds."),
    click.option("--bos-id", type=int, help="Override the beginning-of-sequence id (recorded in the sidecar)."),
    click.option("--encoder", type=click.Choice(ENCODERS), default="auto", show_default=True,
                 help="auto: gigatoken when proven identical on a sample of the input, else the reference library."),
)


def _apply(decorators: tuple[Callable, ...]) -> Callable:
    def decorate(command: Callable) -> Callable:
        for decorator in reversed(decorators):
            command = decorator(command)
        return command

    return decorate


input_options = _apply(INPUT_OPTIONS)
"""Decorator adding ``--input``, ``--json-keys``, ``--append-eod`` and ``--storage-options``."""
tokenizer_options = _apply(TOKENIZER_OPTIONS)
"""Decorator adding Megatron's tokenizer options and ``--encoder``."""


def tokenizer_config(options: dict):
    """The ``TokenizerConfig`` the tokenizer options describe."""
    from corpus.tokenizers import TokenizerConfig

    return TokenizerConfig(
        type=options["tokenizer_type"], model=options["tokenizer_model"], vocab_file=options["vocab_file"],
        merge_file=options["merge_file"], vocab_size=options["vocab_size"],
        tiktoken_pattern=options["tiktoken_pattern"],
        tiktoken_num_special_tokens=options["tiktoken_num_special_tokens"],
        hf_include_special_tokens=not options["tokenizer_hf_no_include_special_tokens"],
        eod_id=options["eod_id"], bos_id=options["bos_id"], encoder=options["encoder"])


def shared_fields(options: dict) -> dict:
    """The ``TokenizeConfig`` fields the shared options set (inputs, keys, EOD, storage options, tokenizer)."""
    return {"inputs": list(options["inputs"]), "json_keys": list(options["json_keys"]) or ["text"],
            "append_eod": options["append_eod"], "storage_options": storage_options_from(options["storage_options"]),
            "tokenizer": tokenizer_config(options)}


def _shared_names() -> set[str]:
    probe = _apply(INPUT_OPTIONS + TOKENIZER_OPTIONS)(click.command()(lambda **_: None))
    return {param.name for param in probe.params}


SHARED_NAMES = frozenset(_shared_names())


def shared_arguments(ctx: click.Context) -> list[str]:
    """The shared options exactly as the user set them (defaults left out), as command-line words, so a
    printed ``corpus tokenize`` command reads the same input with the same tokenizer."""
    words: list[str] = []
    for param in ctx.command.params:
        if param.name not in SHARED_NAMES or ctx.get_parameter_source(param.name) is ParameterSource.DEFAULT:
            continue
        value, flag = ctx.params[param.name], param.opts[0]
        if isinstance(param, click.Option) and param.is_flag:
            words += [flag] if value else []
        elif param.multiple:
            words += [flag, *map(str, value)] if value else []
        elif value is not None:
            words += [flag, str(value)]
    return words
