"""The gradient norm's sum of squares in one launch (``trainer/kernels/triton_kernels/grad_norm.py``) beside torch's
per-tensor norms (``torch._foreach_norm``, what the global gradient norm runs without Triton) and a device copy of
the same bytes, at the ``1.3b`` preset's parameter shapes with bf16 gradients (one DP replica: each gradient its own
tensor).

    python3 bench/kernels/grad_norm.py                     # one H200: the default launch shape and a sweep

Both read every gradient once (2 bytes a parameter); the copy (``copy_`` of half those bytes: as many read and written)
is the bandwidth this traffic can reach. Printed: milliseconds per norm (back-to-back calls, so that the host's
work for one — a table of 147 addresses — overlaps the GPU's for the one before, as in a training step), TB/s,
and ours against torch's, measured side by side in this one run, and each sum's relative error against an fp64 sum
(torch's norms of bf16 tensors come back in bf16). ``$OUT/grad_norm.json`` gets every number.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: the repository's packages first
from bench.kernels.shapes import bf16_parameters, launch_shapes, parameter_shapes  # noqa: E402
from bench.timing import median_ms, per_call_microseconds, warm_up, write_results  # noqa: E402
from trainer.config.presets import PRESETS  # noqa: E402
from trainer.kernels.grad_norm import foreach_sum_of_squares  # noqa: E402
from trainer.kernels.triton_kernels import grad_norm as grad_norm_kernel  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="1.3b", choices=sorted(PRESETS))
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--sweep", default="2048x8x8,4096x4x8,4096x16x8,8192x8x16,2048x16x4",
                        help="launch shapes BLOCKxBLOCKS_PER_PROGRAMxWARPS to time besides the default ('' for none)")
    args = parser.parse_args()
    warm_up()
    grads = [param.grad for param in bf16_parameters(parameter_shapes(args.preset, args.vocab_size))]
    count = sum(grad.numel() for grad in grads)
    moved = 2 * count
    results: dict[str, float] = {}
    default = (grad_norm_kernel.BLOCK, grad_norm_kernel.BLOCKS_PER_PROGRAM, grad_norm_kernel.NUM_WARPS)
    launches = launch_shapes(default, args.sweep)
    exact = sum(grad.double().square().sum() for grad in grads)
    # NOTE: torch's bf16 norms are rounded to bf16 before they are squared and summed: ~1e-3 off
    errors = {"torch _foreach_norm": abs(float(foreach_sum_of_squares(grads)) / float(exact) - 1)}
    for label, (block, per_program, warps) in launches.items():
        got = grad_norm_kernel.sum_of_squares(grads, block=block, blocks_per_program=per_program, num_warps=warps)
        errors[label] = abs(float(got) / float(exact) - 1)
        assert errors[label] < 1e-5, (label, errors[label])
        results[label] = per_call_microseconds(lambda: grad_norm_kernel.sum_of_squares(
            grads, block=block, blocks_per_program=per_program, num_warps=warps)) / 1000
    results["torch _foreach_norm"] = per_call_microseconds(lambda: foreach_sum_of_squares(grads)) / 1000
    source = torch.empty(moved // 2, device="cuda", dtype=torch.uint8)
    target = torch.empty_like(source)
    results["device copy moving as many bytes"] = median_ms(lambda: target.copy_(source), 20)

    default_label = next(iter(results))
    best = min((label for label in results if label.startswith("ours")), key=results.get)
    print(f"{args.preset}: {count / 1e9:.3f}B bf16 gradients in {len(grads)} tensors, {moved / 1e9:.2f} GB read")
    for label, ms in results.items():
        error = f"  relative error {errors[label]:.1e}" if label in errors else ""
        print(f"  {label:32s} {ms:7.3f} ms  {moved / ms / 1e9:5.2f} TB/s{error}")
    torch_ms = results["torch _foreach_norm"]
    print(f"ours default / torch _foreach_norm: {torch_ms / results[default_label]:.2f}x faster; best launch "
          f"{best!r}: {torch_ms / results[best]:.2f}x")
    write_results("grad_norm", results)


if __name__ == "__main__":
    main()
