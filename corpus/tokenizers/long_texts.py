"""Very long texts are encoded in pieces, cut where the cut cannot change the ids.

Tokenizer libraries handle a 50 MB document badly: HF ``tokenizers`` keeps per-token offsets and
strings (5.8 GB of RSS for 50 MB of text, at 0.9 MB/s), sentencepiece ~40 bytes per input byte, and
every library encodes one text on one thread. A text longer than :data:`LONG_TEXT_CHARS` is therefore
cut into pieces of about :data:`PIECE_CHARS`, the pieces encoded a few at a time with the library's
batch call (both cores busy, memory bounded by the group) and their ids concatenated.

A cut is taken only where two things hold:

1. the tokenizer family's rule allows it (:class:`CutRule`). Regex pre-tokenizers (GPT-2, cl100k /
   Llama-3, o200k, Megatron's tiktoken ``v1``/``v2``, tekken) never join a newline that follows a
   non-space to the non-space after it, nor a letter to a following space-and-letter: no pre-token
   crosses ``x\\n|y`` or ``a| b``, and BPE never merges across pre-tokens. SentencePiece-style
   tokenizers (whitespace becomes ``▁``, a dummy ``▁`` is put before the text) see the same pieces
   when a single space between two non-spaces is dropped and the right part starts the next piece;
2. the tokenizer itself agrees: a window of :data:`WINDOW_CHARS` on each side of the cut encodes to the
   same ids whole and in two halves (this catches a normalizer or option the rule does not know).

A text with no allowed cut is encoded whole, as before. Special tokens the tokenizer adds around a
text (a BOS from a post-processor) are added once, around the whole text, by the adapter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterator

#: Texts longer than this (characters) are cut; shorter ones are encoded whole, as the library would.
LONG_TEXT_CHARS = 1 << 20
#: Target length of a piece (characters); a cut is searched from here on.
PIECE_CHARS = 128 << 10
#: Characters on each side of a cut that the tokenizer must encode identically whole and in halves.
WINDOW_CHARS = 1024
#: Pieces per library call: enough to keep every thread busy, few enough to bound the memory.
PIECES_PER_CALL = 8
#: Consecutive rejected candidates after which the rest of the text is encoded whole.
MAX_REJECTED = 16


@dataclass(frozen=True)
class CutRule:
    """Where a tokenizer family may be cut: ``pattern`` matches at a candidate; the text is cut at the
    match's start and ``match.end()`` is where the next piece begins (a dropped space in between)."""

    name: str
    pattern: re.Pattern


# Python's \s covers every Unicode White_Space character (and a few more), so "\S" here is never
# whitespace to the tokenizers' regexes; [^\W\d_] is a letter (a Unicode alphabetic character).
REGEX_PRETOKENIZER = CutRule("regex pre-tokenizer", re.compile(r"(?<=\S\n)(?=\S)|(?<=[^\W\d_])(?= [^\W\d_])"))
SPACE_PREFIXED = CutRule("space-prefixed pieces", re.compile(r"(?<=\S) (?=\S)"))
#: Every rule by name (a cached encoder check records its tokenizer's rule by name).
CUT_RULES = {rule.name: rule for rule in (REGEX_PRETOKENIZER, SPACE_PREFIXED)}

Verify = Callable[[str, str, str], bool]
"""``verify(whole, left, right)``: the tokenizer encodes ``whole`` (``left``, the dropped characters,
``right``) to the ids of ``left`` followed by those of ``right``."""


def pieces(text: str, rule: CutRule, verify: Verify) -> Iterator[str]:
    """``text`` cut into pieces of about :data:`PIECE_CHARS` at verified cuts of ``rule``, in order."""
    start, rejected = 0, 0
    search_from = PIECE_CHARS
    while len(text) - start > PIECE_CHARS + PIECE_CHARS // 2 and rejected < MAX_REJECTED:
        match = rule.pattern.search(text, search_from)
        if match is None:
            break
        cut, resume = match.start(), match.end()
        window_left = text[max(start, cut - WINDOW_CHARS):cut]
        window_right = text[resume:resume + WINDOW_CHARS]
        if verify(window_left + text[cut:resume] + window_right, window_left, window_right):
            yield text[start:cut]
            start, rejected = resume, 0
            search_from = start + PIECE_CHARS
        else:
            rejected += 1
            search_from = resume + 1
    yield text[start:]
