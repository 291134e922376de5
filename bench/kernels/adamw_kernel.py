"""The one-launch AdamW kernel (``trainer/kernels/triton_kernels/adamw.py``) beside torch's fused AdamW and a
device copy of the same bytes, at the ``1.3b`` preset's parameter shapes with bf16 weights, gradients and moments
(``train_h200.py``'s ``+bf16-weights`` runs).

    python3 bench/kernels/adamw_kernel.py                  # one H200: the default launch shape and a sweep
    python3 bench/kernels/adamw_kernel.py --preset 8b --sweep ""

All three move 14 bytes a parameter (read weight, gradient and both moments; write weight and moments):
torch's fused AdamW rounds to nearest, ours rounds stochastically; the copy (one ``copy_`` of 7 bytes a
parameter, read and written) is the bandwidth this traffic can reach. Printed: milliseconds per update (20
back-to-back updates a round, the median of ``--repeats`` rounds: the host's work for one update overlaps the
GPU's for the one before, as in a step), effective TB/s, and ours against each of the other two, measured side by
side in this one run; also the default launch recording the block weights' amaxes, as FP8 delayed scaling's runs
do. ``$OUT/adamw_kernel.json`` gets every number.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: the repository's packages first
from bench.kernels.shapes import bf16_parameters, launch_shapes, parameter_shapes  # noqa: E402
from bench.timing import median_ms, per_call_microseconds, warm_up, write_results  # noqa: E402
from trainer.config.presets import PRESETS  # noqa: E402
from trainer.kernels.triton_kernels import adamw as adamw_kernel  # noqa: E402
from trainer.optim.adamw import LowPrecisionAdamW  # noqa: E402

BYTES_PER_PARAMETER = 14


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="1.3b", choices=sorted(PRESETS))
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--repeats", type=int, default=5, help="rounds of 20 back-to-back updates")
    parser.add_argument("--sweep", default="2048x1x8,1024x8x4,2048x4x4,2048x16x8,4096x8x8,1024x32x4",
                        help="launch shapes BLOCKxBLOCKS_PER_PROGRAMxWARPS to time besides the default ('' for none)")
    args = parser.parse_args()
    warm_up()
    shapes = parameter_shapes(args.preset, args.vocab_size)
    count = sum(torch.Size(shape).numel() for shape in shapes)
    moved = BYTES_PER_PARAMETER * count
    results: dict[str, float] = {}

    params = bf16_parameters(shapes)
    ours = LowPrecisionAdamW(params, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                             exp_avg_dtype=torch.bfloat16, exp_avg_sq_dtype=torch.bfloat16, fused=True)
    ours.grad_scale = torch.ones((), device="cuda")
    ours.found_inf = torch.zeros((), device="cuda")
    default = (adamw_kernel.BLOCK, adamw_kernel.BLOCKS_PER_PROGRAM, adamw_kernel.NUM_WARPS)
    for label, (block, per_program, warps) in launch_shapes(default, args.sweep).items():
        ours.kernel = functools.partial(adamw_kernel.update, block=block, blocks_per_program=per_program,
                                        num_warps=warps)
        results[label] = per_call_microseconds(ours.step, rounds=args.repeats) / 1000
    # FP8 delayed scaling's runs: the kernel also raises each block GEMM weight's amax (one atomic max a program)
    ours.kernel = adamw_kernel.update
    # NOTE: the block matrices: the embedding and the output layer stay bf16, norms are vectors
    matrices = [param for param in params[1:-2] if param.dim() == 2]
    amaxes = torch.zeros(len(matrices), device="cuda")
    ours.record_weight_amaxes(dict(zip(matrices, amaxes)))
    results["ours (default) recording weight amaxes"] = per_call_microseconds(ours.step, rounds=args.repeats) / 1000
    del ours, params

    params = bf16_parameters(shapes)
    reference = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
    results["torch fused AdamW (round to nearest)"] = per_call_microseconds(reference.step, rounds=args.repeats) / 1000
    del reference, params

    source = torch.empty(moved // 2, device="cuda", dtype=torch.uint8)
    target = torch.empty_like(source)
    results["device copy of the same bytes"] = median_ms(lambda: target.copy_(source), args.repeats)

    default_label = next(iter(results))
    best = min((label for label in results if label.startswith("ours")), key=results.get)
    print(f"{args.preset}: {count / 1e9:.3f}B parameters, {moved / 1e9:.1f} GB moved per update")
    for label, ms in results.items():
        print(f"  {label:40s} {ms:7.2f} ms  {moved / ms / 1e9:5.2f} TB/s")
    torch_ms, copy_ms = results["torch fused AdamW (round to nearest)"], results["device copy of the same bytes"]
    print(f"ours default / torch fused: {torch_ms / results[default_label]:.2f}x faster; best launch {best!r}: "
          f"{torch_ms / results[best]:.2f}x; default at {copy_ms / results[default_label]:.0%} of the copy's bandwidth")
    write_results("adamw_kernel", results)


if __name__ == "__main__":
    main()
