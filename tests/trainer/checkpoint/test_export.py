"""``trainer export --hf``: transformers' LlamaForCausalLM loads the export and gives our logits."""

from __future__ import annotations

import json
import os

import pytest
import torch
import transformers  # a test dependency (pyproject's "test" extra): the reference loader of the export

from corpus.core.disk import OutputError
from tests.conftest import invoke_cli, run_cli
from tests.trainer.conftest import tiny_config
from trainer.checkpoint import export
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
