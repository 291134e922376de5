"""The 1.3b preset's MLP backward (16,384 tokens, d 2048, FFN 5632, bf16) as autograd runs it on one stream, against
schedules that give fc2's weight gradient company: its output is 2,048 × 5,632, 352 of cuBLAS's 128 × 256 tiles on
132 SMs (2.67 waves, a third of the last one idle), and in a training step it ran at 688 TFLOP/s against ~745 for
the other GEMMs (bench/train_h200.md, session 15).

    python3 bench/mlp_backward_streams.py      # one H200

Schedules: autograd's order on one stream; fc2's weight gradient on a second stream beside the rest (joined at the
end, as the optimizer would wait for it); the same for both weight gradients; fc2's weight gradient computed
transposed (``h.T @ dy``, then copied to the parameter's layout). Each is timed as µs per call of the whole MLP
backward, the median over 9 interleaved rounds of 20 back-to-back calls (with the rounds' spread: the chip's power
state drifts). Results: ``bench/train_h200.md`` (session 15).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.adamw_kernel import report_interleaved  # noqa: E402
from trainer.model.swiglu import swiglu_backward  # noqa: E402

TOKENS, HIDDEN, FFN = 16384, 2048, 5632
ROUNDS = 9


def schedules() -> dict[str, Callable[[], object]]:
    """Label -> one MLP backward (fc2's gradients, SwiGLU's backward, fc1's gradients) in that schedule."""
    torch.manual_seed(0)
    bf16 = {"device": "cuda", "dtype": torch.bfloat16}
    x, w1 = torch.randn(TOKENS, HIDDEN, **bf16), torch.randn(2 * FFN, HIDDEN, **bf16) * 0.03
    y = x @ w1.t()
    h, w2 = torch.randn(TOKENS, FFN, **bf16), torch.randn(HIDDEN, FFN, **bf16) * 0.03
    dy = torch.randn(TOKENS, HIDDEN, **bf16)
    main, side = torch.cuda.current_stream(), torch.cuda.Stream()

    def fc2_weight_gradient() -> torch.Tensor:
        return dy.t() @ h

    def fc2_input_gradient() -> torch.Tensor:
        return dy @ w2

    def on_side(product: Callable[[], torch.Tensor]) -> torch.Tensor:
        """``product()`` queued on the second stream after everything queued so far on the main one."""
        side.wait_stream(main)
        with torch.cuda.stream(side):
            return product()

    def fc1_backward(dh: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dy1 = swiglu_backward(y, dh)
        return dy1 @ w1, dy1.t() @ x

    def autograd_order():
        dw2 = fc2_weight_gradient()
        return dw2, fc1_backward(fc2_input_gradient())

    def fc2_weight_gradient_beside():
        dw2 = on_side(fc2_weight_gradient)
        out = fc1_backward(fc2_input_gradient())
        main.wait_stream(side)
        return dw2, out

    def both_weight_gradients_beside():
        dh = fc2_input_gradient()
        dw2 = on_side(fc2_weight_gradient)
        dy1 = swiglu_backward(y, dh)
        dw1 = on_side(lambda: dy1.t() @ x)
        dx = dy1 @ w1
        main.wait_stream(side)
        return dw2, dw1, dx

    def transposed():
        dw2 = (h.t() @ dy).t().contiguous()
        return dw2, fc1_backward(fc2_input_gradient())

    return {"autograd's order, one stream": autograd_order,
            "fc2 weight gradient on a second stream": fc2_weight_gradient_beside,
            "both weight gradients on a second stream": both_weight_gradients_beside,
            "fc2 weight gradient transposed, then copied": transposed,
            "(fc2 weight gradient alone)": fc2_weight_gradient,
            "(fc2 input gradient alone)": fc2_input_gradient}


def main() -> None:
    table = schedules()
    report_interleaved("mlp_backward_streams", table, lambda label: next(iter(table)), ROUNDS)


if __name__ == "__main__":
    main()
