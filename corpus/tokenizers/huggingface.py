"""HuggingFace ``tokenizers`` adapters: ``HuggingFaceTokenizer`` (tokenizer.json) and ``GPT2BPETokenizer``.

megatron-core wraps ``transformers.AutoTokenizer``; ``HuggingFaceTokenizer`` with Megatron's default
``include_special_tokens=True`` gives ``tokenizer(text).input_ids`` (the post-processor's tokens, e.g. a
leading BOS, included) and without it the ids of ``tokenize(text)``. transformers also turns every
named special token of ``tokenizer_config.json`` / ``special_tokens_map.json`` into an added special
token (matched whole in the text); we do the same on the ``tokenizers.Tokenizer`` and then encode with
its batch call, which gives the same ids without importing transformers.

``GPT2BPETokenizer`` (megatron-core's ``MegatronHFTokenizer``) is transformers' GPT2 tokenizer built
from ``vocab.json`` + ``merges.txt``: byte-level BPE, GPT-2 split regex, no prefix space,
``<|endoftext|>`` as unk/bos/eos.
"""

from __future__ import annotations

import json
import logging
import os

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

from corpus.core.errors import ConfigError
from corpus.tokenizers.base import HuggingFaceForm, TextTokenizer, library_version
from corpus.tokenizers.config import TokenizerConfig, existing_file
from corpus.tokenizers.long_texts import REGEX_PRETOKENIZER, SPACE_PREFIXED, CutRule

log = logging.getLogger(__name__)

NAMED_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# Used as EOD when no config names an eos_token (a bare tokenizer.json), in this order of preference.
END_OF_TEXT_TOKENS = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>")
GPT2_SPECIAL = "<|endoftext|>"
# Two texts that share no token: when the tokenizer adds the same tokens around both, the affixes are
# constant (a post-processor template), not content-dependent.
AFFIX_PROBES = ("affix probe", "下一个 42 probe")


class AffixError(ValueError):
    """The post-processor adds tokens that depend on the text (they cannot be added around pieces). Internal to the
    tokenizers: this module encodes such texts whole, and the encoder choice (``select``) keeps the reference."""


class HuggingFaceTextTokenizer(TextTokenizer):
    """A ``tokenizers.Tokenizer`` encoding batches with ``encode_batch_fast``."""

    def __init__(self, config: TokenizerConfig, tokenizer: Tokenizer, files: list[str],
                 named: dict[str, str]) -> None:
        self.tokenizer = tokenizer
        self.named = named
        self._files = files
        self.add_special_tokens = config.hf_include_special_tokens
        self.encoder_name = library_version("tokenizers")
        try:
            self._affixes, self._affix_error = self._measure_affixes(), None
        except AffixError as error:  # encoded whole, and no fast path: neither can add such tokens
            self._affixes, self._affix_error = ([], []), error
        self.cut_rule = None if self._affix_error else cut_rule_for(tokenizer)
        super().__init__(config, tokenizer.get_vocab_size(with_added_tokens=True),
                         eod=self._token_id(named.get("eos_token")), bos=self._token_id(named.get("bos_token")))

    def _token_id(self, token: str | None) -> int | None:
        return None if token is None else self.tokenizer.token_to_id(token)

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        encodings = self.tokenizer.encode_batch_fast(texts, add_special_tokens=self.add_special_tokens)
        return [encoding.ids for encoding in encodings]

    def _encode_plain(self, texts: list[str]) -> list[list[int]]:
        return [encoding.ids for encoding in self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)]

    def affixes(self) -> tuple[list[int], list[int]]:
        """The ids the post-processor adds before and after every text (none without special tokens).

        Raises :class:`AffixError` when they depend on the text.
        """
        if self._affix_error is not None:
            raise self._affix_error
        return self._affixes

    def _measure_affixes(self) -> tuple[list[int], list[int]]:
        if not self.add_special_tokens:
            return [], []
        found = set()
        for probe in AFFIX_PROBES:
            plain = self.tokenizer.encode(probe, add_special_tokens=False).ids
            full = self.tokenizer.encode(probe, add_special_tokens=True).ids
            start = next((i for i in range(len(full) - len(plain) + 1) if full[i:i + len(plain)] == plain), None)
            if start is None:
                raise AffixError("the post-processor changes the text's own tokens")
            found.add((tuple(full[:start]), tuple(full[start + len(plain):])))
        if len(found) != 1:
            raise AffixError("the post-processor adds different tokens to different texts")
        prefix, suffix = found.pop()
        return list(prefix), list(suffix)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def files(self) -> list[str]:
        return self._files

    def id_options(self) -> dict:
        return {"include_special_tokens": self.add_special_tokens}

    def special_strings(self) -> list[str]:
        return [token.content for token in self.tokenizer.get_added_tokens_decoder().values()]


def _pre_tokenizer_steps(tokenizer: Tokenizer) -> list[dict]:
    """The pre-tokenizer's steps as their JSON records (a Sequence flattened; [] when there is none)."""
    if tokenizer.pre_tokenizer is None:
        return []
    record = json.loads(tokenizer.pre_tokenizer.__getstate__())
    return record.get("pretokenizers", [record]) if record.get("type") == "Sequence" else [record]


def cut_rule_for(tokenizer: Tokenizer) -> CutRule | None:
    """How a tokenizer.json's very long texts may be cut (see :mod:`corpus.tokenizers.long_texts`).

    Byte-level BPE splitting with a regex (GPT-2, cl100k, Llama-3 families) cuts at newlines and
    between words; a tokenizer that puts a space or ``▁`` before the text (Metaspace, a ``Prepend``
    normalizer, ByteLevel's ``add_prefix_space``) cuts at a dropped space. Anything else: never cut.
    """
    steps = _pre_tokenizer_steps(tokenizer)
    types = {step.get("type") for step in steps}
    byte_level = [step for step in steps if step.get("type") == "ByteLevel"]
    if "Metaspace" in types or any(step.get("add_prefix_space") for step in byte_level):
        return SPACE_PREFIXED
    if "Split" in types or any(step.get("use_regex", True) for step in byte_level):
        return REGEX_PRETOKENIZER
    normalizer = json.loads(tokenizer.normalizer.__getstate__()) if tokenizer.normalizer is not None else {}
    if not steps and '"Prepend"' in json.dumps(normalizer):
        return SPACE_PREFIXED
    return None


def _token_content(value: object) -> str | None:
    """A special token as written in a transformers config: a string or ``{"content": ...}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path}: cannot read it as JSON ({error})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return data


def named_special_tokens(directory: str) -> tuple[dict[str, str], list[str], list[str]]:
    """The named special tokens transformers would set from the configs beside a tokenizer.json.

    Returns (named tokens, additional special tokens, config files read). Later files win, as in
    transformers: ``tokenizer_config.json`` then ``special_tokens_map.json``.
    """
    named: dict[str, str] = {}
    additional: list[str] = []
    read: list[str] = []
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            continue
        read.append(path)
        data = _read_json(path)
        for key in NAMED_TOKENS:
            if (content := _token_content(data.get(key))) is not None:
                named[key] = content
        for key in ("additional_special_tokens", "extra_special_tokens"):
            values = data.get(key) or []
            values = list(values.values()) if isinstance(values, dict) else values  # transformers 5: name -> token
            additional += [c for c in map(_token_content, values if isinstance(values, list) else []) if c]
    return named, additional, read


def _fill_megatron_fallbacks(named: dict[str, str], tokenizer: Tokenizer, source: str) -> None:
    """Megatron's HuggingFaceTokenizer: eos falls back to sep, bos to cls. Without any eos we pick a
    well-known end-of-text special token of the tokenizer (logged) so ``--append-eod`` works on a bare
    tokenizer.json; ``eod_id`` overrides it."""
    if "eos_token" not in named and "sep_token" in named:
        named["eos_token"] = named["sep_token"]
    if "bos_token" not in named and "cls_token" in named:
        named["bos_token"] = named["cls_token"]
    if "eos_token" in named:
        return
    specials = {token.content for token in tokenizer.get_added_tokens_decoder().values() if token.special}
    guess = next((token for token in END_OF_TEXT_TOKENS if token in specials), None)
    if guess is not None:
        named["eos_token"] = guess
        log.info("%s names no eos_token; using its special token %s as end of document", source, guess)


def _add_named_tokens(tokenizer: Tokenizer, named: dict[str, str], additional: list[str], source: str) -> None:
    """Make the named tokens special added tokens, as transformers does when it loads the configs."""
    tokens = list(dict.fromkeys([*named.values(), *additional]))
    unknown = [token for token in tokens if tokenizer.token_to_id(token) is None]
    if unknown:
        raise ConfigError(
            f"{source}: special token(s) {', '.join(unknown)} named in its config are not in tokenizer.json's "
            "vocabulary; fix the config or the tokenizer")
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in tokens])


def tokenizer_json_path(model: str) -> str:
    """The tokenizer.json of ``--tokenizer-model`` (the file itself or ``DIR/tokenizer.json``)."""
    path = existing_file(model, "--tokenizer-model", "HuggingFaceTokenizer", allow_dir=True)
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
        if not os.path.isfile(path):
            raise ConfigError(f"--tokenizer-model {model}: the directory has no tokenizer.json "
                              "(blendforge reads HuggingFace fast-tokenizer files only)")
    return path


def fingerprinted_files(path: str) -> list[str]:
    """tokenizer.json (the file, or ``DIR/tokenizer.json``) and the configs read beside it: the files whose
    bytes make an HF tokenizer's fingerprint, in the order ``describe()`` reads them."""
    json_path = tokenizer_json_path(path)
    return [json_path, *named_special_tokens(os.path.dirname(json_path))[2]]


def load_tokenizer_json(path: str) -> Tokenizer:
    """``tokenizers.Tokenizer.from_file`` with a readable error, without truncation or padding.

    NOTE: a tokenizer.json may carry a ``truncation``/``padding`` setting; transformers turns both off
    unless asked, so megatron-core never truncates a document, and neither may we.
    """
    try:
        tokenizer = Tokenizer.from_file(path)
    except Exception as error:  # noqa: BLE001 - the Rust loader raises plain Exception
        raise ConfigError(f"{path}: not a valid HuggingFace tokenizer.json ({error})") from None
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def limit_rayon_threads(threads: int | None) -> None:
    """Bound the rayon pool of HF tokenizers (and gigatoken) in this process.

    NOTE: rayon's global pool is sized once, at its first use, from RAYON_NUM_THREADS, so this takes
    effect only when called before the first batch encode; ``threads=1`` also turns HF tokenizers'
    parallelism off and more threads turn it on (read at every call). A pool must never be inherited
    across ``fork``: the pipeline never forks a process holding one, and each worker builds its tokenizer itself.
    """
    if threads is None:
        return
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "false" if threads == 1 else "true"


def build_huggingface(config: TokenizerConfig, threads: int | None = None) -> HuggingFaceTextTokenizer:
    """``HuggingFaceTokenizer`` from a tokenizer.json file or a directory holding one."""
    limit_rayon_threads(threads)
    path = tokenizer_json_path(config.model)
    tokenizer = load_tokenizer_json(path)
    named, additional, config_files = named_special_tokens(os.path.dirname(path))
    _add_named_tokens(tokenizer, named, additional, path)
    _fill_megatron_fallbacks(named, tokenizer, path)
    return HuggingFaceTextTokenizer(config, tokenizer, [path, *config_files], named)


def gpt2_tokenizer(vocab_file: str, merge_file: str) -> Tokenizer:
    """transformers' GPT2 tokenizer as a ``tokenizers.Tokenizer`` (what GPT2TokenizerFast builds)."""
    try:
        model = models.BPE.from_file(vocab_file, merge_file, continuing_subword_prefix="", end_of_word_suffix="",
                                     fuse_unk=False)
    except Exception as error:  # noqa: BLE001
        raise ConfigError(f"--vocab-file {vocab_file} / --merge-file {merge_file}: cannot load them as "
                          f"GPT-2 BPE files ({error})") from None
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.add_special_tokens([AddedToken(GPT2_SPECIAL, special=True, normalized=False)])
    return tokenizer


def build_gpt2_bpe(config: TokenizerConfig, threads: int | None = None) -> HuggingFaceTextTokenizer:
    """``GPT2BPETokenizer`` from ``--vocab-file`` vocab.json and ``--merge-file`` merges.txt."""
    limit_rayon_threads(threads)
    vocab = existing_file(config.vocab_file, "--vocab-file", config.type)
    merges = existing_file(config.merge_file, "--merge-file", config.type)
    named = {key: GPT2_SPECIAL for key in ("bos_token", "eos_token", "unk_token")}
    return HuggingFaceTextTokenizer(config, gpt2_tokenizer(vocab, merges), [vocab, merges], named)


def huggingface_form(tokenizer: HuggingFaceTextTokenizer) -> HuggingFaceForm:
    """The tokenizer as the data was encoded with it: its tokenizer.json (or GPT-2 files) with the special tokens
    its config named, and no post-processor tokens when the data was encoded without them."""
    form = Tokenizer.from_str(tokenizer.tokenizer.to_str())
    if not tokenizer.add_special_tokens:
        form.post_processor = None
    return HuggingFaceForm(form)
