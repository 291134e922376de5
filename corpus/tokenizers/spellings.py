"""Other spellings of a tokenizer.json for gigatoken: ones it reads where it refuses the file's, and a faster one.

Converters write the same tokenizer in different words. Each rewrite turns a spelling into another and
says why both give the same ids; :mod:`corpus.tokenizers.select` then compares gigatoken on the rewritten
form with the reference library on the original, as for any other file.

- Byte-level BPE (a ``Split`` regex gigatoken knows, then ``ByteLevel``; or GPT-2's ``ByteLevel`` alone) as a
  ``.tiktoken`` rank file (:func:`as_rank_file`): gigatoken loads that several times faster than the JSON
  (it derives no merge table from strings). The ranks are the vocabulary's ids in order and the merges
  then follow from them (tiktoken's rule: merge the adjacent pair whose join ranks lowest), which is how
  tiktoken-converted and ``tokenizers``-trained files number their tokens; the check proves it per file.

- SentencePiece BPE written by transformers' ``TokenizersBackend`` from a ``.model`` (legacy mode):
  normalizer ``Replace(" ", "▁")`` then ``Replace(r"\\A▁", "▁▁")``, pre-tokenizer
  ``Metaspace(replacement="▁", prepend_scheme="always", split=False)``. Metaspace puts "▁" before a text
  unless it already starts with one, and the Replace doubles a leading "▁" first: every text gets one
  more "▁" in front and a "▁" for each space, which transformers' legacy LlamaConverter spells
  ``Prepend("▁")`` + ``Replace(" ", "▁")`` and no pre-tokenizer (HF applies both per piece of text
  between added tokens alike). A model with user-defined pieces adds a ``Split`` isolating them after
  normalisation, which gigatoken cannot do (it matches such pieces in the raw text, which gives the text
  after them a "▁" of its own): the ``Split`` is dropped and texts holding one of them go to the reference.
"""

from __future__ import annotations

import base64
import re

import orjson

from corpus.tokenizers.tiktoken_vocab import PATTERNS

DUMMY = "\u2581"


def _is_string_replace(step: dict, pattern: str, content: str) -> bool:
    return step == {"type": "Replace", "pattern": {"String": pattern}, "content": content}


def _metaspace_always(step: dict | None) -> bool:
    return bool(step) and step.get("type") == "Metaspace" and step.get("replacement") == DUMMY \
        and step.get("prepend_scheme") == "always" and step.get("split") is False


def _user_defined_pieces(step: dict) -> list[str] | None:
    """The pieces of a ``Split`` isolating SentencePiece's user-defined pieces (``"|".join(re.escape(piece))``,
    as transformers writes it), or None when the step is not exactly that."""
    pattern = (step.get("pattern") or {}).get("Regex")
    if step.get("type") != "Split" or step.get("behavior") != "Isolated" or step.get("invert") or not pattern:
        return None
    alternatives = re.findall(r"(?:\\.|[^\\|])+", pattern)
    pieces = [re.sub(r"\\(.)", r"\1", alternative, flags=re.DOTALL) for alternative in alternatives]
    return pieces if "|".join(map(re.escape, pieces)) == pattern else None


def _backend_sentencepiece(data: dict) -> list[str] | None:
    """The ``TokenizersBackend`` SentencePiece spelling → the legacy LlamaConverter's (see the module); the
    user-defined pieces its ``Split`` isolates, or None when the spelling is not this one."""
    normalizer, pre_tokenizer = data.get("normalizer") or {}, data.get("pre_tokenizer") or {}
    steps = normalizer.get("normalizers") if normalizer.get("type") == "Sequence" else None
    pre_steps = pre_tokenizer.get("pretokenizers") if pre_tokenizer.get("type") == "Sequence" else [pre_tokenizer]
    pieces = _user_defined_pieces(pre_steps[1]) if len(pre_steps) == 2 else []
    if not (steps and len(steps) == 2 and pieces is not None and len(pre_steps) in (1, 2)
            and _metaspace_always(pre_steps[0]) and _is_string_replace(steps[0], " ", DUMMY)
            and steps[1] == {"type": "Replace", "pattern": {"Regex": "\\A" + DUMMY}, "content": DUMMY * 2}):
        return None
    data["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": DUMMY},
                                                              {"type": "Replace", "pattern": {"String": " "},
                                                               "content": DUMMY}]}
    data["pre_tokenizer"] = None
    return pieces


REWRITES = (_backend_sentencepiece,)


def for_gigatoken(text: str, data: dict) -> tuple[str, list[str]]:
    """``text`` (a tokenizer.json, parsed as ``data``, which is rewritten in place) with every rewrite that
    applies (unchanged when none does), and the strings whose texts the reference must encode instead (see
    :class:`corpus.tokenizers.gigatoken.FastSource`)."""
    found = [rewrite(data) for rewrite in REWRITES]
    if all(pieces is None for pieces in found):
        return text, []
    return orjson.dumps(data).decode(), [piece for pieces in found if pieces for piece in pieces]


# gigatoken's named split regexes for the tokenizer.json spellings of the same regexes (onig's dialect).
SPLIT_SCHEMES = {
    # Llama-3's and transformers' TikTokenConverter's (cl100k's family)
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+": "gpt4",
    PATTERNS["v2"]: "nemotron",  # Megatron's v2 and tekken's
}
_PLAIN_ADDED = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False}


def _byte_level_scheme(pre_tokenizer: dict | None) -> str | None:
    """gigatoken's scheme for a byte-level pre-tokenizer, or None when it is not one it has."""
    steps = (pre_tokenizer or {}).get("pretokenizers") if (pre_tokenizer or {}).get("type") == "Sequence" \
        else [pre_tokenizer] if pre_tokenizer else []
    byte_level = {"type": "ByteLevel", "add_prefix_space": False}
    if len(steps) == 1 and steps[0].items() >= {**byte_level, "use_regex": True}.items():
        return "gpt2"
    if len(steps) == 2 and steps[1].items() >= {**byte_level, "use_regex": False}.items():
        split = steps[0]
        if split.get("type") == "Split" and split.get("behavior") == "Isolated" and not split.get("invert"):
            return SPLIT_SCHEMES.get((split.get("pattern") or {}).get("Regex"))
    return None


def _bytes_of_symbols() -> dict[str, int]:
    """ByteLevel's alphabet: the character standing for each byte (GPT-2's bytes_to_unicode), inverted."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [byte for byte in range(256) if byte not in printable]
    return {**{chr(byte): byte for byte in printable}, **{chr(256 + i): byte for i, byte in enumerate(others)}}


def as_rank_file(data: dict) -> tuple[bytes, str, dict[str, int], int, int] | None:
    """A byte-level BPE tokenizer.json (parsed) as (``.tiktoken`` lines, gigatoken scheme, added tokens at ids
    after the ranks, number of ranks, id of rank 0), or None when it is not one this form can hold."""
    model, added = data.get("model") or {}, data.get("added_tokens") or []
    scheme = _byte_level_scheme(data.get("pre_tokenizer"))
    if (scheme is None or data.get("normalizer") or model.get("type") != "BPE" or model.get("byte_fallback")
            or model.get("dropout") or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix")
            or any(not _PLAIN_ADDED.items() <= token.items() for token in added)):
        return None
    contents = {token["content"] for token in added}
    vocab = sorted((i, token) for token, i in model["vocab"].items() if token not in contents)
    shift, symbols = vocab[0][0], _bytes_of_symbols()
    if [i for i, _ in vocab] != list(range(shift, shift + len(vocab))):
        return None  # ranks must be dense
    try:
        lines = b"".join(base64.b64encode(bytes(symbols[c] for c in token)) + b" %d\n" % (i - shift)
                         for i, token in vocab)
    except KeyError:
        return None  # a vocabulary entry outside ByteLevel's alphabet
    return lines, scheme, {token["content"]: len(vocab) + token["id"] for token in added}, len(vocab), shift
