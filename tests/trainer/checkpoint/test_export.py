"""``trainer export --hf``: transformers' LlamaForCausalLM loads the export and gives our logits; AutoTokenizer loads
the data's tokenizer from it, for every tokenizer family, and gives the data's ids; the exported model generates."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import fields
from pathlib import Path

import pytest
import torch
import transformers  # a test dependency (pyproject's "test" extra): the reference loader of the export
from tokenizers import normalizers

from corpus.core.disk import OutputError
from corpus.indexed import IndexedReader
from corpus.tokenizers import TokenizerConfig, build_tokenizer, huggingface, sentencepiece
from corpus.tokenizers.errors import NotExportable
from tests.conftest import REPO, invoke_cli, run_cli
from tests.tokenizer_files import TokenizerFiles
from tests.trainer.conftest import blend_overrides, tiny_config
from trainer.checkpoint import export
from trainer.config.loading import load_config
from trainer.errors import CheckpointError
from trainer.run.loop import train


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny GQA model trained a few steps (so no weight is still at its init)."""
    tmp_path = tmp_path_factory.mktemp("export")
    torch.set_num_threads(1)
    save = tmp_path / "ckpt"
    train(tiny_config(tmp_path, model={"num_query_groups": 2, "rotary_base": 5000.0},
                      checkpoint={"save": str(save)}, logging={"eval_iters": 0}))
    return save


def logits_match(save, directory, atol: float) -> None:
    ours, _ = export.load_for_export(save)
    theirs = transformers.LlamaForCausalLM.from_pretrained(directory, attn_implementation="eager",
                                                           torch_dtype=torch.float32).eval()
    tokens = torch.randint(0, 96, (2, 16))
    with torch.no_grad():
        expected = ours(tokens, torch.arange(16).expand(2, -1))
        torch.testing.assert_close(theirs(tokens).logits, expected, rtol=0, atol=atol)


@pytest.mark.slow  # a fresh process importing torch, the trainer and transformers
def test_cli_export_loads_in_transformers_with_our_logits(trained, tmp_path):
    result = run_cli("trainer", "export", "--hf", str(tmp_path / "hf"), "--load", str(trained), "--dtype", "float32")
    assert "model.safetensors" in result.stdout
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["num_key_value_heads"] == 2
    assert config["vocab_size"] == 128 and config["rope_theta"] == 5000.0
    logits_match(trained, tmp_path / "hf", atol=1e-5)


def test_sharded_bf16_export(trained, tmp_path, monkeypatch):
    monkeypatch.setattr(export, "SHARD_BYTES", 20_000)
    files = export.export_hf(trained, tmp_path / "hf", dtype="bfloat16")
    assert len([f for f in files if f.endswith(".safetensors")]) > 1
    index = json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == {f for f in files if f.endswith(".safetensors")}
    logits_match(trained, tmp_path / "hf", atol=0.1)


def test_export_without_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint there"):
        export.export_hf(tmp_path, tmp_path / "hf")
    result = invoke_cli("trainer", "export", "--hf", str(tmp_path / "hf"), "--load", str(tmp_path))
    assert result.returncode == 1 and "no checkpoint there" in result.stderr and "Traceback" not in result.stderr


def test_every_exported_file_follows_the_umask(trained, tmp_path):
    files = export.export_hf(trained, tmp_path / "hf", dtype="float32")
    modes = {name: os.stat(tmp_path / "hf" / name).st_mode & 0o777 for name in files}
    assert set(modes.values()) == {0o666 & ~_umask()}, modes


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_an_unwritable_export_folder_is_one_line(trained, tmp_path, monkeypatch):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    with pytest.raises(OutputError, match=f"{blocker} is a file, not a folder; choose another --hf"):
        export.export_hf(trained, blocker / "hf")

    def full(*args, **kwargs):
        raise export.SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(export, "save_file", full)
    with pytest.raises(OutputError) as raised:
        export.export_hf(trained, tmp_path / "hf")
    assert "No space left on device" in str(raised.value) and "free space and export again" in str(raised.value)


# --- the data's tokenizer comes along: one case per tokenizer family `corpus tokenize` accepts -----------------------

SAMPLE_DOCUMENTS = 24


def family_flags(files: TokenizerFiles) -> dict[str, list[str]]:
    """``corpus tokenize`` flags of each tokenizer family, on the real test tokenizer files."""
    return {
        "tokenizer.json": ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", files.sample_json],
        "tokenizer.json, BOS template": ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model",
                                         files.cl100k_bos_dir],
        "tokenizer.json, BOS template left out": ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model",
                                                  files.cl100k_bos_dir, "--tokenizer-hf-no-include-special-tokens"],
        "GPT-2 vocab + merges": ["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", files.gpt2_vocab,
                                 "--merge-file", files.gpt2_merges],
        "SentencePiece .model": ["--tokenizer-type", "SentencePieceTokenizer", "--tokenizer-model", files.spm_v1],
        "tiktoken, Megatron's numbering": ["--tokenizer-type", "TikTokenizer", "--tokenizer-model",
                                           files.cl100k_tiktoken],
        "tiktoken, the file's own (cl100k)": ["--tokenizer-type", "TikTokenizer", "--tokenizer-model",
                                              files.cl100k_tiktoken, "--tiktoken-pattern", "file"],
        "tiktoken, tekken": ["--tokenizer-type", "TikTokenizer", "--tokenizer-model", files.tekken,
                             "--tiktoken-pattern", "file"],
    }


FAMILIES = list(family_flags(TokenizerFiles(*[""] * len(fields(TokenizerFiles)))))


def tokenize_sample(tmp_path: Path, flags: list[str]) -> Path:
    """The first documents of the shipped prose through ``corpus tokenize --append-eod``; the output prefix."""
    sample = tmp_path / "sample.jsonl"
    lines = (REPO / "examples" / "web.jsonl").read_text().splitlines(keepends=True)
    sample.write_text("".join(lines[:SAMPLE_DOCUMENTS]))
    run_cli("corpus", "tokenize", "--input", str(sample), "--output-prefix", str(tmp_path / "data"), "--json-keys",
            "text", "--append-eod", "--quiet", *flags)
    return tmp_path / "data_text_document"


@pytest.mark.parametrize("family", FAMILIES)
def test_the_exported_tokenizer_gives_the_ids_the_data_holds(tokenizer_files, tmp_path, family):
    prefix = tokenize_sample(tmp_path, family_flags(tokenizer_files)[family])
    meta = json.loads(prefix.with_suffix(".meta.json").read_text())
    files = export.write_tokenizer_files(export.data_tokenizer(meta["tokenizer"]), tmp_path / "hf", 64)
    assert files == ["tokenizer.json", "tokenizer_config.json"]
    loaded = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    texts = [json.loads(line)["text"] for line in (tmp_path / "sample.jsonl").read_text().splitlines()]
    with IndexedReader(prefix) as reader:
        held = [reader[index].tolist() for index in range(len(reader))]
    assert [ids + [meta["eod_id"]] for ids in loaded(texts)["input_ids"]] == held
    assert loaded.eos_token_id == loaded.pad_token_id == meta["eod_id"]
    assert loaded.bos_token_id == meta["tokenizer"]["bos"]


def test_a_tokenizer_giving_other_ids_is_never_written(tokenizer_files, tmp_path, monkeypatch):
    prefix = tokenize_sample(tmp_path, family_flags(tokenizer_files)["tokenizer.json"])
    tokenizer = export.data_tokenizer(json.loads(prefix.with_suffix(".meta.json").read_text())["tokenizer"])
    original = huggingface.huggingface_form

    def unknown_to_lowercase(tokenizer):
        form = original(tokenizer)
        form.tokenizer.normalizer = normalizers.Lowercase()
        return form

    monkeypatch.setattr(huggingface, "huggingface_form", unknown_to_lowercase)
    with pytest.raises(NotExportable, match=r"would encode other ids than the data's \(text \d+ .* differs at token"):
        export.write_tokenizer_files(tokenizer, tmp_path / "hf", 64)
    assert not (tmp_path / "hf").exists() or list((tmp_path / "hf").iterdir()) == []


def test_what_has_no_tokenizer_to_export_says_why(tmp_path, trained, caplog):
    with pytest.raises(NotExportable, match="NullTokenizer has no text tokenizer .*give the model token ids"):
        export.write_tokenizer_files(build_tokenizer(TokenizerConfig(type="NullTokenizer", vocab_size=90)), tmp_path,
                                     64)
    with caplog.at_level(logging.WARNING, logger="trainer.checkpoint.export"):
        files = export.export_hf(trained, tmp_path / "hf")  # a --mock-data run
    assert "tokenizer.json" not in files
    assert "tokenizer not exported: the run's data records no tokenizer" in caplog.text


def test_a_tokenizer_changed_since_tokenization_is_not_exported(tmp_path):
    model = tmp_path / "tokenizer.json"
    model.write_bytes((REPO / "examples" / "tokenizer.json").read_bytes())
    prefix = tokenize_sample(tmp_path, ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(model)])
    record = json.loads(prefix.with_suffix(".meta.json").read_text())["tokenizer"]
    model.write_text(model.read_text().replace('"<|endoftext|>"', '"<|end|>"'))
    with pytest.raises(NotExportable, match=f"{model} changed since the data was tokenized"):
        export.data_tokenizer(record)


@pytest.mark.slow  # per family: tokenize, train two steps, export through the CLI, generate with transformers
@pytest.mark.parametrize("family", FAMILIES)
def test_the_exported_tiny_model_generates_with_its_tokenizer(tokenizer_files, tmp_path, family):
    prefix = tokenize_sample(tmp_path, family_flags(tokenizer_files)[family])
    blend = tmp_path / "blend.yaml"
    blend.write_text(f"seq_length: 64\nsplit: '100,0,0'\nsources:\n  - {{name: web, prefix: {prefix.name}, "
                     "weight: 1}\n")
    train(load_config(None, blend_overrides(tmp_path, blend, training={"train_iters": 2},
                                            logging={"eval_iters": 0}, checkpoint={"save": str(tmp_path / "ckpt")})))
    result = run_cli("trainer", "export", "--hf", str(tmp_path / "hf"), "--load", str(tmp_path / "ckpt"),
                     "--dtype", "float32")
    assert "tokenizer.json, tokenizer_config.json" in result.stdout
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    prompt = tokenizer(["The Python tutorial"], return_tensors="pt")
    out = model.generate(**prompt, max_new_tokens=6, min_new_tokens=6, do_sample=False,
                         pad_token_id=tokenizer.pad_token_id)
    assert out.shape == (1, prompt["input_ids"].shape[1] + 6)
    assert tokenizer.decode(out[0, :prompt["input_ids"].shape[1]]).strip().endswith("The Python tutorial")


def test_without_transformers_a_sentencepiece_model_says_how_to_export_it(tokenizer_files, monkeypatch):
    monkeypatch.setattr(sentencepiece, "missing", lambda module: f"{module} does not import (stubbed)")
    tokenizer = build_tokenizer(TokenizerConfig(type="SentencePieceTokenizer", model=tokenizer_files.spm_v1))
    with pytest.raises(NotExportable, match="converted by transformers, which is not installed: pip install "
                                            "transformers, then export again"):
        export.write_tokenizer_files(tokenizer, "unused", 64)
