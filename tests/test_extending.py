"""docs/extending.md followed for real: a toy blend key, a toy FP8 backend and a toy attention backend, each added
here the way the page says and nowhere else (no file of the project is edited), and each seen working end to end:
the key read, validated, overridden, saved and fingerprinted; the FP8 backend chosen by name, refused with the list
of those that can, and training a tiny model on CPU; the attention backend chosen by name and running the tiny
model's forward and backward passes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from corpus.blending import schema
from corpus.blending.resolve import resolve_blend
from corpus.blending.schema import CHANGES_SAMPLES, BlendConfig, SampleOptions, apply_overrides, dump_blend, load_blend
from corpus.core.errors import ConfigError
from tests.corpus.blending.blend_data import web_and_code, weighted_blend, write_blend
from tests.trainer.conftest import tiny_config
from trainer.config.schema import FP8Config
from trainer.fp8 import backends
from trainer.fp8.spec import BackendParts, FP8Backend
from trainer.model import attention
from trainer.model.attention import AttentionBackend, AttentionShape, select_backend
from trainer.run.loop import train


@dataclasses.dataclass(frozen=True)
class BlendWithToyKey(BlendConfig):
    """``BlendConfig`` as it is once a contributor adds the field below to it (the page's one step)."""

    toy_stride: int = dataclasses.field(default=1, metadata=CHANGES_SAMPLES)
    """A key that would change the samples (its module would read it)."""


@pytest.fixture
def toy_blend_key(monkeypatch):
    """The toy key added: the loader builds blends with it."""
    monkeypatch.setattr(schema, "BlendConfig", BlendWithToyKey)


def test_a_blend_key_is_read_validated_overridden_saved_and_fingerprinted(toy_blend_key, tmp_path: Path):
    web_and_code(tmp_path, 100)
    plain = write_blend(tmp_path / "plain.yaml", weighted_blend(0.7, 0.3, seq_length=32))
    toy = write_blend(tmp_path / "toy.yaml", weighted_blend(0.7, 0.3, seq_length=32, toy_stride=3))
    config = load_blend(toy)
    assert isinstance(config, BlendWithToyKey) and config.toy_stride == 3
    resolved = resolve_blend(config)
    assert resolved.config.toy_stride == 3
    at_default = resolve_blend(load_blend(plain))
    assert resolved.fingerprint != at_default.fingerprint
    assert apply_overrides(config, toy_stride=5).toy_stride == 5
    (tmp_path / "saved").mkdir()
    dump_blend(config, tmp_path / "saved" / "blend.yaml")
    assert yaml.safe_load((tmp_path / "saved" / "blend.yaml").read_text())["toy_stride"] == 3
    assert load_blend(tmp_path / "saved" / "blend.yaml").toy_stride == 3
    wrong = write_blend(tmp_path / "wrong.yaml", weighted_blend(0.7, 0.3, seq_length=32, toy_stride="many"))
    with pytest.raises(ConfigError, match="toy_stride"):
        load_blend(wrong)


def test_a_new_key_at_its_default_leaves_a_blend_fingerprint_as_it_was(tmp_path: Path, monkeypatch):
    web_and_code(tmp_path, 100)
    blend = write_blend(tmp_path / "blend.yaml", weighted_blend(0.7, 0.3, seq_length=32))
    before = resolve_blend(load_blend(blend)).fingerprint
    monkeypatch.setattr(schema, "BlendConfig", BlendWithToyKey)
    assert resolve_blend(load_blend(blend)).fingerprint == before


@dataclasses.dataclass(frozen=True)
class SamplesWithToyOption(SampleOptions):
    """``SampleOptions`` once a contributor adds a per-sample option to it."""

    toy_flag: bool = dataclasses.field(default=False, metadata=CHANGES_SAMPLES)
    """A sample option (its module would read it)."""


def test_a_sample_option_is_read_overridden_and_fingerprinted_only_when_set(monkeypatch, tmp_path: Path):
    web_and_code(tmp_path, 100)
    blend = write_blend(tmp_path / "blend.yaml", weighted_blend(0.7, 0.3, seq_length=32,
                                                                samples={"eod_mask_loss": True}))
    before = resolve_blend(load_blend(blend)).fingerprint
    monkeypatch.setattr(schema, "SampleOptions", SamplesWithToyOption)
    config = load_blend(blend)
    assert isinstance(config.samples, SamplesWithToyOption) and not config.samples.toy_flag
    assert resolve_blend(config).fingerprint == before
    flagged = apply_overrides(config, toy_flag=True)
    assert flagged.samples.toy_flag and resolve_blend(flagged).fingerprint != before
    (tmp_path / "saved").mkdir()
    dump_blend(flagged, tmp_path / "saved" / "blend.yaml")
    assert load_blend(tmp_path / "saved" / "blend.yaml").samples.toy_flag


class ToyGemm:
    """A local GEMM that counts its calls and computes the plain product."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return F.linear(x, weight)


@pytest.fixture
def toy_fp8_backend(monkeypatch):
    """The toy FP8 backend registered as the page says (its entry in ``BACKENDS``), on a CPU taken for an FP8 one
    (the hardware check is the only part that needs a GPU)."""
    gemm = ToyGemm()
    entry = FP8Backend("toy", None, ("tensorwise", "delayed"), lambda config, recipe, eligible: BackendParts(gemm),
                       compilable=True, summary="a counting linear")
    monkeypatch.setitem(backends.BACKENDS, "toy", entry)
    monkeypatch.setattr(backends, "check_hardware", lambda device: None)
    return entry, gemm


def test_an_fp8_backend_is_chosen_by_name_or_refused_with_those_that_can(toy_fp8_backend):
    entry, _ = toy_fp8_backend
    assert backends.resolve_backend("toy", "tensorwise") == (entry, "--fp8-backend toy")
    with pytest.raises(ConfigError, match="--fp8-backend toy cannot run --fp8-recipe blockwise; backends that can: "
                                          "scaled_mm, torchao, te"):
        backends.resolve_backend("toy", "blockwise")
    with pytest.raises(ConfigError, match=r"backends that can: scaled_mm, te( \(not installed here\))?, toy\."):
        backends.resolve_backend("torchao", "delayed")
    with pytest.raises(ConfigError, match="unknown; choose one of auto, torch, te, torchao, scaled_mm, toy"):
        backends.resolve_backend("fp4", "tensorwise")


def test_an_fp8_backend_trains_a_tiny_model(toy_fp8_backend, tmp_path: Path):
    _, gemm = toy_fp8_backend
    engine = backends.select_fp8(FP8Config(fp8_format="hybrid", fp8_recipe="tensorwise", fp8_backend="toy"),
                                 torch.device("cpu"), "plain")
    assert engine.gemm_name == "fp8_toy" and "backend toy (a counting linear; --fp8-backend toy)" in engine.description
    result = train(tiny_config(tmp_path, fp8={"fp8_format": "hybrid", "fp8_recipe": "tensorwise",
                                              "fp8_backend": "toy"}))
    assert result.iteration == 8 and gemm.calls > 0


def test_an_attention_backend_is_chosen_by_name_and_runs_a_tiny_model(monkeypatch, tmp_path: Path):
    calls = []

    def attend(q, k, v, cu_seqlens):
        calls.append(q.shape)
        return attention.BACKENDS["math"].attend(q, k, v, cu_seqlens)

    entry = AttentionBackend("toy", attend, cuda_only=False)
    monkeypatch.setitem(attention.BACKENDS, "toy", entry)
    shape = AttentionShape(2, 16, 4, 2, 8, torch.float32, False)
    assert select_backend("toy", torch.device("cpu"), shape) is entry
    with pytest.raises(ConfigError, match="choose auto or one of cudnn, flash_attn, flash, efficient, math, toy"):
        select_backend("fp4", torch.device("cpu"), shape)
    result = train(tiny_config(tmp_path, model={"attention_backend": "toy"}))
    assert result.iteration == 8 and calls
