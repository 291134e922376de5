"""The fused loss's one-pass chunk kernel (trainer.loss_kernel) against the formula it replaces: Triton's
interpreter on the CPU, the real kernel on CUDA."""

from __future__ import annotations

import textwrap

import pytest

from tests.trainer.triton_support import INTERPRETER_AND_CUDA, run_kernel_check

KERNEL_CHECK = textwrap.dedent("""
    import torch
    from trainer.cross_entropy import chunk_loss_and_grad
    from trainer.loss_kernel import MAX_VOCAB, one_pass_chunk_loss
    torch.manual_seed(0)
    # a vocabulary that is not a power of two (masked columns), one that is; large logits (softmax's max shift),
    # masked tokens, labels at both ends of the row
    for tokens, vocab, warps in [(37, 1000, 4), (16, 2048, 8)]:
        logits = (torch.randn(tokens, vocab, device=DEVICE) * 8 + 30).bfloat16()
        labels = torch.randint(0, vocab, (tokens,), device=DEVICE)
        labels[0], labels[1] = 0, vocab - 1
        mask = (torch.rand(tokens, device=DEVICE) > 0.3).float()
        want_loss, want_grad = chunk_loss_and_grad(logits, labels, mask, True)
        loss, grad = one_pass_chunk_loss(logits.clone(), labels, mask, False, num_warps=warps)
        assert grad is None
        torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-4)
        written = logits.clone()
        loss, grad = one_pass_chunk_loss(written, labels, mask, True, num_warps=warps)
        assert grad.data_ptr() == written.data_ptr() and grad.dtype == torch.bfloat16  # in place
        torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(grad.float(), want_grad.float(), rtol=2 ** -7, atol=2 ** -12)
        assert torch.equal(grad[mask == 0], torch.zeros_like(grad[mask == 0]))
        assert torch.equal(one_pass_chunk_loss(logits.clone(), labels, mask, True)[0], loss)  # the same sum every time
    try:
        one_pass_chunk_loss(torch.zeros(2, MAX_VOCAB + 1, device=DEVICE), labels[:2], mask[:2], True)
    except ValueError as error:
        assert str(MAX_VOCAB) in str(error)
    else:
        raise AssertionError("a row wider than MAX_VOCAB was accepted")
    print("ok")
""")


@pytest.mark.parametrize("interpret", INTERPRETER_AND_CUDA)
def test_one_pass_chunk_loss_matches_the_formula(interpret):
    """Loss sum and gradient as the compiled formula gives them, written over the logits."""
    run_kernel_check(KERNEL_CHECK, interpret)
