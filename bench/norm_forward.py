"""The block's add + RMSNorm forward kernels at the ``1.3b`` preset's shape (16,384 tokens × 2048, bf16), compiled
under Inductor options: why the block's first one is slower than its second.

    python3 bench/norm_forward.py      # one H200

Why: in a bf16 step the block's first add + norm kernel (its inputs are the compiled graph's own: the previous
block's residual stream and MLP output) took 81–85 µs against 65 for the second (the sum written in place into the
attention-out GEMM's output), for the same 268 MB moved (bench/train_h200.md, session 16): ~0.4 ms a step. Each
pattern is compiled as the trainer compiles it (``trainer.parallelize.compile.INDUCTOR_OPTIONS``) and under other options;
printed: the norm kernel's µs (mean of 20 calls in a profile) and its ratio to a device copy of as many bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.adamw_kernel import write_results  # noqa: E402
from bench.fp8_kernels import kernel_microseconds  # noqa: E402
from trainer.model.layers import RMSNorm  # noqa: E402
from trainer.parallelize.compile import INDUCTOR_OPTIONS  # noqa: E402

TOKENS, HIDDEN = 16384, 2048
OPTIONS = {"trainer's": INDUCTOR_OPTIONS, "no coordinate descent": {},
           "coordinate descent, all directions, radius 2": {**INDUCTOR_OPTIONS,
                                                            "coordinate_descent_check_all_directions": True,
                                                            "coordinate_descent_search_radius": 2}}


def main() -> None:
    torch.manual_seed(0)
    bf16 = {"device": "cuda", "dtype": torch.bfloat16}
    norm = RMSNorm(HIDDEN, 1e-5).cuda()
    norm.reset_parameters()
    # NOTE: inputs that need gradients, as in training: the forward kernels also save what the backward reads
    residual, branch, attn_out = (torch.randn(TOKENS, HIDDEN, **bf16, requires_grad=True) for _ in range(3))
    proj = (torch.randn(HIDDEN, HIDDEN, **bf16) * 0.02).requires_grad_()

    def first_norm(residual: torch.Tensor, branch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = residual + branch  # the block's inputs: a new buffer for the sum
        return x, norm(x)

    def second_norm(x: torch.Tensor, attn_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x + attn_out @ proj.t()  # the sum written in place into the GEMM's output
        return x, norm(x)

    results = {}
    pair = torch.randn(2, TOKENS, HIDDEN, **bf16)
    copy_target = torch.empty_like(pair)
    results["device copy of the same bytes"] = kernel_microseconds(lambda: copy_target.copy_(pair), ("Memcpy",))
    for label, options in OPTIONS.items():
        for name, pattern, args in (("first", first_norm, (residual, branch)),
                                    ("second", second_norm, (residual, attn_out))):
            torch._dynamo.reset()
            compiled = torch.compile(pattern, options=options)
            results[f"{name} norm, {label}"] = kernel_microseconds(lambda: compiled(*args), ("rms_norm",))
    copy = results["device copy of the same bytes"]
    for label, us in results.items():
        print(f"{label:58s} {us:7.1f} µs  {copy / us:5.2f}× the copy's pace", flush=True)
    write_results("norm_forward", results)


if __name__ == "__main__":
    main()
