"""LowPrecisionAdamW: torch's AdamW to fp32 rounding with fp32 moments; uniform hash bits and
unbiased stochastic rounding; bf16 moments and bf16 weights that keep tracking fp32 ones, where round-to-nearest
bf16 weights stall; moments keep their dtype through a state-dict round trip; bit-exact resume with bf16 moments
and weights."""

from __future__ import annotations

import torch

from tests.trainer.conftest import read_metrics, tiny_config
from trainer.kernels.adamw import random_bits, stochastic_round_to_bf16
from trainer.optim import adamw
from trainer.optim.adamw import LowPrecisionAdamW
from trainer.run.loop import train

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


def test_hash_bits_are_uniform_and_distinct():
    bits = random_bits(1 << 16, 12345, torch.device("cpu"))
    assert bits.unique().numel() == bits.numel()  # a bijection of consecutive positions
    assert bits.min() >= 0 and bits.max() < 2**32
    for field in (bits & 0xFFFF, bits >> 16):  # the two 16-bit noises a position gives
        counts = torch.bincount(field >> 12, minlength=16).float()  # 16 bins of 4,096 expected each
        assert ((counts - 4096).abs() < 5 * 64).all()  # within 5 sigma
    assert torch.equal(bits, random_bits(1 << 16, 12345, torch.device("cpu")))  # no generator state


def test_stochastic_rounding_is_unbiased_and_lands_on_a_neighbour():
    x = torch.full((200_000,), 1.0 + 2 ** -10)  # a quarter of the way from 1 to the next bf16 value (1 + 2^-7)
    noise = random_bits(x.numel(), 7, torch.device("cpu")) & 0xFFFF
    rounded = stochastic_round_to_bf16(x, noise).float()
    assert set(rounded.unique().tolist()) == {1.0, 1.0 + 2 ** -7}
    assert abs(rounded.mean().item() - x[0].item()) < 2e-5
    negative = stochastic_round_to_bf16(-x, noise).float()
    assert abs(negative.mean().item() + x[0].item()) < 2e-5


def test_recorded_weight_amaxes_are_the_updated_weights_largest_magnitudes(monkeypatch):
    """``record_weight_amaxes``: each step raises the given tensors (zeroed by their owner between steps) to the
    largest magnitude of those parameters' updated weights, over every slice of a parameter larger than one;
    other parameters record nothing, and a skipped step leaves them as they were."""
    monkeypatch.setattr(adamw, "SLICE", 128)  # the 300-element weight in three slices
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(n).bfloat16()) for n in (300, 40, 50)]
    optimizer = LowPrecisionAdamW(params, 1e-2, (0.9, 0.95), 1e-8, 0.1, torch.bfloat16, torch.bfloat16)
    amaxes = torch.zeros(2)
    optimizer.record_weight_amaxes({params[0]: amaxes[0], params[2]: amaxes[1]})
    for step in range(3):
        amaxes.zero_()
        for param in params:
            param.grad = torch.randn_like(param)
        with torch.no_grad():
            params[0][250] = 5.0 + step  # the largest weight in the last slice
        optimizer.step()
        assert amaxes.tolist() == [params[0].abs().max().item(), params[2].abs().max().item()]
        assert amaxes[0] > 4.9 + step
    amaxes.zero_()
    optimizer.found_inf = torch.tensor(1.0)
    optimizer.step()
    assert not amaxes.any()


def test_bf16_moments_track_fp32_ones():
    bf16, low = trajectory(lambda p: LowPrecisionAdamW(p, **HYPER, exp_avg_dtype=torch.bfloat16,
                                                       exp_avg_sq_dtype=torch.bfloat16), steps=200)
    fp32, _ = trajectory(lambda p: torch.optim.AdamW(p, **HYPER, foreach=False), steps=200)
    state = low.state[bf16[0]]
    assert state["exp_avg"].dtype == state["exp_avg_sq"].dtype == torch.bfloat16
    for mine, theirs in zip(bf16, fp32):
        assert (mine - theirs).abs().max() < 0.02 * theirs.abs().max()


def test_bf16_weights_track_fp32_ones_where_round_to_nearest_stalls():
    """Small updates (lr 1e-4 on weights ~1: below half a bf16 ulp) vanish when bf16 weights are rounded to
    nearest, as torch's AdamW on bf16 parameters does; stochastic rounding keeps them in expectation."""
    slow = {**HYPER, "lr": 1e-4, "weight_decay": 0.0}

    def bf16_trajectory(optimizer_for):
        torch.manual_seed(0)
        param = torch.nn.Parameter((1.0 + torch.rand(4096)).bfloat16())
        optimizer = optimizer_for([param])
        for _ in range(100):
            param.grad = torch.ones_like(param)  # every step moves each weight down by ~lr
            optimizer.step()
        return param.detach().float(), optimizer

    start = (1.0 + torch.rand(4096, generator=torch.Generator().manual_seed(0))).bfloat16().float()
    ours, optimizer = bf16_trajectory(lambda p: LowPrecisionAdamW(p, **slow, exp_avg_dtype=torch.bfloat16,
                                                                  exp_avg_sq_dtype=torch.bfloat16))
    nearest, _ = bf16_trajectory(lambda p: torch.optim.AdamW(p, **slow))
    assert optimizer.state[optimizer.param_groups[0]["params"][0]]["exp_avg"].dtype == torch.bfloat16
    expected = 100 * 1e-4  # Adam's normalised step is ~lr for a constant gradient
    assert abs((start - ours).mean().item() - expected) < 0.05 * expected
    assert (start - nearest).abs().max().item() == 0.0  # every update rounded away


def test_loaded_moments_keep_their_dtype_beside_bf16_weights():
    """torch's load_state_dict casts state to the parameter's dtype: fp32 moments of bf16 weights would be
    rounded to bf16 on every resume."""
    param = torch.nn.Parameter(torch.randn(64).bfloat16())
    optimizer = LowPrecisionAdamW([param], **HYPER, exp_avg_dtype=torch.float32, exp_avg_sq_dtype=torch.float32)
    param.grad = torch.randn(64).bfloat16()
    optimizer.step()
    saved = optimizer.state_dict()
    fresh = LowPrecisionAdamW([param], **HYPER, exp_avg_dtype=torch.float32, exp_avg_sq_dtype=torch.float32)
    fresh.load_state_dict(saved)
    for key in ("exp_avg", "exp_avg_sq"):
        assert fresh.state[param][key].dtype == torch.float32
        assert torch.equal(fresh.state[param][key], saved["state"][0][key])


def test_resume_with_bf16_moments_and_weights_is_bit_exact(tmp_path):
    """The stochastic rounding's bits are a hash of the step and position: a resumed run draws the same."""
    low = {"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16", "main_params_dtype": "bf16"}
    bf16 = {"precision": "bf16"}
    train(tiny_config(tmp_path / "whole", optim=low, training=bf16))
    save = str(tmp_path / "ckpt")
    first = train(tiny_config(tmp_path / "split", optim=low, training={**bf16, "train_iters": 8, "exit_interval": 4},
                              checkpoint={"save": save}))
    assert first.iteration == 4
    train(tiny_config(tmp_path / "split", optim=low, training=bf16, checkpoint={"save": save, "load": save}))
    losses = [[r["loss"] for r in read_metrics(path / "metrics.jsonl") if "loss" in r]
              for path in (tmp_path / "whole", tmp_path / "split")]
    assert losses[0] == losses[1] and len(losses[0]) == 8
