"""Choosing the encoder: the gigatoken fast path when it is proven identical, else the reference library.

The proof is empirical and made at start-up on the user's own input: the sample texts the pipeline
passes plus a fixed set of hard cases (special-token strings, unicode, long whitespace runs, empty
text) must encode to exactly the reference's ids. Any refusal or difference falls back to the reference
library with a one-line reason, unless ``encoder="gigatoken"`` demanded the fast path.
"""

from __future__ import annotations

import logging

from corpus.core.optional import missing
from corpus.tokenizers.base import TextTokenizer, build_tokenizer
from corpus.tokenizers.config import TokenizerConfig
from corpus.tokenizers.errors import TokenizerConfigError

log = logging.getLogger(__name__)

HARD_CASES = (
    "",
    " ",
    "\n\n\n",
    "  leading and trailing spaces  ",
    "tabs\tand\r\nwindows\rnewlines\u2028separator",
    "naïve café — “quotes” ‘single’ … ﬁ ligature e\u0301 combining",
    "日本語のテキストと中文文本和한국어 텍스트",
    "emoji 🚀👨‍👩‍👧‍👦🇳🇱 and symbols ∑∫√ ©®™",
    "code: def f(x):\n\treturn x**2  # comment\n\n    if a != b: pass",
    "numbers 1234567890 3.14159 1e-10 0xDEADBEEF",
    "x" * 3000 + " " + "ab" * 1500,
    " " * 200 + "\n" * 50 + "end",
)


def _special_token_cases(reference: TextTokenizer, per_text: int = 16) -> list[str]:
    """Texts embedding every special string of the reference, glued to words and spaced."""
    specials = reference.special_strings()
    return [" ".join(f"before{token}after {token} {token}{token}" for token in specials[start:start + per_text])
            for start in range(0, len(specials), per_text)]


def _first_difference(fast: TextTokenizer, reference: TextTokenizer, texts: list[str]) -> str | None:
    """None when both encode every text identically, else a short description of the first difference."""
    for index, (got, want) in enumerate(zip(fast.encode_batch(texts), reference.encode_batch(texts))):
        if got != want:
            position = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            return f"text {index} ({texts[index][:40]!r}...) differs at token {position}"
    return None


def _try_fast(reference: TextTokenizer, sample_texts: list[str],
              threads: int | None) -> tuple[TextTokenizer | None, str]:
    """The gigatoken tokenizer and why, or None and why not."""
    # NOTE: imported here, not at the top: it loads the tokenizer libraries of every family it covers
    from corpus.tokenizers.gigatoken import SOURCES, GigatokenTextTokenizer

    if reference.config.type not in SOURCES:
        return None, f"the gigatoken fast path does not cover {reference.config.type}"
    if missing("gigatoken"):
        return None, "gigatoken is not installed (pip install gigatoken for the fast path)"
    try:
        fast = GigatokenTextTokenizer(reference, threads)
    except Exception as error:  # noqa: BLE001 - gigatoken refuses unsupported tokenizers with plain errors
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        return None, f"gigatoken refused this tokenizer: {first_line}"
    checks = [*sample_texts, *HARD_CASES, *_special_token_cases(reference)]
    difference = _first_difference(fast, reference, checks)
    if difference is not None:
        return None, f"gigatoken ids differ from {reference.encoder_name}: {difference}"
    megabytes = sum(len(text.encode("utf-8", "replace")) for text in sample_texts) / 1e6
    return fast, (f"{fast.encoder_name}: ids identical to {reference.encoder_name} on {len(sample_texts)} sample "
                  f"texts ({megabytes:.1f} MB) and {len(checks) - len(sample_texts)} hard cases and special strings")


def select_encoder(config: TokenizerConfig, sample_texts: list[str],
                   threads: int | None = None) -> tuple[TextTokenizer, str]:
    """The tokenizer to encode with and a one-line reason for the choice.

    ``encoder="auto"`` takes gigatoken when it is installed, takes the tokenizer and gives identical ids
    on ``sample_texts`` (real input) and the hard cases; otherwise the reference library, saying why.
    ``encoder="reference"`` never tries gigatoken; ``encoder="gigatoken"`` raises when it cannot be used.
    """
    reference = build_tokenizer(config, threads)
    if config.encoder == "reference":
        return reference, f"{reference.encoder_name}: reference encoder requested"
    fast, reason = _try_fast(reference, list(sample_texts), threads)
    if fast is not None:
        return fast, reason
    if config.encoder == "gigatoken":
        raise TokenizerConfigError(f"--encoder gigatoken: {reason}; use --encoder auto or reference")
    return reference, f"{reference.encoder_name} (fallback: {reason})"
