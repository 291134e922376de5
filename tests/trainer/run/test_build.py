"""build_run's precision plumbing (--main-params-dtype bf16 gives bf16 weights, needing bf16 compute) and the
checks it makes before any index map is built."""

from __future__ import annotations

import pytest
import torch

from corpus.core.errors import ConfigError
from tests.conftest import invoke_cli
from tests.corpus.blending.blend_data import write_random
from tests.trainer.conftest import tiny_config
from trainer.run.build import build_run


def test_bf16_main_params_are_the_models_own_weights(tmp_path):
    run = build_run(tiny_config(tmp_path, optim={"main_params_dtype": "bf16"}, training={"precision": "bf16"}))
    assert {p.dtype for p in run.model.parameters()} == {torch.bfloat16}
    assert {b.dtype for b in run.model.buffers()} == {torch.float32}  # tables (and FP8 scales) stay precise
    reference = build_run(tiny_config(tmp_path, training={"precision": "bf16"}))
    for ours, fp32 in zip(run.model.parameters(), reference.model.parameters()):
        assert fp32.dtype == torch.float32 and torch.equal(ours, fp32.bfloat16())  # the same init, rounded


def test_bf16_main_params_without_bf16_compute_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="--main-params-dtype bf16 .* add --bf16"):
        build_run(tiny_config(tmp_path, optim={"main_params_dtype": "bf16"}))


def test_megatron_files_without_a_vocabulary_stop_before_any_index_map(tmp_path):
    web = write_random(tmp_path / "web", 200, seed=3, meta=None)  # no .meta.json, as Megatron writes it
    result = invoke_cli("trainer", "run", "--data-path", str(web), "--split", "90,10,0", "--seq-length", "32",
                        "--preset", "tiny", "--train-iters", "2", "--data-cache-path", str(tmp_path / "maps"))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "records no tokenizer vocabulary" in result.stderr and "--vocab-size" in result.stderr
    assert not list((tmp_path / "maps").glob("gpt-*"))
