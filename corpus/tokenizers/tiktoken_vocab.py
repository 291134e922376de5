"""What ``TikTokenizer`` encodes with: the ranks of a vocabulary file and how they become ids.

Vocabulary files: Megatron's JSON list of ``{"rank", "token_bytes", "token_str"}``, the same list under
``"vocab"`` (Mistral's ``tekken*.json``; megatron-core itself only reads the bare list) and plain
``.tiktoken`` rank files (``base64 rank`` lines, e.g. ``cl100k_base.tiktoken``; megatron-core's loader
refuses those whose first 256 ranks are not the bytes 0..255 in order, as cl100k's are not).

Two numberings, chosen by ``--tiktoken-pattern``:

- Megatron's (``v1``, ``v2``; the default ``v2``): megatron-core's TikTokenizer shifts the ranks up by
  ``--tiktoken-num-special-tokens`` (default 1000), puts its own special tokens below them (``<unk>``
  ``<s>`` ``</s>`` ``<mask>`` ``<pad>`` ``<cls>`` ``<sep>`` then ``<SPECIAL_i>`` fillers), splits with its
  ``v1``/``v2`` regex (not the file's), keeps the first ``vocab_size - num_special_tokens`` ranks and
  encodes with ``allowed_special="all"`` (a literal ``</s>`` in the text becomes id 2). EOD ``</s>``, BOS ``<s>``.
- the file's own (``file``): the encoding as the library that publishes the file defines it. OpenAI's
  ``.tiktoken`` files (known by their file name, as tiktoken knows them): its regex and special tokens,
  ranks unshifted, ids of ``tiktoken.get_encoding(name).encode_ordinary(text)``, EOD ``<|endoftext|>``.
  Mistral's ``tekken*.json``: the regex, special-token count and vocabulary size of its ``config``, ids of
  mistral-common's ``Tekkenizer.encode(text, bos=False, eos=False)``. Special-token strings in the text are
  ordinary text in both.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass

import orjson

from corpus.core.errors import ConfigError
from corpus.tokenizers.config import TokenizerConfig

# megatron.core.tokenizers.text.libraries.tiktoken_tokenizer, verbatim.
PATTERNS = {
    "v1": r"[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
    "v2": "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}"
          "\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
          "[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
}
DEFAULT_VOCAB_SIZE = 2**17
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>")
#: Megatron's default ``--tiktoken-num-special-tokens``.
DEFAULT_NUM_SPECIAL_TOKENS = 1000

ENDOFTEXT = "<|endoftext|>"
_CONTRACTIONS = "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
# tiktoken_ext.openai_public, verbatim: the regex and special tokens of the encodings OpenAI publishes.
# (p50k_base is absent: its ranks leave a gap at 50256, which a .tiktoken file of dense ranks cannot hold.)
OPENAI_ENCODINGS: dict[str, tuple[str, dict[str, int]]] = {
    "r50k_base": (r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s""",
                  {ENDOFTEXT: 50256}),
    "cl100k_base": (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
                    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
                    {ENDOFTEXT: 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                     "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}),
    "o200k_base": ("|".join([
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+""" + _CONTRACTIONS,
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*""" + _CONTRACTIONS,
        r"""\p{N}{1,3}""", r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""", r"""\s*[\r\n]+""", r"""\s+(?!\S)""", r"""\s+"""]),
        {ENDOFTEXT: 199999, "<|endofprompt|>": 200018}),
}
# mistral-common's special tokens of tekken files that do not list their own (Tekkenizer's deprecated
# defaults start so; the rest keep their ids under filler names, which only decoding shows).
TEKKEN_DEFAULT_SPECIALS = ("<unk>", "<s>", "</s>")


@dataclass(frozen=True)
class Vocabulary:
    """A tiktoken vocabulary with its numbering: everything an encoder needs to give the right ids."""

    name: str
    pattern: str
    """The split regex (tiktoken's dialect)."""
    ranks: list[bytes]
    """The mergeable tokens kept, in rank order."""
    shift: int
    """The id of rank 0 (special tokens may sit below it)."""
    specials: dict[str, int]
    """Special tokens and their ids."""
    specials_in_text: bool
    """Whether special-token strings in the text encode to their ids (Megatron) or as plain text."""
    vocab_size: int
    eod: int | None
    bos: int | None
    options: dict
    """The options that make these ids, as the sidecar records them."""


def _json_vocabulary(path: str, data: bytes) -> tuple[list[bytes], dict | None]:
    """Token bytes in rank order from Megatron's JSON list (bare or under ``"vocab"``), and the JSON object
    holding the list (``{}`` for a bare list)."""
    try:
        vocab = orjson.loads(data)
    except orjson.JSONDecodeError as error:
        raise ConfigError(f"{path}: not valid JSON ({error})") from None
    document = vocab if isinstance(vocab, dict) else {}
    if document:
        vocab = document.get("vocab")
    if not isinstance(vocab, list):
        raise ConfigError(f"{path}: expected a JSON list of {{rank, token_bytes, token_str}} "
                          "(or an object with such a list under \"vocab\", like tekken*.json)")
    ranks = []
    for position, entry in enumerate(vocab):
        if not isinstance(entry, dict) or entry.get("rank") != position or "token_bytes" not in entry:
            raise ConfigError(f"{path}: vocab entry {position} must be {{\"rank\": {position}, "
                              "\"token_bytes\": base64, ...}} (ranks in order from 0)")
        ranks.append(base64.b64decode(entry["token_bytes"]))
    return ranks, document


def _tiktoken_ranks(path: str, data: bytes) -> list[bytes]:
    """Token bytes in rank order from a ``.tiktoken`` file (``base64 rank`` per line)."""
    ranks = []
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            token_bytes, rank = base64.b64decode(token), int(rank)
        except ValueError:
            raise ConfigError(f"{path}:{number}: expected 'base64-token rank', got {line[:60]!r}") from None
        if rank != len(ranks):
            raise ConfigError(f"{path}:{number}: rank {rank} out of order (expected {len(ranks)})")
        ranks.append(token_bytes)
    return ranks


def _read(path: str) -> tuple[list[bytes], dict | None]:
    """The mergeable tokens of a vocabulary file in rank order, and its JSON object (None: a .tiktoken file)."""
    with open(path, "rb") as handle:
        data = handle.read()
    if data.lstrip()[:1] in (b"[", b"{"):
        ranks, document = _json_vocabulary(path, data)
    else:
        ranks, document = _tiktoken_ranks(path, data), None
    if len(set(ranks)) != len(ranks):
        raise ConfigError(f"{path}: the same token bytes appear under two ranks")
    return ranks, document


def load_ranks(path: str) -> list[bytes]:
    """The mergeable tokens of a tiktoken vocabulary file, in rank order."""
    return _read(path)[0]


def resolve_vocab_size(config: TokenizerConfig, num_ranks: int) -> int:
    """Megatron's total vocabulary: ``--vocab-size`` or 131072, or ranks + specials for smaller files."""
    specials = config.tiktoken_num_special_tokens
    if config.vocab_size is None:
        return min(DEFAULT_VOCAB_SIZE, num_ranks + specials)
    if config.vocab_size <= specials:
        raise ConfigError(f"--vocab-size {config.vocab_size} must exceed --tiktoken-num-special-tokens "
                          f"{specials}")
    if config.vocab_size > num_ranks + specials:
        raise ConfigError(
            f"--vocab-size {config.vocab_size} needs {config.vocab_size - specials} ranks but {config.model} has "
            f"{num_ranks}; use --vocab-size {num_ranks + specials} or less")
    return config.vocab_size


def _megatron(config: TokenizerConfig, path: str, ranks: list[bytes]) -> Vocabulary:
    vocab_size = resolve_vocab_size(config, len(ranks))
    shift = config.tiktoken_num_special_tokens
    names = [*SPECIAL_TOKENS, *(f"<SPECIAL_{i}>" for i in range(len(SPECIAL_TOKENS), shift))]
    return Vocabulary(os.path.basename(path), PATTERNS[config.tiktoken_pattern], ranks[:vocab_size - shift], shift,
                      {token: i for i, token in enumerate(names)}, True, vocab_size, SPECIAL_TOKENS.index("</s>"),
                      SPECIAL_TOKENS.index("<s>"),
                      {"pattern": config.tiktoken_pattern, "num_special_tokens": shift, "vocab_size": vocab_size})


def _openai(path: str, ranks: list[bytes]) -> Vocabulary:
    name = os.path.basename(path).removesuffix(".tiktoken")
    if name not in OPENAI_ENCODINGS:
        raise ConfigError(
            f"--tiktoken-pattern file: {path} is a .tiktoken rank file, which names no regex, and its name is none of "
            f"{', '.join(f'{known}.tiktoken' for known in OPENAI_ENCODINGS)}; use --tiktoken-pattern v1 or v2 "
            "(Megatron's numbering)")
    pattern, specials = OPENAI_ENCODINGS[name]
    vocab_size = max(len(ranks), max(specials.values()) + 1)
    return Vocabulary(name, pattern, ranks, 0, dict(specials), False, vocab_size, specials[ENDOFTEXT], None,
                      {"pattern": "file", "encoding": name, "vocab_size": vocab_size})


def _tekken(path: str, ranks: list[bytes], document: dict) -> Vocabulary:
    settings = document["config"]
    try:
        pattern, shift = settings["pattern"], int(settings["default_num_special_tokens"])
        vocab_size = int(settings["default_vocab_size"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"{path}: its config lacks pattern, default_num_special_tokens or "
                          "default_vocab_size (a tekken file names all three)") from None
    listed = document.get("special_tokens")
    names = ([entry["token_str"] for entry in sorted(listed, key=lambda entry: entry["rank"])] if listed
             else list(TEKKEN_DEFAULT_SPECIALS))
    names += [f"<SPECIAL_{i}>" for i in range(len(names), shift)]
    specials = {token: i for i, token in enumerate(names)}
    return Vocabulary(os.path.basename(path).removesuffix(".json"), pattern, ranks[:vocab_size - shift], shift,
                      specials, False, vocab_size, specials.get("</s>"), specials.get("<s>"),
                      {"pattern": "file", "num_special_tokens": shift, "vocab_size": vocab_size})


def read_vocabulary(config: TokenizerConfig, path: str) -> Vocabulary:
    """The vocabulary of ``path`` numbered as ``config.tiktoken_pattern`` says (see the module docstring)."""
    ranks, document = _read(path)
    if config.tiktoken_pattern != "file":
        return _megatron(config, path, ranks)
    if config.vocab_size is not None or config.tiktoken_num_special_tokens != DEFAULT_NUM_SPECIAL_TOKENS:
        raise ConfigError("--tiktoken-pattern file numbers ids as the file defines them; drop --vocab-size "
                          "and --tiktoken-num-special-tokens (they set Megatron's numbering)")
    if document is None:
        return _openai(path, ranks)
    if isinstance(document.get("config"), dict):
        return _tekken(path, ranks, document)
    raise ConfigError(f"--tiktoken-pattern file: {path} is Megatron's vocabulary list, which names no "
                      "regex; use --tiktoken-pattern v1 or v2")
