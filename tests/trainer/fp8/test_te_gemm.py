"""The ``te`` backend's bookkeeping, on CPU with a stand-in for ``transformer_engine.pytorch`` (TE itself
installs only on GPU machines; its numerics are measured on the H200, bench/RESULTS.md)."""

from __future__ import annotations

import contextlib
import sys
import types

import pytest
import torch
import torch.nn.functional as F

from trainer.fp8.scaling import Eligibility
from trainer.fp8.te_gemm import TEGemm


class StandInLinear(torch.nn.Linear):
    """``te.Linear``'s constructor signature over a plain linear layer; counts instances."""

    made = 0

    def __init__(self, in_features: int, out_features: int, bias: bool, params_dtype: torch.dtype,
                 device: torch.device) -> None:
        super().__init__(in_features, out_features, bias=bias, dtype=params_dtype, device=device)
        StandInLinear.made += 1


@pytest.fixture()
def stand_in_te(monkeypatch):
    module = types.ModuleType("transformer_engine.pytorch")
    module.Linear = StandInLinear
    module.autocast = lambda enabled, recipe: contextlib.nullcontext()
    package = types.ModuleType("transformer_engine")
    package.pytorch = module
    monkeypatch.setitem(sys.modules, "transformer_engine", package)
    monkeypatch.setitem(sys.modules, "transformer_engine.pytorch", module)
    StandInLinear.made = 0
    return module


def test_one_te_linear_per_weight_sharing_it(stand_in_te):
    gemm = TEGemm(recipe=None, eligible=Eligibility(min_dim=16))
    first, second = (torch.nn.Parameter(torch.randn(32, 48)) for _ in range(2))
    x = torch.randn(16, 48)
    for _ in range(3):
        out = gemm(x, first) + gemm(x, second)
    assert StandInLinear.made == 2
    torch.testing.assert_close(out, F.linear(x, first) + F.linear(x, second))
    out.sum().backward()
    assert first.grad is not None and second.grad is not None  # gradients reach our own weights


def test_ineligible_shapes_stay_plain(stand_in_te):
    gemm = TEGemm(recipe=None, eligible=Eligibility(min_dim=64))
    weight = torch.nn.Parameter(torch.randn(32, 48))
    x = torch.randn(16, 48)
    torch.testing.assert_close(gemm(x, weight), F.linear(x, weight))
    assert StandInLinear.made == 0
