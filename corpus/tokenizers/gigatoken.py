"""The gigatoken fast path for HuggingFace byte-level BPE tokenizers (what Megatron's
``preprocess_data_fast.py`` uses).

gigatoken is optional and imported lazily. It encodes a tokenizer.json's model, pre-tokenizer and added
tokens but not its post-processor, so the tokens ``tokenizer(text)`` adds around every text (e.g. a
leading BOS) are measured once on the reference library and added here. Whether it may be used at all is
decided by :mod:`corpus.tokenizers.select`, which compares its ids with the reference on real input.

NOTE: gigatoken's batch calls run on rayon's process-global pool, which is not fork-safe; workers must be
spawned. ``parallel=False`` (threads=1) never touches the pool.
"""

from __future__ import annotations

from corpus.tokenizers.base import TextTokenizer, library_version
from corpus.tokenizers.huggingface import HuggingFaceTextTokenizer, limit_rayon_threads

# Two texts that share no token: when the reference adds the same tokens around both, the affixes are
# constant (a post-processor template), not content-dependent.
AFFIX_PROBES = ("gigatoken affix probe", "下一个 42 probe")


class AffixError(ValueError):
    """The post-processor adds tokens that depend on the text; gigatoken cannot reproduce them."""


def post_processor_affixes(reference: HuggingFaceTextTokenizer) -> tuple[list[int], list[int]]:
    """The ids the reference adds before and after every text (empty without special tokens)."""
    if not reference.add_special_tokens:
        return [], []
    found = set()
    for probe in AFFIX_PROBES:
        plain = reference.tokenizer.encode(probe, add_special_tokens=False).ids
        full = reference.tokenizer.encode(probe, add_special_tokens=True).ids
        start = next((i for i in range(len(full) - len(plain) + 1) if full[i:i + len(plain)] == plain), None)
        if start is None:
            raise AffixError("the post-processor changes the text's own tokens")
        found.add((tuple(full[:start]), tuple(full[start + len(plain):])))
    if len(found) != 1:
        raise AffixError("the post-processor adds different tokens to different texts")
    prefix, suffix = found.pop()
    return list(prefix), list(suffix)


class GigatokenTextTokenizer(TextTokenizer):
    """gigatoken's Rust BPE behind the TextTokenizer interface; decode and metadata from the reference."""

    def __init__(self, reference: HuggingFaceTextTokenizer, threads: int | None) -> None:
        import gigatoken

        self.reference = reference
        self.prefix, self.suffix = post_processor_affixes(reference)
        # The reference's tokenizer.json already carries the special tokens named in its configs.
        self.backend = gigatoken.Tokenizer.from_json(reference.tokenizer.to_str())
        # None: gigatoken's own choice (parallel unless inside a multiprocessing worker).
        self.parallel = None if threads is None else threads > 1
        limit_rayon_threads(threads)
        self.encoder_name = library_version("gigatoken")
        super().__init__(reference.config, reference.vocab_size, reference.eod, reference.bos)

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        ids = self.backend.encode_batch_list(texts, parallel=self.parallel)
        if self.prefix or self.suffix:
            return [[*self.prefix, *row, *self.suffix] for row in ids]
        return ids

    def decode(self, ids: list[int]) -> str:
        return self.reference.decode(ids)

    def files(self) -> list[str]:
        return self.reference.files()

    def id_options(self) -> dict:
        return self.reference.id_options()
