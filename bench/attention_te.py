"""Causal attention at the ``1.3b`` preset's shape (B=4, S=4096, 16 heads of 128, bf16), forward + backward:
torch's SDPA on cuDNN (what the trainer runs) beside Transformer Engine's ``DotProductAttention`` in bf16 and in
FP8 (``DelayedScaling(fp8_dpa=True)``, cuDNN's FP8 fused attention; Megatron's ``--fp8-dot-product-attention``).

    export PYTHONPATH=/tmp/site NVTE_FRAMEWORK=pytorch; python3 bench/attention_te.py   # one H200, TE kit

Why: attention is ~52 ms of the ~200 ms FP8 step (bench/train_h200.md, twelfth run) and the only large cost the
trainer's FP8 leaves in bf16; TE's bf16 attention also runs cuDNN, through its own graph and cuDNN build. A probe
for the decision, not trainer code. Printed: ms per forward + backward (CUDA events, median of rounds) and the
ratios against SDPA, measured side by side in this one run; and for each TE variant the relative error
(‖got − want‖ / ‖want‖) of its output and of the three input gradients against SDPA's bf16 results.

NOTE: Transformer Engine is imported before anything loads torch's cuDNN: the other way round its import fails
on the H200 image (trainer/run/build.py says so too). Both attentions then run the cuDNN TE's kit loaded (9.14).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
import transformer_engine.pytorch as te  # noqa: I001 - first, see the NOTE above
from transformer_engine.common import recipe as te_recipes

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.adamw_kernel import median_ms  # noqa: E402

BATCH, SEQ, HEADS, HEAD_DIM = 4, 4096, 16, 128

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The trainer's ``cudnn`` backend: [B, S, H, D] in, [B, S, H·D] out."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=True)
    return out.transpose(1, 2).flatten(2)


def te_attention(fp8: bool) -> Attend:
    """TE's ``DotProductAttention`` (bshd, causal), inside ``te.autocast`` with FP8 attention when ``fp8``."""
    module = te.DotProductAttention(HEADS, HEAD_DIM, attention_dropout=0.0, qkv_format="bshd",
                                    attn_mask_type="causal")
    recipe = te_recipes.DelayedScaling(fp8_format=te_recipes.Format.HYBRID, fp8_dpa=True) if fp8 else None

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        with te.autocast(enabled=fp8, recipe=recipe):
            return module(q, k, v)

    return attend


def forward_backward(attend: Attend, inputs: list[torch.Tensor], grad: torch.Tensor) -> list[torch.Tensor]:
    """The output and the gradients of the inputs for the output gradient ``grad``."""
    for tensor in inputs:
        tensor.grad = None
    out = attend(*inputs)
    out.backward(grad)
    return [out.detach()] + [tensor.grad for tensor in inputs]


def relative_errors(got: list[torch.Tensor], want: list[torch.Tensor]) -> str:
    """‖got − want‖ / ‖want‖ of output, dq, dk, dv."""
    return ", ".join(f"{name} {(g.float() - w.float()).norm() / w.float().norm():.4f}"
                     for name, g, w in zip(("out", "dq", "dk", "dv"), got, want))


def main() -> None:
    torch.manual_seed(0)
    shape, bf16 = (BATCH, SEQ, HEADS, HEAD_DIM), {"device": "cuda", "dtype": torch.bfloat16}
    inputs = [torch.randn(shape, **bf16).requires_grad_() for _ in range(3)]
    grad = torch.randn(BATCH, SEQ, HEADS * HEAD_DIM, **bf16)
    flops = 4 * BATCH * HEADS * SEQ * SEQ * HEAD_DIM / 2 * 3.5  # causal; backward 2.5x the forward
    # NOTE: no torch.backends.cudnn.version(): with TE's cuDNN loaded first it raises (torch built against 9.19,
    # TE's kit brings 9.14 on the H200); NVTE_DEBUG=1 NVTE_DEBUG_LEVEL=2 makes TE log its backend and cuDNN version
    print(f"torch {torch.__version__}")
    want = forward_backward(sdpa, inputs, grad)
    variants = {"torch SDPA cuDNN bf16": sdpa, "TE DotProductAttention bf16": te_attention(False),
                "TE DotProductAttention FP8 (fp8_dpa)": te_attention(True)}
    times = {}
    for name, attend in variants.items():
        for _ in range(3):  # warm-up; delayed scaling's scales settle
            got = forward_backward(attend, inputs, grad)
        times[name] = median_ms(lambda: [forward_backward(attend, inputs, grad) for _ in range(5)], 5) / 5
        error = "" if attend is sdpa else f"; vs SDPA: {relative_errors(got, want)}"
        print(f"{name:38s} {times[name]:7.3f} ms fwd+bwd {flops / times[name] / 1e9:6.0f} TFLOP/s "
              f"{times['torch SDPA cuDNN bf16'] / times[name]:5.2f}x SDPA{error}")


if __name__ == "__main__":
    main()
