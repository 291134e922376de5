"""The fused chunked output layer + cross-entropy equals the plain logits path: loss and gradients."""

from __future__ import annotations

import pytest
import torch

from tests.trainer.kernels.triton_support import ON_CUDA
from trainer.model import fused_loss as cross_entropy
from trainer.model.fused_loss import chunk_rows, fused_token_losses
from trainer.model.gpt import masked_token_losses, token_loss_sum


def fused_loss_sum(*args) -> torch.Tensor:
    """The fused loss's sum of the masked token losses (what the plain path's ``token_loss_sum`` is)."""
    return fused_token_losses(*args)[0]


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 128 tokens, so the test's 2×200 tokens take four (the last one short)."""
    monkeypatch.setattr(cross_entropy, "CHUNK_ELEMENTS", 128 * 96)


def inputs(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(2, 200, 32, generator=generator, requires_grad=True)
    weight = (torch.randn(96, 32, generator=generator) * 0.3).requires_grad_()
    labels = torch.randint(0, 96, (2, 200), generator=generator)
    mask = (torch.rand(2, 200, generator=generator) > 0.2).float()
    return hidden, weight, labels, mask


def test_loss_and_gradients_equal_the_plain_path(small_chunks):
    assert chunk_rows(96) == 128
    hidden, weight, labels, mask = inputs()
    plain = token_loss_sum(hidden @ weight.T, labels, mask)
    (plain * 0.37).backward()
    expected = (plain.detach(), hidden.grad.clone(), weight.grad.clone())
    hidden.grad = weight.grad = None
    fused = fused_loss_sum(hidden, weight, labels, mask)
    (fused * 0.37).backward()
    torch.testing.assert_close((fused.detach(), hidden.grad, weight.grad), expected, rtol=1e-5, atol=1e-5)


def test_each_tokens_loss_is_kept_for_per_source_sums(small_chunks):
    """Per-source telemetry sums the fused loss's per-token terms: they are the plain path's, with no gradient,
    and add up to the loss it returns, over chunks and a short last one."""
    hidden, weight, labels, mask = inputs(3)
    total, losses = fused_token_losses(hidden, weight, labels, mask)
    assert losses.shape == labels.shape and not losses.requires_grad and total.requires_grad
    torch.testing.assert_close(losses, masked_token_losses(hidden @ weight.T, labels, mask).detach(), rtol=1e-5,
                               atol=1e-5)
    torch.testing.assert_close(losses.sum(), total.detach())
    assert (losses[mask == 0] == 0).all()


def test_without_gradients_only_the_loss_is_computed(small_chunks):
    hidden, weight, labels, mask = inputs(1)
    with torch.no_grad():
        fused = fused_loss_sum(hidden, weight, labels, mask)
        plain = token_loss_sum(hidden @ weight.T, labels, mask)
    torch.testing.assert_close(fused, plain, rtol=1e-6, atol=1e-5)


def test_under_bf16_autocast_it_stays_close_to_the_plain_path(small_chunks):
    hidden, weight, labels, mask = inputs(2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused = fused_loss_sum(hidden, weight, labels, mask)
        plain = token_loss_sum(hidden @ weight.T, labels, mask)
    assert fused.dtype == torch.float32
    torch.testing.assert_close(fused, plain, rtol=1e-3, atol=1e-3)


def test_bf16_weights_get_bf16_gradients_close_to_the_plain_path(small_chunks):
    """--main-params-dtype bf16: the weight gradient accumulates chunk by chunk inside the GEMM, in bf16, and the
    backward scales it in place; both gradients stay within bf16 rounding of the fp32 plain path's."""
    hidden, weight, labels, mask = inputs(4)
    plain = token_loss_sum(hidden @ weight.T, labels, mask)
    (plain * 0.37).backward()
    expected = (hidden.grad.clone(), weight.grad.clone())
    hidden_bf16 = hidden.detach().bfloat16().requires_grad_()
    weight_bf16 = weight.detach().bfloat16().requires_grad_()
    (fused_loss_sum(hidden_bf16, weight_bf16, labels, mask) * 0.37).backward()
    assert hidden_bf16.grad.dtype == weight_bf16.grad.dtype == torch.bfloat16
    for got, want in zip((hidden_bf16.grad, weight_bf16.grad), expected):
        torch.testing.assert_close(got.float(), want, rtol=0.05, atol=0.02 * want.abs().max().item())


def test_the_compiled_chunk_step_equals_the_eager_one():
    """What --compile runs (one reduction + one gradient pass) against the eager expressions, bf16 logits."""
    generator = torch.Generator().manual_seed(3)
    logits = (torch.randn(64, 96, generator=generator) * 4).to(torch.bfloat16)
    labels = torch.randint(0, 96, (64,), generator=generator)
    mask = (torch.rand(64, generator=generator) > 0.3).float()
    compiled = cross_entropy.compile_chunk_loss()
    for want_grad in (True, False):
        loss, grad = compiled(logits, labels, mask, want_grad)
        expected_loss, expected_grad = cross_entropy.chunk_loss_and_grad(logits, labels, mask, want_grad)
        torch.testing.assert_close(loss, expected_loss, rtol=1e-5, atol=1e-4)
        if want_grad:
            assert grad.dtype == torch.bfloat16
            torch.testing.assert_close(grad, expected_grad, rtol=1e-2, atol=1e-3)
        else:
            assert grad is None
    probabilities = torch.softmax(logits.float(), dim=-1)
    one_hot = torch.nn.functional.one_hot(labels, 96).float()
    torch.testing.assert_close(compiled(logits, labels, mask, True)[1].float(),
                               (probabilities - one_hot) * mask[:, None], rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                    (torch.float32, torch.bfloat16)], ids=["fp32", "bf16", "fp32-total-bf16-operands"])
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=ON_CUDA)])
def test_the_first_product_overwrites_whatever_the_total_held(dtypes, device):
    """The output layer's weight gradient starts as an uninitialised tensor: the first chunk's GEMM must ignore its
    contents (NaN here), the next ones add to it. On CUDA an fp32 total of bf16 operands (fp32 master weights) takes
    ``addmm``'s ``out_dtype`` path, the CPU a product and an add."""
    total_dtype, operand_dtype = dtypes
    generator = torch.Generator().manual_seed(5)
    a, b, c = (torch.randn(16, 8, generator=generator).to(operand_dtype).to(device) for _ in range(3))
    total = torch.full((8, 8), float("nan"), dtype=total_dtype, device=device)
    cross_entropy.accumulate_product(total, a.t(), b, first=True)
    cross_entropy.accumulate_product(total, a.t(), c)
    want = a.double().t() @ b.double() + a.double().t() @ c.double()
    torch.testing.assert_close(total.double(), want, rtol=0.02, atol=0.05)
    assert total.dtype == total_dtype
