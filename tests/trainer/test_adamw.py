"""LowPrecisionAdamW: torch's AdamW to fp32 rounding with fp32 moments, eager and compiled; unbiased stochastic rounding; bf16 moments
that keep tracking fp32 ones; bit-exact resume with bf16 moments."""

from __future__ import annotations

import torch

from tests.trainer.conftest import read_metrics, tiny_config
from trainer import adamw
from trainer.adamw import LowPrecisionAdamW, stochastic_round_to_bf16
from trainer.loop import train

HYPER = {"lr": 1e-2, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}


def trajectory(optimizer_for, steps: int = 20) -> list[torch.Tensor]:
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(37, 5)), torch.nn.Parameter(torch.randn(11))]
    optimizer = optimizer_for(params)
    for step in range(steps):
        generator = torch.Generator().manual_seed(step)
        for p in params:
            p.grad = torch.randn(p.shape, generator=generator)
        optimizer.step()
    return params, optimizer


def test_fp32_moments_are_torch_adamw_exactly(monkeypatch):
    monkeypatch.setattr(adamw, "SLICE", 64)  # several slices per parameter
    ours, _ = trajectory(lambda p: LowPrecisionAdamW(p, **HYPER, exp_avg_dtype=torch.float32,
                                                     exp_avg_sq_dtype=torch.float32))
    reference, _ = trajectory(lambda p: torch.optim.AdamW(p, **HYPER, foreach=False))
    for mine, theirs in zip(ours, reference):
        torch.testing.assert_close(mine, theirs, rtol=1e-6, atol=1e-7)


def test_the_compiled_update_is_the_eager_one(monkeypatch):
    """What CUDA runs: one compiled update for every step and shape (the random draws of the rounding differ
    from eager ones, so bf16 moments are held to fp32 ones as in the eager case)."""
    monkeypatch.setattr(adamw, "SLICE", 64)
    compiled, _ = trajectory(lambda p: LowPrecisionAdamW(p, **HYPER, exp_avg_dtype=torch.float32,
                                                         exp_avg_sq_dtype=torch.float32, compiled=True))
    reference, _ = trajectory(lambda p: torch.optim.AdamW(p, **HYPER, foreach=False))
    for mine, theirs in zip(compiled, reference):
        torch.testing.assert_close(mine, theirs, rtol=1e-6, atol=1e-7)
    bf16, _ = trajectory(lambda p: LowPrecisionAdamW(p, **HYPER, exp_avg_dtype=torch.bfloat16,
                                                     exp_avg_sq_dtype=torch.bfloat16, compiled=True), steps=200)
    fp32, _ = trajectory(lambda p: torch.optim.AdamW(p, **HYPER, foreach=False), steps=200)
    for mine, theirs in zip(bf16, fp32):
        assert (mine - theirs).abs().max() < 0.02 * theirs.abs().max()


def test_stochastic_rounding_is_unbiased_and_lands_on_a_neighbour():
    x = torch.full((200_000,), 1.0 + 2 ** -10)  # a quarter of the way from 1 to the next bf16 value (1 + 2^-7)
    rounded = stochastic_round_to_bf16(x).float()
    assert set(rounded.unique().tolist()) == {1.0, 1.0 + 2 ** -7}
    assert abs(rounded.mean().item() - x[0].item()) < 2e-5
    negative = stochastic_round_to_bf16(-x).float()
    assert abs(negative.mean().item() + x[0].item()) < 2e-5


def test_bf16_moments_track_fp32_ones():
    bf16, low = trajectory(lambda p: LowPrecisionAdamW(p, **HYPER, exp_avg_dtype=torch.bfloat16,
                                                       exp_avg_sq_dtype=torch.bfloat16), steps=200)
    fp32, _ = trajectory(lambda p: torch.optim.AdamW(p, **HYPER, foreach=False), steps=200)
    state = low.state[bf16[0]]
    assert state["exp_avg"].dtype == state["exp_avg_sq"].dtype == torch.bfloat16
    for mine, theirs in zip(bf16, fp32):
        assert (mine - theirs).abs().max() < 0.02 * theirs.abs().max()


def test_resume_with_bf16_moments_is_bit_exact(tmp_path):
    """The stochastic rounding draws from torch's generator, whose state the checkpoint carries."""
    moments = {"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}
    train(tiny_config(tmp_path / "whole", optim=moments))
    save = str(tmp_path / "ckpt")
    first = train(tiny_config(tmp_path / "split", optim=moments, training={"train_iters": 8, "exit_interval": 4},
                              checkpoint={"save": save}))
    assert first.iteration == 4
    train(tiny_config(tmp_path / "split", optim=moments, checkpoint={"save": save, "load": save}))
    losses = [[r["loss"] for r in read_metrics(path / "metrics.jsonl") if "loss" in r]
              for path in (tmp_path / "whole", tmp_path / "split")]
    assert losses[0] == losses[1] and len(losses[0]) == 8
