"""Clipping inside the optimizer step: the fused AdamW's and ours equal scaling the gradients first; a
non-finite step is skipped on the device."""

from __future__ import annotations

import pytest
import torch

from trainer.optim.adamw import LowPrecisionAdamW
from trainer.optim.optimizer import clip_divisor, clipped_step


def test_clip_divisor_is_clip_grad_norms_rule():
    assert clip_divisor(torch.tensor(0.5), 1.0) == 1.0 and clip_divisor(torch.tensor(3.0), float("inf")) is None
    assert float(clip_divisor(torch.tensor(4.0), 1.0)) == pytest.approx(4.0)


def _params(seed: int = 0) -> list[torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(shape, generator=generator)) for shape in ((7, 5), (5,), (3, 4, 2))]
    for param in params:
        param.grad = torch.randn(param.shape, generator=generator)
    return params


#: Adam is blind to a gradient's scale but through eps: a large one makes a missed clipping factor show.
HYPER = {"lr": 0.1, "weight_decay": 0.05, "eps": 0.5}


def _scaled_first(params: list[torch.nn.Parameter], factor: float) -> list[torch.Tensor]:
    reference = torch.optim.AdamW(params, **HYPER, foreach=False)
    for param in params:
        param.grad.mul_(factor)
    reference.step()
    return [param.detach().clone() for param in params]


BUILDERS = pytest.mark.parametrize("build", [
    lambda params: torch.optim.AdamW(params, **HYPER, fused=True),
    lambda params: LowPrecisionAdamW(params, HYPER["lr"], (0.9, 0.999), HYPER["eps"], HYPER["weight_decay"],
                                     torch.float32, torch.float32),
    lambda params: torch.optim.AdamW(params, **HYPER, foreach=True),
], ids=["fused", "low-precision", "foreach"])

FINITE = torch.tensor(True)


@BUILDERS
def test_clipped_step_equals_scaling_the_gradients_first(build):
    expected = _scaled_first(_params(), 0.3)
    params = _params()
    optimizer = build(params)
    clipped_step(optimizer, torch.tensor(1 / 0.3 - 1e-6), 1.0, FINITE)  # clip_divisor 1 / 0.3
    assert not hasattr(optimizer, "grad_scale") and not hasattr(optimizer, "found_inf")  # not left for later steps
    unclipped = _scaled_first(_params(), 1.0)
    for got, want, wrong in zip(params, expected, unclipped):
        torch.testing.assert_close(got.detach(), want, rtol=1e-5, atol=1e-6)
        assert (want - wrong).abs().max() > 1e-3  # the case can tell a clipped step from an unclipped one


@BUILDERS
def test_a_norm_below_the_limit_or_no_limit_leaves_the_gradients_alone(build):
    expected = _scaled_first(_params(), 1.0)
    for norm, max_norm in ((0.5, 1.0), (50.0, float("inf"))):
        params = _params()
        clipped_step(build(params), torch.tensor(norm), max_norm, FINITE)
        for got, want in zip(params, expected):
            torch.testing.assert_close(got.detach(), want, rtol=1e-5, atol=1e-6)


@BUILDERS
def test_a_non_finite_step_changes_nothing(build):
    params = _params()
    before = [param.detach().clone() for param in params]
    optimizer = build(params)
    clipped_step(optimizer, torch.tensor(float("nan")), 1.0, torch.tensor(False))
    for got, want in zip(params, before):
        assert torch.equal(got.detach(), want)
    assert all(not torch.count_nonzero(state["exp_avg"]) for state in optimizer.state.values())
