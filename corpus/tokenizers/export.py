"""A data tokenizer as Hugging Face files: ``tokenizer.json`` and ``tokenizer_config.json``, which transformers'
``AutoTokenizer.from_pretrained`` loads, giving the ids the data holds.

Each family turns its tokenizer into a ``tokenizers.Tokenizer`` through the registry's ``huggingface_form``
entry (:mod:`corpus.tokenizers.registry`): a tokenizer.json or GPT-2 vocab + merges is one already, a tiktoken
vocabulary becomes a byte-level BPE, a SentencePiece model goes through transformers' converter. A family without a
text form (NullTokenizer) has no entry. Before anything is written the result encodes the hard cases of the
encoder check and every special string, and must give the data tokenizer's ids on each: a tokenizer that would
give other ids is never written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from corpus.core.atomic_write import write_atomically
from corpus.tokenizers.base import HuggingFaceForm, TextTokenizer
from corpus.tokenizers.errors import NotExportable
from corpus.tokenizers.registry import lookup
from corpus.tokenizers.select import HARD_CASES, first_difference_of, special_token_cases

#: The files written, in this order.
FILES = ("tokenizer.json", "tokenizer_config.json")


def huggingface_form(tokenizer: TextTokenizer) -> HuggingFaceForm:
    """``tokenizer`` (the data's, as :func:`~corpus.tokenizers.build_tokenizer` builds it) as a Hugging Face
    tokenizer, checked to give its ids; :class:`NotExportable` when it has no such form or gives other ids."""
    spec = lookup(tokenizer.config.type)
    if spec.huggingface_form is None:
        raise NotExportable(f"{spec.name} has no text tokenizer ({spec.files}): give the model token ids")
    form = spec.load(spec.huggingface_form)(tokenizer)
    form.tokenizer.encode_special_tokens = form.specials_as_text
    difference = first_difference_of(
        lambda texts: [encoding.ids for encoding in form.tokenizer.encode_batch(texts, add_special_tokens=True)],
        tokenizer, [*HARD_CASES, *special_token_cases(tokenizer)])
    if difference is not None:
        raise NotExportable(f"its Hugging Face form would encode other ids than the data's ({difference})")
    return form


def _token(form: HuggingFaceForm, token_id: int | None) -> str | None:
    return None if token_id is None else form.tokenizer.id_to_token(token_id)


def auto_tokenizer_settings(form: HuggingFaceForm, tokenizer: TextTokenizer, max_length: int) -> dict:
    """transformers' ``tokenizer_config.json`` for ``form``: BOS and EOS the data's (EOS its end of document),
    padding with EOS (the data has no padding token), special-token strings split as the data split them."""
    eos = _token(form, tokenizer.eod)
    return {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": _token(form, tokenizer.bos), "eos_token": eos,
            "pad_token": eos, "split_special_tokens": form.specials_as_text, "model_max_length": max_length,
            "clean_up_tokenization_spaces": False}


def write_tokenizer_files(tokenizer: TextTokenizer, directory: str | os.PathLike, max_length: int) -> list[str]:
    """Write ``tokenizer`` into ``directory`` (made if missing) as :data:`FILES`, each atomically;
    ``max_length``: the longest input the model takes. Raises :class:`NotExportable` before writing."""
    form = huggingface_form(tokenizer)
    settings = auto_tokenizer_settings(form, tokenizer, max_length)
    contents = (form.tokenizer.to_str(), json.dumps(settings, indent=2) + "\n")
    Path(directory).mkdir(parents=True, exist_ok=True)
    for name, text in zip(FILES, contents):
        write_atomically(Path(directory) / name, text)
    return list(FILES)
