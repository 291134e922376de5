"""Choosing the encoder: the gigatoken fast path when it is proven identical, else the reference library.

The proof is empirical. The check of a tokenizer encodes a fixed set of hard cases (unicode, long
whitespace runs, empty text) and texts embedding every special string of the tokenizer with both
gigatoken and the reference library, which must agree exactly; it depends on the tokenizer alone, so its
verdict is cached (:mod:`corpus.tokenizers.verdicts`) and a later run with the same files, options and
library versions builds gigatoken without loading the reference at all. The user's own input is checked
too: ``corpus tokenize`` encodes its first records with both while the run proceeds
(:mod:`corpus.tokenize.input_check`), and ``sample_texts`` given here are checked before returning. Any
refusal or difference falls back to the reference library with a one-line reason, unless
``encoder="gigatoken"`` demanded the fast path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from corpus.core.errors import ConfigError
from corpus.core.optional import missing
from corpus.tokenizers import verdicts
from corpus.tokenizers.base import TextTokenizer, build_tokenizer, tokenizer_files
from corpus.tokenizers.config import TokenizerConfig
from corpus.tokenizers.registry import lookup

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


def special_token_cases(reference: TextTokenizer, per_text: int = 16) -> list[str]:
    """Texts embedding every special string of the reference, glued to words and spaced."""
    specials = reference.special_strings()
    return [" ".join(f"before{token}after {token} {token}{token}" for token in specials[start:start + per_text])
            for start in range(0, len(specials), per_text)]


def first_difference(fast: TextTokenizer, reference: TextTokenizer, texts: list[str]) -> str | None:
    """None when both encode every text identically, else a short description of the first difference."""
    return first_difference_of(fast.encode_batch, reference, texts)


def first_difference_of(encode: Callable[[list[str]], list[list[int]]], reference: TextTokenizer,
                        texts: list[str]) -> str | None:
    """:func:`first_difference` for any batch ``encode`` (another library's form of the reference, for one)."""
    for index, (got, want) in enumerate(zip(encode(texts), reference.encode_batch(texts))):
        if got != want:
            position = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            return f"text {index} ({texts[index][:40]!r}...) differs at token {position}"
    return None


def _not_covered(config: TokenizerConfig) -> str | None:
    """Why the fast path cannot even be tried for ``config``, or None."""
    if lookup(config.type).fast_forms is None:
        return f"the gigatoken fast path does not cover {config.type}"
    if missing("gigatoken"):
        return "gigatoken is not installed (pip install gigatoken for the fast path)"
    return None


def _check(reference: TextTokenizer, threads: int | None) -> tuple[dict, bytes | None, TextTokenizer | None]:
    """Build gigatoken from the reference and compare both on the hard cases and special strings: the
    verdict (as cached), gigatoken's source bytes and the gigatoken tokenizer (None when refused). Each form
    of the tokenizer gigatoken reads is tried in turn, the fastest to load first."""
    # NOTE: imported here, not at the top: it loads the tokenizer libraries of every family it covers
    from corpus.tokenizers.gigatoken import Profile

    spec = lookup(reference.config.type)
    try:
        sources, profile = spec.load(spec.fast_forms)(reference), Profile.of(reference)
    except Exception as error:  # noqa: BLE001 - no gigatoken form (FastPathRefused, AffixError)
        return _refused(error), None, None
    checks = [*HARD_CASES, *special_token_cases(reference)]
    reasons = []
    for source in sources:
        verdict, fast = _check_form(reference, source, profile, checks, threads)
        if fast is not None:
            return verdict, source.data, fast
        reasons.append(verdict["reason"])
    return {"fast": False, "reason": reasons[-1]}, None, None


def _refused(error: Exception) -> dict:
    first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
    return {"fast": False, "reason": f"gigatoken refused this tokenizer: {first_line}"}


def _check_form(reference: TextTokenizer, source, profile, checks: list[str],
                threads: int | None) -> tuple[dict, TextTokenizer | None]:
    """The verdict on one form of the tokenizer, and gigatoken built from it when it gives identical ids."""
    from corpus.tokenizers.gigatoken import GigatokenTextTokenizer

    try:
        fast = GigatokenTextTokenizer(reference.config, source, profile, reference.files(), threads, reference)
    except Exception as error:  # noqa: BLE001 - gigatoken refuses unsupported tokenizers with plain errors
        return _refused(error), None
    difference = first_difference(fast, reference, checks)
    if difference is not None:
        return {"fast": False, "reason": f"gigatoken ids differ from {reference.encoder_name}: {difference}"}, None
    return {"fast": True, "reason": f"ids identical to {reference.encoder_name} on {len(checks)} hard cases and "
                                   "special strings", "source": source.record(), "profile": vars(profile)}, fast


def _from_verdict(config: TokenizerConfig, verdict: dict, data: bytes, files: list[str],
                  threads: int | None) -> TextTokenizer:
    """gigatoken built from a cached verdict (no reference library involved)."""
    from corpus.tokenizers.gigatoken import FastSource, GigatokenTextTokenizer, Profile

    return GigatokenTextTokenizer(config, FastSource(data=data, **verdict["source"]), Profile(**verdict["profile"]),
                                  files, threads)


def _reference(config: TokenizerConfig, reason: str, threads: int | None,
               reference: TextTokenizer | None = None) -> tuple[TextTokenizer, str]:
    """The reference tokenizer and the fallback reason (an error when gigatoken was demanded)."""
    if config.encoder == "gigatoken":
        raise ConfigError(f"--encoder gigatoken: {reason}; use --encoder auto or reference")
    reference = reference or build_tokenizer(config, threads)
    return reference, f"{reference.encoder_name} (fallback: {reason})"


def record_difference(config: TokenizerConfig, reason: str) -> None:
    """Remember that gigatoken gave other ids than the reference on real input: later runs with this
    tokenizer take the reference library at once."""
    verdicts.store(verdicts.key_for(config, tokenizer_files(config)), {"fast": False, "reason": reason}, None)


def settled_encoder(config: TokenizerConfig) -> TokenizerConfig | None:
    """``config`` with the encoder :func:`select_encoder` takes for it when that is known without building anything
    (an encoder named, or this tokenizer's cached check), else None: worker processes build theirs with it while the
    run makes its own choice."""
    if config.encoder == "reference":
        return config
    if _not_covered(config) is not None:
        return None
    found = verdicts.load(verdicts.key_for(config, tokenizer_files(config)))
    if found is None:
        return None
    return config.replace(encoder="gigatoken" if found[0]["fast"] else "reference")


def select_encoder(config: TokenizerConfig, sample_texts: Sequence[str] = (),
                   threads: int | None = None) -> tuple[TextTokenizer, str]:
    """The tokenizer to encode with and a one-line reason for the choice.

    ``encoder="auto"`` takes gigatoken when it is installed, takes the tokenizer and gives identical ids
    on the hard cases, the special strings and ``sample_texts``; otherwise the reference library, saying
    why. ``encoder="reference"`` never tries gigatoken; ``encoder="gigatoken"`` raises when it cannot be used.
    """
    if config.encoder == "reference":
        reference = build_tokenizer(config, threads)
        return reference, f"{reference.encoder_name}: reference encoder requested"
    blocked = _not_covered(config)
    if blocked is not None:
        return _reference(config, blocked, threads)
    files = tokenizer_files(config)
    key = verdicts.key_for(config, files)
    found, reference, fast = verdicts.load(key), None, None
    if found is None:
        reference = build_tokenizer(config, threads)
        verdict, data, fast = _check(reference, threads)
        verdicts.store(key, verdict, data)
        reason = verdict["reason"]
    else:
        (verdict, data), reason = found, f"{found[0]['reason']}; cached check"
    if not verdict["fast"]:
        return _reference(config, reason, threads, reference)
    fast = fast or _from_verdict(config, verdict, data, files, threads)
    if sample_texts:
        reference = reference or build_tokenizer(config, threads)
        difference = first_difference(fast, reference, list(sample_texts))
        if difference is not None:
            reason = f"gigatoken ids differ from {reference.encoder_name}: {difference}"
            record_difference(config, reason)
            return _reference(config, reason, threads, reference)
        megabytes = sum(len(text.encode("utf-8", "replace")) for text in sample_texts) / 1e6
        reason += f" and {len(sample_texts)} sample texts ({megabytes:.1f} MB)"
    return fast, f"{fast.encoder_name}: {reason}"
