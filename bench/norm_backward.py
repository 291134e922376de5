"""RMSNorm's backward at the ``1.3b`` preset's shapes (16,384 tokens × 2048, bf16 residual stream, fp32 math):
what Inductor compiles from its formula, beside a hand-written Triton kernel and a device copy of as many bytes.

    python3 bench/norm_backward.py      # one H200

Why: in the FP8 step's profile (``bench/train_h200.md``, twelfth run) each layer's two RMSNorm backward kernels
take ~97 µs each — ~2.8 TB/s for the 268 MB the backward must move, where a copy reaches ~4.2 — 4.6 ms of a
~200 ms step (4.2 of the bf16 step): at the copy's pace ~1.5 ms a step less. The pattern is a block's ``h → (rms_norm(h) · w)`` with the residual stream's gradient ``dres`` added:

    dh = dres + rstd · (g − x̂ · mean(x̂ · g)),   dw = Σ_tokens dn · x̂,   g = dn · w,  x̂ = h · rstd

Reads ``h``, ``dn``, ``dres`` and writes ``dh`` (bf16: 8 bytes an element); ``dw`` needs a sum over all tokens.
The hand kernel streams a program's rows once, keeping its partial ``dw`` in registers, then one small sum
finishes ``dw``. Printed: µs per call (CUDA events, median of rounds), effective TB/s, and the ratios, measured
side by side in this one run; both results are checked against the float64 formula first. A prototype for the
decision, not trainer code: the trainer's norm backward also casts ``dh`` to FP8 under delayed scaling, which
a kernel in the trainer would have to do too.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.adamw_kernel import per_call_microseconds as microseconds  # noqa: E402

TOKENS, HIDDEN, EPS = 16384, 2048, 1e-5


def formula(h: torch.Tensor, w: torch.Tensor, dn: torch.Tensor, dres: torch.Tensor,
            eps: float = EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dh, dw)`` in tensor code, fp32 math on bf16 tensors (what Inductor compiles); float64 for checks."""
    compute = torch.promote_types(h.dtype, torch.float32)
    hf, g = h.to(compute), dn.to(compute) * w.to(compute)
    rstd = torch.rsqrt(hf.square().mean(-1, keepdim=True) + eps)
    xhat = hf * rstd
    dx = rstd * (g - xhat * (xhat * g).mean(-1, keepdim=True))
    return (dres.to(compute) + dx).to(h.dtype), (dn.to(compute) * xhat).sum(0)


@functools.cache
def hand_kernel():
    """The Triton launcher ``(h, w, dn, dres, rows_per_program, block_rows, warps) -> (dh, dw)``."""
    import triton
    import triton.language as tl

    @triton.jit
    def norm_backward_kernel(h_ptr, w_ptr, dn_ptr, dres_ptr, dh_ptr, partial_ptr, rows, width, eps,
                             ROWS_PER_PROGRAM: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
        program = tl.program_id(0)
        columns = tl.arange(0, BLOCK_COLS)
        col = columns[None, :]
        w = tl.load(w_ptr + col, mask=col < width, other=0.0).to(tl.float32)
        dw = tl.zeros([BLOCK_COLS], dtype=tl.float32)
        for start in range(0, ROWS_PER_PROGRAM, BLOCK_ROWS):
            row = program * ROWS_PER_PROGRAM + start + tl.arange(0, BLOCK_ROWS)[:, None]
            mask = (row < rows) & (col < width)
            at = row.to(tl.int64) * width + col
            h = tl.load(h_ptr + at, mask=mask, other=0.0).to(tl.float32)
            dn = tl.load(dn_ptr + at, mask=mask, other=0.0).to(tl.float32)
            dres = tl.load(dres_ptr + at, mask=mask, other=0.0).to(tl.float32)
            rstd = tl.rsqrt(tl.sum(h * h, axis=1) / width + eps)[:, None]
            xhat = h * rstd
            g = dn * w
            dx = rstd * (g - xhat * (tl.sum(xhat * g, axis=1) / width)[:, None])
            tl.store(dh_ptr + at, (dres + dx).to(dh_ptr.dtype.element_ty), mask=mask)
            dw += tl.sum(dn * xhat, axis=0)
        tl.store(partial_ptr + program * width + columns, dw, mask=columns < width)

    def launch(h: torch.Tensor, w: torch.Tensor, dn: torch.Tensor, dres: torch.Tensor, rows_per_program: int,
               block_rows: int, warps: int) -> tuple[torch.Tensor, torch.Tensor]:
        rows, width = h.shape
        programs = triton.cdiv(rows, rows_per_program)
        dh = torch.empty_like(h)
        partial = h.new_empty(programs, width, dtype=torch.float32)
        norm_backward_kernel[(programs,)](h, w, dn, dres, dh, partial, rows, width, EPS,
                                          ROWS_PER_PROGRAM=rows_per_program, BLOCK_ROWS=block_rows,
                                          BLOCK_COLS=triton.next_power_of_2(width), num_warps=warps)
        return dh, partial.sum(0)

    return launch


def check(got: tuple[torch.Tensor, torch.Tensor], inputs: tuple[torch.Tensor, ...], label: str) -> None:
    """``got`` against the float64 formula: ``dh`` within a bf16 rounding, ``dw`` within fp32 summation error."""
    want_dh, want_dw = formula(*(t.double() for t in inputs))
    torch.testing.assert_close(got[0].double(), want_dh.to(torch.bfloat16).double(), rtol=2 ** -7, atol=1e-3,
                               msg=lambda m: f"{label} dh: {m}")
    torch.testing.assert_close(got[1].double(), want_dw, rtol=1e-4, atol=1e-2, msg=lambda m: f"{label} dw: {m}")


def main() -> None:
    torch.manual_seed(0)
    bf16 = {"device": "cuda", "dtype": torch.bfloat16}
    inputs = (torch.randn(TOKENS, HIDDEN, **bf16) * 3, 1 + torch.randn(HIDDEN, **bf16) * 0.1,
              torch.randn(TOKENS, HIDDEN, **bf16) * 1e-2, torch.randn(TOKENS, HIDDEN, **bf16) * 1e-2)
    moved = 4 * TOKENS * HIDDEN * 2
    source = torch.empty(moved // 2, dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    copy_us = microseconds(lambda: target.copy_(source))
    print(f"{moved / 1e6:.0f} MB moved; a copy of as many bytes: {copy_us:.1f} µs ({moved / copy_us / 1e6:.2f} TB/s)")
    compiled = torch.compile(formula)
    check(compiled(*inputs), inputs, "inductor")
    inductor_us = microseconds(lambda: compiled(*inputs))
    print(f"inductor (the formula compiled)         {inductor_us:8.1f} µs {moved / inductor_us / 1e6:5.2f} TB/s "
          f"{inductor_us / copy_us:5.2f}× copy")
    launch = hand_kernel()
    rows = []
    for rows_per_program, block_rows, warps in [(r, b, w) for r in (16, 32, 64, 128) for b in (1, 2, 4)
                                                for w in (4, 8, 16) if b <= r]:
        call = functools.partial(launch, *inputs, rows_per_program, block_rows, warps)
        check(call(), inputs, f"hand {rows_per_program}/{block_rows}/{warps}")
        rows.append((microseconds(call), rows_per_program, block_rows, warps))
    for us, rows_per_program, block_rows, warps in sorted(rows)[:8]:
        print(f"hand: {rows_per_program:3d} rows a program, {block_rows} at a time, {warps:2d} warps "
              f"{us:8.1f} µs {moved / us / 1e6:5.2f} TB/s {us / copy_us:5.2f}× copy "
              f"{inductor_us / us:5.2f}× faster than inductor")


if __name__ == "__main__":
    main()
