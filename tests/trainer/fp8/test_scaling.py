"""FP8 scaling math against float64 references: quantize/dequantize emulated on the exact FP8 value grid."""

from __future__ import annotations

import pytest
import torch

from trainer.fp8.scaling import E4M3, E5M2, FORMATS, Eligibility, dequantize, fp8_max, quantize


def grid(dtype: torch.dtype) -> torch.Tensor:
    """Every finite value of an FP8 dtype (float64, sorted), from all 256 bit patterns."""
    values = torch.arange(256, dtype=torch.uint8).view(dtype).double()
    return values[torch.isfinite(values)].unique()


def nearest_on_grid(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round-to-nearest-even onto the FP8 grid, emulated in float64 (the reference of a cast)."""
    values = grid(dtype)
    x = x.double().clamp(values[0], values[-1])
    right = torch.searchsorted(values, x).clamp(1, len(values) - 1)
    low, high = values[right - 1], values[right]
    zero = int(torch.searchsorted(values, torch.zeros((), dtype=torch.float64)))
    even_high = (right - zero) % 2 == 0  # grid neighbours alternate even/odd mantissas, zero being even
    pick_high = (high - x < x - low) | ((high - x == x - low) & even_high)
    return torch.where(pick_high, high, low)


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
def test_tensorwise_quantization_matches_the_emulated_reference(dtype):
    x = torch.randn(64, 96) * 3.7
    q, inverse = quantize(x, dtype)
    scale = fp8_max(dtype) / x.double().abs().max()
    assert q.dtype == dtype and inverse.shape == ()
    torch.testing.assert_close(inverse.double(), 1 / scale, rtol=1e-6, atol=0)
    reference = nearest_on_grid(x.double() * scale, dtype)
    # NOTE: the scaled product is rounded to fp32 before the cast, so ties may fall either way: allow one grid step
    steps = (q.double() - reference).abs() / reference.abs().clamp(min=1e-30)
    assert (q.double() == reference).float().mean() > 0.99 and steps.max() <= 2 ** -2
    assert q.double().abs().max() == fp8_max(dtype)  # the amax lands on the largest finite value


def test_rowwise_scales_each_row_to_its_own_amax():
    x = torch.randn(8, 32) * torch.logspace(-3, 3, 8)[:, None]
    q, inverse = quantize(x, E4M3, dim=-1)
    assert inverse.shape == (8, 1)
    torch.testing.assert_close(inverse.double().squeeze(1), x.double().abs().amax(1) / 448.0, rtol=1e-6, atol=0)
    assert torch.equal(q.double().abs().amax(1), torch.full((8,), 448.0, dtype=torch.float64))
    relative = (dequantize(q, inverse).double() - x.double()).abs() / x.double().abs()
    assert relative[x.abs() > x.abs().amax(1, keepdim=True) / 64].max() <= 2 ** -4  # e4m3: 3 mantissa bits


def test_dequantize_error_is_bounded_by_half_an_ulp_of_the_format():
    x = torch.randn(4096)
    for dtype, mantissa_bits in ((E4M3, 3), (E5M2, 2)):
        q, inverse = quantize(x, dtype)
        relative = ((dequantize(q, inverse) - x).abs() / x.abs())[x.abs() > x.abs().max() / 100]
        assert relative.max() <= 2.0 ** -(mantissa_bits + 1) * 1.0001


def test_zeros_quantize_to_zeros_not_nan():
    q, inverse = quantize(torch.zeros(16, 16), E4M3)
    assert torch.equal(dequantize(q, inverse), torch.zeros(16, 16))


def test_formats_are_megatron_hybrid_and_e4m3():
    assert FORMATS["hybrid"] == (E4M3, E5M2) and FORMATS["e4m3"] == (E4M3, E4M3)
    assert fp8_max(E4M3) == 448.0 and fp8_max(E5M2) == 57344.0


@pytest.mark.parametrize("tokens, inputs, outputs, expected", [
    (4096, 2048, 6144, True),
    (4096, 2048, 100, False),   # not a multiple of 16
    (4096, 128, 352, False),    # below --fp8-min-dim
    (4095, 2048, 2048, False),  # the token count too must be a multiple of 16
])
def test_eligibility_rule(tokens, inputs, outputs, expected):
    assert Eligibility(512)(tokens, inputs, outputs) is expected
