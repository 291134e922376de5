"""--compile blocks: compiled blocks train like eager ones, keep their state-dict keys, and the choice rule."""

from __future__ import annotations

import pytest
import torch

from tests.trainer.conftest import read_metrics, tiny_config
from trainer.compile import should_compile
from trainer.errors import ConfigError
from trainer.loop import train


def test_the_choice_rule():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert not should_compile("auto", cpu, None) and should_compile("auto", cuda, None)
    assert not should_compile("auto", cuda, "a reason") and not should_compile("off", cuda, None)
    assert should_compile("blocks", cpu, None)
    with pytest.raises(ConfigError, match="--compile blocks: the te FP8 backend cannot be traced"):
        should_compile("blocks", cuda, "the te FP8 backend cannot be traced")


def test_compiled_blocks_train_like_eager_and_checkpoints_load_into_eager_runs(tmp_path):
    save = str(tmp_path / "ckpt")
    compiled = tiny_config(tmp_path / "compiled", model={"compile": "blocks"}, checkpoint={"save": save},
                           training={"train_iters": 4})
    train(compiled)
    train(tiny_config(tmp_path / "eager", training={"train_iters": 4}))
    losses = [[r["loss"] for r in read_metrics(path / "metrics.jsonl") if "loss" in r]
              for path in (tmp_path / "compiled", tmp_path / "eager")]
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-4, atol=0)
    resumed = train(tiny_config(tmp_path / "resumed", model={"compile": "off"}, training={"train_iters": 6},
                                checkpoint={"load": save}))
    assert resumed.iteration == 6
