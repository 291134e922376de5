"""The one-launch AdamW kernel (``trainer/kernels/adamw.py``) beside torch's fused AdamW and a device copy of
the same bytes, at the ``1.3b`` preset's parameter shapes with bf16 weights, gradients and moments (train_h200's
``+bf16-weights`` runs).

    python3 bench/adamw_kernel.py                  # one H200: the default launch shape and a sweep
    python3 bench/adamw_kernel.py --preset 8b --sweep ""

All three move 14 bytes a parameter (read weight, gradient and both moments; write weight and moments):
torch's fused AdamW rounds to nearest, ours rounds stochastically; the copy (one ``copy_`` of 7 bytes a
parameter, read and written) is the bandwidth this traffic can reach. Printed: milliseconds per update (20
back-to-back updates a round, the median of ``--repeats`` rounds: the host's work for one update overlaps the
GPU's for the one before, as in a step — timed one by one, until session 13, the sweeps compared host time),
effective TB/s, and ours against each of the other two, measured side by side in this one run; also the default
launch recording the block weights' amaxes, as FP8 delayed scaling's runs do (in their step profile the update
took ~1 ms more than the bf16 run's). ``$OUT/adamw_kernel.json`` (when ``$OUT`` is set) gets every number.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainer import adamw_kernel  # noqa: E402
from trainer.config.presets import PRESETS  # noqa: E402
from trainer.optim.adamw import LowPrecisionAdamW  # noqa: E402

BYTES_PER_PARAMETER = 14


def parameter_shapes(preset: str, vocab: int) -> list[tuple[int, ...]]:
    """Every parameter's shape of ``preset`` at one TP rank (embedding, per layer norms/QKV/proj/fc1/fc2,
    final norm, output), as ``trainer.model.gpt.GPT`` lays them out."""
    shape = PRESETS[preset]
    head_dim = shape.hidden_size // shape.num_attention_heads
    qkv = (shape.num_attention_heads + 2 * shape.num_query_groups) * head_dim
    hidden, ffn = shape.hidden_size, shape.ffn_hidden_size
    layer = [(hidden,), (qkv, hidden), (hidden, hidden), (hidden,), (2 * ffn, hidden), (hidden, ffn)]
    return [(vocab, hidden), *layer * shape.num_layers, (hidden,), (vocab, hidden)]


def median_ms(action: Callable[[], None], repeats: int) -> float:
    """Median milliseconds of ``action`` over ``repeats`` CUDA-event-timed calls, after three warm-ups."""
    for _ in range(3):
        action()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        action()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def warm_up(seconds: float = 2.0) -> None:
    """Keep the GPU copying for ``seconds`` first: an idle chip starts at a low clock, and the first shape timed
    paid for the ramp (session 13: the same kernel 0.92 ms first, 0.64 later in the same run)."""
    source = torch.empty(2**30, device="cuda", dtype=torch.uint8)
    target = torch.empty_like(source)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    while True:
        for _ in range(10):
            target.copy_(source)
        end.record()
        end.synchronize()
        if start.elapsed_time(end) > seconds * 1000:
            return


def per_call_microseconds(call: Callable[[], object], calls: int = 20, rounds: int = 5) -> float:
    """GPU µs of one ``call()`` among ``calls`` back-to-back ones (so its launch overlaps the previous call's
    work): the :func:`median_ms` of ``rounds`` such rounds, per call."""
    return median_ms(lambda: [call() for _ in range(calls)], rounds) / calls * 1000


def interleaved_medians(table: dict[str, Callable[[], object]], rounds: int,
                        calls: int = 20) -> tuple[dict[str, float], dict[str, float]]:
    """Per entry of ``table``: µs per call, the median over ``rounds`` rounds of ``calls`` back-to-back calls
    (:func:`per_call_microseconds`), and the rounds' spread (max / min − 1). The entries take turns round by
    round, as the chip's power state drifts by several % a minute."""
    times: dict[str, list[float]] = {label: [] for label in table}
    for _ in range(rounds):
        for label, call in table.items():
            times[label].append(per_call_microseconds(call, calls=calls, rounds=1))
    return ({label: statistics.median(values) for label, values in times.items()},
            {label: max(values) / min(values) - 1 for label, values in times.items()})


def report_interleaved(name: str, table: dict[str, Callable[[], object]], reference: Callable[[str], str],
                       rounds: int, calls: int = 20) -> None:
    """Warm each entry of ``table`` up with one call, time them all (:func:`interleaved_medians`), print each one's
    µs, its speed against the entry ``reference(label)`` names and the rounds' spread, and write every median into
    ``$OUT/<name>.json``."""
    for call in table.values():
        call()
    results, spreads = interleaved_medians(table, rounds, calls)
    width = max(map(len, results))
    for label, us in results.items():
        print(f"{label:{width}s} {us:8.1f} µs {results[reference(label)] / us:6.3f}×  "
              f"(rounds spread {spreads[label]:.1%})", flush=True)
    write_results(name, results)


def launch_shapes(default: tuple[int, int, int], sweep: str) -> dict[str, tuple[int, int, int]]:
    """Labelled launch shapes (BLOCK, blocks a program, warps) of a one-launch kernel: ``default`` first, then each
    ``BLOCKxBLOCKS_PER_PROGRAMxWARPS`` entry of the comma-separated ``sweep``."""
    shapes = {"ours {}x{}x{} (default)".format(*default): default}
    shapes.update({f"ours {entry}": tuple(int(n) for n in entry.split("x")) for entry in sweep.split(",") if entry})
    return shapes


def write_results(name: str, results: dict[str, float]) -> None:
    """Every number of a bench into ``$OUT/<name>.json``, when ``$OUT`` is set."""
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], f"{name}.json").write_text(json.dumps(results, indent=1))


def bf16_parameters(shapes: list[tuple[int, ...]]) -> list[torch.nn.Parameter]:
    """bf16 parameters of ``shapes`` on the GPU with random bf16 gradients."""
    params = []
    for shape in shapes:
        param = torch.nn.Parameter(torch.randn(shape, device="cuda", dtype=torch.bfloat16) * 0.02)
        param.grad = torch.randn_like(param) * 1e-3
        params.append(param)
    return params


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
