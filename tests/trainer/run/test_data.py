"""The trainer on real token files: the shipped sample through blends/web_code.yaml and --data-path."""

from __future__ import annotations

import json
import shutil
import statistics

import pytest
import torch

from corpus.core.errors import ConfigError, UserError
from corpus.tokenizers import TokenizerConfig, build_tokenizer
from tests.conftest import invoke_cli, run_cli
from tests.corpus.blending.blend_data import EXAMPLES, write_random
from tests.trainer.conftest import blend_overrides, read_metrics, tiny_config
from trainer.config.loading import load_config
from trainer.parallel.state import ParallelState
from trainer.run.data import build_data, open_data
from trainer.run.loop import train

#: ``trainer run``'s flags for a two-step run of a tiny model (the vocabulary: the data's).
TINY_FLAGS = ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4", "--ffn-hidden-size", "64",
              "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "2", "--eval-iters", "0"]


def train_losses(path) -> list[float]:
    return [r["loss"] for r in read_metrics(path) if "loss" in r]


def test_loss_falls_on_the_sample(sample_blend, tmp_path):
    config = load_config(None, blend_overrides(tmp_path, sample_blend, training={"train_iters": 40},
                                               optim={"lr": 1e-2, "lr_warmup_iters": 4},
                                               logging={"eval_interval": 20, "eval_iters": 2}))
    train(config)
    losses = train_losses(tmp_path / "metrics.jsonl")
    assert statistics.fmean(losses[-5:]) < statistics.fmean(losses[:5]) - 1.5  # from ~9 (ln 8192) down
    evals = [r["eval_loss"] for r in read_metrics(tmp_path / "metrics.jsonl") if "eval_loss" in r]
    assert len(evals) == 2 and evals[-1] < evals[0]


def test_resume_on_the_sample_equals_uninterrupted(sample_blend, tmp_path):
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    reference.mkdir(), resumed.mkdir()
    train(load_config(None, blend_overrides(reference, sample_blend)))
    save = str(resumed / "ckpt")
    train(load_config(None, blend_overrides(resumed, sample_blend, training={"exit_interval": 3},
                                            checkpoint={"save": save})))
    train(load_config(None, blend_overrides(resumed, sample_blend, checkpoint={"save": save, "load": save})))
    timing = ("tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu")
    strip = lambda path: [{k: v for k, v in r.items() if k not in timing} for r in read_metrics(path)]  # noqa: E731
    assert strip(resumed / "metrics.jsonl") == strip(reference / "metrics.jsonl")


def test_resume_against_another_blend_is_refused_unless_overridden(sample_blend, tmp_path):
    save = str(tmp_path / "ckpt")
    train(load_config(None, blend_overrides(tmp_path, sample_blend, training={"train_iters": 2},
                                            checkpoint={"save": save})))
    changed = blend_overrides(tmp_path, sample_blend, data={"seq_length": 32}, training={"train_iters": 3},
                              checkpoint={"load": save})
    with pytest.raises(UserError, match="another blend") as refused:
        train(load_config(None, changed))
    assert "--override-blend-check" in str(refused.value)
    changed["data"]["override_blend_check"] = True
    assert train(load_config(None, changed)).iteration == 3


def test_first_batch_is_what_the_logged_corpus_blend_command_prints(sample_blend, tmp_path):
    config = load_config(None, blend_overrides(tmp_path, sample_blend, training={"global_batch_size": 4}))
    data = build_data(config, open_data(config), ParallelState(torch.device("cpu")), 4)
    batches = [batch for batch, _ in zip(data.loaders["train"], range(2))]  # 2 micro-batches of 2 = one step
    command = data.reproduce["train"].split()
    assert command[:3] == ["corpus", "blend", str(sample_blend)] and command[-2:] == ["0:4", "--json"]
    shown = run_cli("corpus", *command[1:], env={"BLENDFORGE_CACHE_DIR": str(tmp_path / "maps")})
    rows = [json.loads(line)["tokens"] for line in shown.stdout.splitlines() if line.startswith("{")]
    expected = [row.tolist() + [label[-1].item()] for batch in batches
                for row, label in zip(batch["tokens"], batch["labels"])]
    assert rows == expected


def test_data_path_with_megatron_files_and_a_too_small_vocabulary(sample_blend, tmp_path):
    """Files without a .meta.json (as Megatron writes them) need --vocab-size; ids beyond it are refused
    at the first batch with the id and the fix."""
    data = sample_blend.parent / "data"
    for suffix in (".bin", ".idx"):
        shutil.copy(data / f"web_text_document{suffix}", tmp_path / f"web{suffix}")
    overrides = blend_overrides(tmp_path, sample_blend, data={"blend": None, "data_path": [str(tmp_path / "web")],
                                                              "split": "90,10,0"})
    with pytest.raises(ConfigError, match="give the model's vocabulary with --vocab-size"):
        train(load_config(None, overrides))
    overrides["model"]["vocab_size"] = 1000
    with pytest.raises(ConfigError, match=r"token id \d+ but the model's vocabulary is 1024"):
        train(load_config(None, overrides))
    overrides["model"]["vocab_size"] = 8192
    overrides["checkpoint"] = {"save": str(tmp_path / "ckpt")}
    assert train(load_config(None, overrides)).iteration == 8
    assert (tmp_path / "ckpt" / "data_path_blend.yaml").exists()


def test_tokenizer_bigger_than_model_and_invalid_blend(sample_blend, tmp_path):
    with pytest.raises(ConfigError, match="tokenizer has 8192 ids but --vocab-size is 4000"):
        train(load_config(None, blend_overrides(tmp_path, sample_blend, model={"vocab_size": 4000})))
    broken = sample_blend.parent / "broken.yaml"
    broken.write_text(sample_blend.read_text().replace("seed: 1234", "seed: 1234\nsed: 1"))
    result = invoke_cli("trainer", "run", "--blend", str(broken), "--train-iters", "2")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "broken.yaml" in result.stderr and "sed" in result.stderr


#: A short run whose loss falls on the sample: from ~9 (ln 8192) by about half a unit in 8 steps; a path that does
#: not learn (labels off by one, a mask hiding the loss) stays near 9.
LEARNS = {"training": {"train_iters": 8}, "optim": {"lr": 1e-2, "lr_warmup_iters": 2}}


def test_document_masked_training_on_the_sample(sample_blend, tmp_path):
    config = load_config(None, blend_overrides(tmp_path, sample_blend, **LEARNS,
                                               data={"reset_attention_mask": True, "reset_position_ids": True,
                                                     "eod_mask_loss": True}))
    data = build_data(config, open_data(config), ParallelState(torch.device("cpu")), 4)
    batch = next(iter(data.loaders["train"]))
    assert "cu_seqlens" in batch and int(batch["position_ids"].min()) == 0
    train(config)
    losses = train_losses(tmp_path / "metrics.jsonl")
    assert len(losses) == 8 and statistics.fmean(losses[-2:]) < losses[0] - 0.25


def test_the_document_mask_is_what_changes_the_losses(tmp_path):
    """Mock samples pack several short documents each: with positions reset and EOD losses masked alike, only the
    attention mask separates the two runs (same weights, same tokens), so their losses must differ."""
    reset = {"reset_position_ids": True, "eod_mask_loss": True}
    curves = []
    for name, data in (("masked", {"reset_attention_mask": True, **reset}), ("across", reset)):
        train(tiny_config(tmp_path / name, data=data))
        curves.append(train_losses(tmp_path / name / "metrics.jsonl"))
    assert len(curves[0]) == 8 and abs(curves[0][0] - curves[1][0]) > 1e-4


def test_best_fit_blend_trains_with_document_masking(sample_blend, tmp_path, caplog):
    packed = sample_blend.parent / "packed.yaml"
    packed.write_text(sample_blend.read_text().replace("seed: 1234", "seed: 1234\npacking: best_fit"))
    config = load_config(None, blend_overrides(tmp_path, packed, **LEARNS))
    data = build_data(config, open_data(config), ParallelState(torch.device("cpu")), 4)
    batch = next(iter(data.loaders["train"]))
    assert data.document_masked and "best-fit packed" in data.description
    assert "cu_seqlens" in batch  # with no --reset-* flag given
    with caplog.at_level("INFO"):
        train(config)
    losses = train_losses(tmp_path / "metrics.jsonl")
    assert len(losses) == 8 and statistics.fmean(losses[-2:]) < losses[0] - 0.25


def test_export_carries_the_data_tokenizer(sample_blend, tmp_path):
    import transformers
    from tokenizers import Tokenizer

    from trainer.checkpoint.export import export_hf

    save = tmp_path / "ckpt"
    train(load_config(None, blend_overrides(tmp_path, sample_blend, training={"train_iters": 2},
                                            checkpoint={"save": str(save)})))
    files = export_hf(save, tmp_path / "hf", dtype="float32")
    assert {"tokenizer.json", "tokenizer_config.json", "config.json"} <= set(files)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    text = "def answer(x):\n    return 42  # the docs\n"
    reference = Tokenizer.from_file(str(sample_blend.parent.parent / "examples" / "tokenizer.json"))
    assert tokenizer(text)["input_ids"] == reference.encode(text).ids
    assert tokenizer.eos_token_id == 0
    model = transformers.LlamaForCausalLM.from_pretrained(tmp_path / "hf")
    assert model.config.eos_token_id == 0 and model.config.vocab_size == 8192


def megatron_copy(sample_blend, folder) -> str:
    """The sample's web file without its .meta.json, as Megatron writes it."""
    data = sample_blend.parent / "data"
    for suffix in (".bin", ".idx"):
        shutil.copy(data / f"web_text_document{suffix}", folder / f"web{suffix}")
    return str(folder / "web")


def test_the_vocabulary_of_megatron_files_comes_from_the_blend_or_the_tokenizer_flags(sample_blend, tmp_path):
    web, tokenizer = megatron_copy(sample_blend, tmp_path), sample_blend.parent.parent / "examples" / "tokenizer.json"
    blend = tmp_path / "megatron.yaml"
    blend.write_text(f"seq_length: 64\nsplit: '90,10,0'\ntokenizer: {{kind: huggingface, path: {tokenizer}}}\n"
                     f"sources: [{{name: web, prefix: {web}}}]\n")
    cpu = ParallelState(torch.device("cpu"))
    blend_config = load_config(None, blend_overrides(tmp_path, blend))
    from_blend = build_data(blend_config, open_data(blend_config), cpu, 4)
    flags = {"blend": None, "data_path": [web], "split": "90,10,0", "tokenizer_type": "HuggingFaceTokenizer",
             "tokenizer_model": str(tokenizer)}
    flags_config = load_config(None, blend_overrides(tmp_path, sample_blend, data=flags))
    from_flags = build_data(flags_config, open_data(flags_config), cpu, 4)
    assert from_blend.vocab_size == from_flags.vocab_size == 8192
    assert from_flags.tokenizer["type"] == "HuggingFaceTokenizer"


def test_tokenizer_flags_that_contradict_the_sidecars_are_refused_before_any_index_map(sample_blend, tmp_path):
    other = tmp_path / "other.json"
    other.write_text((sample_blend.parent.parent / "examples" / "tokenizer.json").read_text()
                     .replace("<|endoftext|>", "<|end|>"))
    flags = ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(other)]
    result = run_cli("trainer", "run", "--blend", str(sample_blend), "--train-iters", "2", *flags,
                     "--data-cache-path", str(tmp_path / "maps"), check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "--tokenizer-model/--vocab-file: not the tokenizer the data was made with" in result.stderr
    assert not list((tmp_path / "maps").glob("gpt-*"))


def test_megatron_files_take_the_eod_of_the_named_tokenizer(sample_blend, tmp_path):
    web, tokenizer = megatron_copy(sample_blend, tmp_path), sample_blend.parent.parent / "examples" / "tokenizer.json"
    blend = tmp_path / "megatron.yaml"
    blend.write_text(f"seq_length: 64\nsplit: '90,10,0'\ntokenizer: {{kind: huggingface, path: {tokenizer}}}\n"
                     f"samples: {{eod_mask_loss: true}}\nsources: [{{name: web, prefix: {web}}}]\n")
    assert open_data(load_config(None, blend_overrides(tmp_path, blend))).eod_id == 0  # <|endoftext|>
    result = run_cli("trainer", "run", "--data-path", web, "--split", "90,10,0", "--seq-length", "32",
                     "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(tokenizer), "--eod-mask-loss",
                     "--reset-position-ids", "--reset-attention-mask", *TINY_FLAGS, "--save", str(tmp_path / "ckpt"),
                     "--data-cache-path", str(tmp_path / "maps"))
    assert "EOD 0," in result.stderr and "stopped at step 2 (completed)" in result.stdout
    assert "eod_id: 0" in (tmp_path / "ckpt" / "data_path_blend.yaml").read_text()  # what corpus blend reproduces


def null_tokenized(prefix, vocab_size: int | None):
    """Random ids below 1000 as NullTokenizer text of ``--vocab-size vocab_size`` becomes, with that sidecar (None:
    no sidecar, as Megatron writes it)."""
    if vocab_size is None:
        return write_random(prefix, 200, seed=5, meta=None)
    described = build_tokenizer(TokenizerConfig("NullTokenizer", vocab_size=vocab_size)).describe()
    return write_random(prefix, 200, seed=5, meta={"tokenizer": described, "vocab_size": vocab_size + 1,
                                                   "eod_id": vocab_size})


def test_null_tokenizer_takes_its_size_from_vocab_size_as_megatron(tmp_path, caplog):
    data = null_tokenized(tmp_path / "null", None)
    flags = ["--data-path", str(data), "--split", "90,10,0", "--seq-length", "32", "--tokenizer-type",
             "NullTokenizer", "--vocab-size", "1000", "--eod-mask-loss", *TINY_FLAGS]
    with caplog.at_level("INFO", logger="trainer"):
        result = invoke_cli("trainer", "run", *flags, "--data-cache-path", str(tmp_path / "maps"))
    assert "stopped at step 2 (completed)" in result.stdout, result.stderr
    assert "vocab 1024 (padded)" in caplog.text  # ids 0-999 and EOD 1000
    assert "vocab 1001, EOD 1000," in caplog.text


def test_tokenizer_flags_whose_eod_contradicts_the_sidecars_are_refused_before_any_index_map(tmp_path):
    data = null_tokenized(tmp_path / "null", 1000)
    result = invoke_cli("trainer", "run", "--data-path", str(data), "--split", "90,10,0", "--seq-length", "32",
                        "--tokenizer-type", "NullTokenizer", "--vocab-size", "2000", *TINY_FLAGS,
                        "--data-cache-path", str(tmp_path / "maps"))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "its EOD id is 2000, but the data's .meta.json records EOD id 1000" in result.stderr
    assert not list((tmp_path / "maps").glob("gpt-*"))
    agreeing = open_data(load_config(None, {"data": {"data_path": [str(data)], "seq_length": 32,
                                                     "tokenizer_type": "NullTokenizer"},
                                            "model": {"vocab_size": 1000}, "training": {"train_iters": 2}}))
    assert (agreeing.vocab_size, agreeing.eod_id) == (1001, 1000)


def test_tokenizer_flags_of_another_family_than_the_sidecars_are_refused_before_any_index_map(tmp_path):
    """Only the family differs here: a HuggingFace tokenizer named for data a NullTokenizer wrote."""
    data = null_tokenized(tmp_path / "null", 1000)
    tokenizer = EXAMPLES / "tokenizer.json"
    result = invoke_cli("trainer", "run", "--data-path", str(data), "--split", "90,10,0", "--seq-length", "32",
                        "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(tokenizer), *TINY_FLAGS,
                        "--data-cache-path", str(tmp_path / "maps"))
    assert result.returncode == 1 and "Traceback" not in result.stderr  # invoke_cli writes an escaped one there
    assert ("--tokenizer-type HuggingFaceTokenizer: the data was tokenized with NullTokenizer (its .meta.json says "
            "so)") in result.stderr
    assert not list((tmp_path / "maps").glob("gpt-*"))


def test_tokenizer_flags_of_another_type_of_the_sidecars_family_are_refused(tokenizer_files, tmp_path):
    """The one rule holding data to a tokenizer (corpus.tokenizers.match) is the stricter of those it replaced: a
    named --tokenizer-type must be the sidecars' exactly, not merely of its family (their ids and EOD can differ)."""
    from corpus.tokenize.config import TokenizeConfig
    from corpus.tokenize.run import tokenize

    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"text": f"document {i} of a few words"}) + "\n" for i in range(40)))
    written = TokenizerConfig("GPTSentencePieceTokenizer", model=tokenizer_files.spm_v1)
    tokenize(TokenizeConfig([str(source)], str(tmp_path / "spm"), written, append_eod=True, quiet=True))

    def opened(kind: str):
        return open_data(load_config(None, {
            "data": {"data_path": [str(tmp_path / "spm_text_document")], "split": "90,10,0", "seq_length": 8,
                     "tokenizer_type": kind, "tokenizer_model": tokenizer_files.spm_v1},
            "training": {"train_iters": 2}}))

    with pytest.raises(ConfigError, match=r"--tokenizer-type SentencePieceTokenizer: the data was tokenized with "
                                          r"GPTSentencePieceTokenizer \(its .meta.json says so\)"):
        opened("SentencePieceTokenizer")
    assert opened("GPTSentencePieceTokenizer").eod_id is not None
