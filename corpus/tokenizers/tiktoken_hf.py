"""A tiktoken vocabulary as a Hugging Face byte-level BPE (``tokenizers.Tokenizer``) with the same ids, for
``trainer export --hf`` (:mod:`corpus.tokenizers.export`).

tiktoken merges, within each piece of its split regex, the adjacent pair whose union has the lowest rank, and
takes a piece that is a token whole. The same BPE in ``tokenizers``: every token of two or more bytes is the
merge of the two parts tiktoken's own merging stops at just below its rank (merges listed in rank order), a
whole piece found in the vocabulary is taken as it is (``ignore_merges``), bytes are spelled as GPT-2's
byte-to-character table spells them, and the special tokens keep their ids (they are put in the vocabulary too,
or ``tokenizers`` would number them after it).
"""

from __future__ import annotations

import functools
import re

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

from corpus.tokenizers.base import HuggingFaceForm
from corpus.tokenizers.tiktoken import TikTokenTextTokenizer


@functools.cache
def byte_spelling() -> dict[int, str]:
    """GPT-2's byte-to-character table (what ``tokenizers``' ByteLevel pre-tokenizer writes bytes as)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = [byte for byte in range(256) if byte not in printable]
    return {**{byte: chr(byte) for byte in printable},
            **{byte: chr(256 + index) for index, byte in enumerate(shifted)}}


def _spell(token: bytes) -> str:
    spelling = byte_spelling()
    return "".join(spelling[byte] for byte in token)


def onig_pattern(pattern: str) -> str:
    """tiktoken's split regex for ``tokenizers``' Oniguruma. NOTE: Oniguruma reads ``{m,n}+`` as a repeat of the
    repeat, where tiktoken's engine reads a possessive one; in tiktoken's patterns it ends an alternative (cl100k's
    ``\\p{N}{1,3}+``), where the greedy ``{m,n}`` matches what the possessive one does."""
    return re.sub(r"(\{\d+(?:,\d*)?\})\+", r"\1", pattern)


def _parts(ranks: dict[bytes, int], token: bytes) -> tuple[bytes, bytes]:
    """The two parts tiktoken's merging of ``token``'s bytes reaches before its last merge."""
    parts = [bytes([byte]) for byte in token]
    limit = ranks[token]
    while len(parts) > 2:
        pairs = [(ranks.get(left + right, limit), index) for index, (left, right) in enumerate(zip(parts, parts[1:]))]
        rank, index = min(pairs)
        if rank >= limit:
            break
        parts[index:index + 2] = [parts[index] + parts[index + 1]]
    if len(parts) != 2:
        raise ValueError(f"token {token!r} is not the merge of two tokens of lower rank")
    return parts[0], parts[1]


def huggingface_form(tokenizer: TikTokenTextTokenizer) -> HuggingFaceForm:
    """The byte-level BPE of ``tokenizer``'s vocabulary, ids shifted as its numbering shifts them; special-token
    strings in a text are text where the numbering says so (the files' own encodings)."""
    vocabulary = tokenizer.vocabulary
    ranks = {token: rank for rank, token in enumerate(vocabulary.ranks)}
    vocab = {_spell(token): rank + vocabulary.shift for token, rank in ranks.items()}
    vocab.update(vocabulary.specials)
    merges = [tuple(map(_spell, _parts(ranks, token))) for token in vocabulary.ranks if len(token) > 1]
    converted = Tokenizer(models.BPE(vocab, merges, fuse_unk=False, ignore_merges=True))
    converted.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(onig_pattern(vocabulary.pattern)), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    converted.decoder = decoders.ByteLevel()
    converted.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in vocabulary.specials])
    return HuggingFaceForm(converted, specials_as_text=not vocabulary.specials_in_text)
