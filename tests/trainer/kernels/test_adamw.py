"""The one-launch AdamW update (trainer.kernels.adamw) against the tensor-code update: Triton's interpreter on
the CPU, the real kernel on CUDA."""

from __future__ import annotations

import textwrap

import pytest

from tests.trainer.kernels.triton_support import INTERPRETER_AND_CUDA, interpreter_check, run_kernel_check

KERNEL_CHECK = interpreter_check(textwrap.dedent("""
    import itertools
    import torch
    from trainer.kernels.adamw import Work, hyperparameters, update_slice
    from trainer.kernels.triton_kernels.adamw import update
    group = {"lr": 3e-3, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}
    torch.manual_seed(0)
    bf16, fp32 = torch.bfloat16, torch.float32
    # one launch per (dtypes, alignment): bf16 weights with bf16 or fp32 moments and bf16 or fp32 gradients
    # (main_grad), fp32 weights, a view at an odd offset (not 16-byte aligned); counts that are multiples of
    # 16 (16-byte loads, a partial last block) and counts that are not
    shapes = [(3000, bf16, bf16, bf16, bf16), (4099, bf16, bf16, bf16, bf16), (6160, bf16, bf16, bf16, bf16),
              (2048, bf16, bf16, fp32, fp32), (6160, bf16, fp32, bf16, bf16), (3001, bf16, fp32, bf16, bf16),
              (777, fp32, fp32, fp32, fp32), (5000, fp32, fp32, bf16, fp32), (4112, fp32, fp32, fp32, fp32)]
    tensors = []
    for numel, dtype, grad, first, second in shapes:
        tensors.append([torch.randn(numel, device=DEVICE).to(dtype), torch.randn(numel, device=DEVICE).to(grad),
                        torch.randn(numel, device=DEVICE).to(first), torch.rand(numel, device=DEVICE).to(second)])
    tensors.append([t[1:] for t in (torch.rand(1001, device=DEVICE).bfloat16() for _ in range(4))])
    hyper = hyperparameters(group, 7)
    # the default launch shape, and one where every tensor spans several programs and loop iterations
    launch_shapes = [{}, {"block": 256, "blocks_per_program": 3, "num_warps": 4}]
    for grad_scale, launch_shape in itertools.product((None, torch.tensor(2.5, device=DEVICE)), launch_shapes):
        ours = [[t.clone() for t in ts] for ts in tensors]
        reference = [[t.clone() for t in ts] for ts in tensors]
        update([Work(*ts, hyper, 1000 * i + 12345) for i, ts in enumerate(ours)], grad_scale, None, **launch_shape)
        for i, ts in enumerate(reference):
            update_slice(*ts, torch.tensor(hyper, device=DEVICE), grad_scale, 1000 * i + 12345)
        for mine, theirs, before in zip(ours, reference, tensors):
            assert torch.equal(mine[1], before[1])  # the gradient is read, not written
            for got, expected in zip(mine, theirs):
                assert got.dtype == expected.dtype
                if got.dtype == fp32:  # the same arithmetic but for the compilers' fused multiply-adds
                    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7)
                    continue
                # the same random bits: equal but where an fp32 ulp puts a value across a rounding boundary
                differ = got != expected
                assert differ.float().mean() < 0.01, differ.float().mean()
                torch.testing.assert_close(got.float(), expected.float(), rtol=2 ** -7, atol=1e-30)
    # weight amaxes: raised to the largest updated weight of the tensors given one (every other one of each
    # launch), over every program of a tensor; untouched by a skipped launch
    for launch_shape in launch_shapes:
        ours = [[t.clone() for t in ts] for ts in tensors]
        amaxes = torch.zeros(len(ours), device=DEVICE)
        update([Work(*ts, hyper, 1000 * i + 12345, amaxes[i] if i % 2 else None) for i, ts in enumerate(ours)],
               None, None, **launch_shape)
        largest = [ts[0].abs().max().float() if i % 2 else 0.0 for i, ts in enumerate(ours)]
        assert amaxes.tolist() == torch.tensor(largest).tolist()
    skipped = [[t.clone() for t in ts] for ts in tensors]
    amaxes = torch.zeros(len(skipped), device=DEVICE)
    update([Work(*ts, hyper, 7, amaxes[i]) for i, ts in enumerate(skipped)], None, torch.tensor(1.0, device=DEVICE))
    assert all(torch.equal(a, b) for ts, before in zip(skipped, tensors) for a, b in zip(ts, before))
    assert not amaxes.any()
    print("ok")
"""))


@pytest.mark.parametrize("interpret", INTERPRETER_AND_CUDA)
def test_triton_update_matches_the_tensor_code(interpret):
    """What CUDA runs (one launch for every parameter), by Triton's interpreter on the CPU and compiled on CUDA:
    the tensor-code update's results and random bits, for every mix of fp32 and bf16 weights, gradients and
    moments; the updated weights' amaxes where asked for."""
    run_kernel_check(KERNEL_CHECK, interpret)
