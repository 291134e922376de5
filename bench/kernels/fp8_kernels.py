"""Launch shapes of our delayed-scaling FP8 kernels, swept side by side at the ``1.3b`` preset's shapes (seq
4096, micro-batch 4: train_h200's speed shape), beside a device copy of the same bytes.

    python3 bench/kernels/fp8_kernels.py                     # one H200: every sweep
    python3 bench/kernels/fp8_kernels.py --only transposed   # or some of: plain, cast, rotary, rotary-plain, transposed

Kernels: the SwiGLU backward that writes fc1's output gradient cast to FP8 with its amax (``cast``), the
plain bf16 one (``plain``; bf16 runs), and the RoPE backward writing the QKV gradient cast to FP8
(``rotary``; its ``dq``/``dk``/``dv`` as views of one ``[B, S, groups, heads + 2, head_dim]`` tensor, the
model's layout, and as ``[B, H, S, D]`` tensors, cuDNN's) or in bf16 (``rotary-plain``, bf16 runs: cuDNN's
layout); and both casts writing the transposed copy too
(``--fp8-transpose producers``), beside what they replace: the cast, then the tiled transposing kernel. Each
launch shape is timed from the kernels' own GPU time in a torch.profiler trace (the ops' Python costs more than
their kernels when called outside a compiled graph), checked to give the default shape's bytes and amax, and
printed as µs per call, effective TB/s and the ratio to the default shape, measured in this one run.
``$OUT/fp8_kernels.json`` gets the numbers.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: the repository's packages first
from bench.timing import kernel_microseconds, write_results  # noqa: E402
from trainer.kernels.triton_kernels import fp8_transpose, rotary, swiglu  # noqa: E402
from trainer.model.layers import RotaryEmbedding  # noqa: E402

TOKENS, HIDDEN, FFN, HEADS, HEAD_DIM, SEQ = 16384, 2048, 5632, 16, 128, 4096


def same_result(got, expected) -> bool:
    """Whether two kernel results (a tensor, or an FP8 tensor and its amax) hold the same bytes."""
    pairs = zip(got, expected) if isinstance(got, tuple) else [(got, expected)]
    return all(torch.equal(a.view(torch.uint8) if a.element_size() == 1 else a,
                           b.view(torch.uint8) if b.element_size() == 1 else b) for a, b in pairs)


def sweep(label: str, table: dict, key, shapes: list, call: Callable[[], object], names: tuple[str, ...],
          moved_bytes: int, copy_us: float) -> list[dict]:
    """Time ``call`` under each launch shape of ``shapes`` set as ``table[key]``, the default first."""
    default = table[key]
    rows, expected = [], None
    try:
        for shape in [default] + [s for s in shapes if s != default]:
            table[key] = shape
            result = call()
            expected = result if expected is None else expected
            micros = kernel_microseconds(call, names)
            rows.append({"kernel": label, "shape": dataclasses.asdict(shape), "us": micros,
                         "tb_s": moved_bytes / micros / 1e6, "same": same_result(result, expected)})
    finally:
        table[key] = default
    base = rows[0]["us"]
    for row in sorted(rows, key=lambda r: r["us"]):
        mark = " (default)" if row is rows[0] else ""
        print(f"{label:16s} {str(row['shape']):44s} {row['us']:8.1f} µs {row['tb_s']:5.2f} TB/s "
              f"{base / row['us']:5.3f}× default {row['us'] / copy_us:5.2f}× copy "
              f"{'' if row['same'] else 'DIFFERENT RESULT'}{mark}")
    return rows


def sweep_transposed(label: str, table: dict, key, shapes: list, cast: Callable[..., tuple], names: tuple[str, ...],
                     read_bytes: int, elements: int) -> list[dict]:
    """:func:`sweep` of ``cast(transposed=True)`` (it reads ``read_bytes`` and writes ``elements`` FP8 bytes
    twice), after timing what it replaces at today's shapes: ``cast()``, then the transposing kernel on its
    output; the ratio printed last is that pair's time over the fastest shape's."""
    out, _ = cast()
    pair = kernel_microseconds(cast, names) + kernel_microseconds(lambda: fp8_transpose.launch(out), ("fp8_transpose",))
    moved = read_bytes + 2 * elements
    copy_us = copy_microseconds(moved)
    print(f"{label}: {moved / 1e6:.0f} MB moved; a copy of as many bytes: {copy_us:.1f} µs; the cast, then the "
          f"transposing kernel: {pair:.1f} µs")
    rows = sweep(label, table, key, shapes, functools.partial(cast, transposed=True), names, moved, copy_us)
    fastest = min(row["us"] for row in rows)
    print(f"{label}: the pair it replaces / its fastest shape: {pair / fastest:.3f}×")
    return rows + [{"kernel": f"{label} replaced pair", "us": pair}]


def copy_microseconds(moved_bytes: int) -> float:
    """A device-to-device copy moving ``moved_bytes`` (half read, half written): the bandwidth reference."""
    source = torch.empty(moved_bytes // 2, dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    return kernel_microseconds(lambda: target.copy_(source), ("copy", "Memcpy DtoD"))


SWEEPS = ("plain", "cast", "rotary", "rotary-plain", "transposed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=SWEEPS, default=SWEEPS, help="the sweeps to run")
    only = parser.parse_args().only
    torch.manual_seed(0)
    results = []
    fused = torch.randn(TOKENS, 2 * FFN, device="cuda").bfloat16()
    grad = torch.randn(TOKENS, FFN, device="cuda").bfloat16()
    scale = torch.tensor(2.0 ** 10, device="cuda")
    launch = swiglu.launch
    elements = [2048, 4096, 8192, 16384]
    for kind, call, out_bytes in (
            ("plain", lambda: launch(fused, grad), 2),
            ("cast", lambda: launch(fused, grad, scale, torch.float8_e5m2), 1)):
        if kind not in only:
            continue
        moved = fused.numel() * 2 + grad.numel() * 2 + fused.numel() * out_bytes
        copy_us = copy_microseconds(moved)
        print(f"swiglu {kind}: {moved / 1e6:.0f} MB moved; a copy of as many bytes: {copy_us:.1f} µs "
              f"({moved / copy_us / 1e6:.2f} TB/s)")
        shapes = [swiglu.Tiling(e, w) for e, w in itertools.product(elements, (4, 8, 16))]
        results += sweep(f"swiglu {kind}", swiglu.TILING, kind, shapes, call, ("swiglu_backward", "reduce_kernel"),
                         moved, copy_us)
    cast = functools.partial(launch, fused, grad, scale, torch.float8_e5m2)
    shapes = [swiglu.Tiling(e, w, c) for e, w, c in itertools.product((2048, 4096, 8192), (4, 8), (32, 64, 128))]
    if "transposed" in only:
        results += sweep_transposed("swiglu transp.", swiglu.TILING, "transposed", shapes, cast,
                                    ("swiglu_backward", "reduce_kernel"), fused.numel() * 2 + grad.numel() * 2,
                                    fused.numel())

    rope = RotaryEmbedding(HEAD_DIM, 10000.0, SEQ).cuda()
    rope.reset_parameters()
    positions = torch.arange(SEQ, device="cuda").expand(TOKENS // SEQ, SEQ)
    cos, sin = rope(positions, torch.bfloat16)
    batch = TOKENS // SEQ
    model = torch.randn(batch, SEQ, HEADS, 3, HEAD_DIM, device="cuda").bfloat16()
    layouts = {"model": (model[:, :, :, 0], model[:, :, :, 1], model[:, :, :, 2]),
               "cudnn": tuple(torch.randn(batch, HEADS, SEQ, HEAD_DIM, device="cuda").bfloat16().transpose(1, 2)
                              for _ in range(3))}
    launch = rotary.launch
    shapes = [rotary.Tiling(t, w) for t, w in itertools.product((16, 32, 64, 128), (2, 4, 8))]
    head_shape = (HEADS, 1, HEAD_DIM)
    for kind, out_bytes in (("rotary", 1), ("rotary-plain", 2)):
        if kind not in only:
            continue
        moved = 3 * TOKENS * HIDDEN * 2 + 3 * TOKENS * HIDDEN * out_bytes
        copy_us = copy_microseconds(moved)
        print(f"{kind}: {moved / 1e6:.0f} MB moved; a copy of as many bytes: {copy_us:.1f} µs "
              f"({moved / copy_us / 1e6:.2f} TB/s)")
        cast_args = (scale, torch.float8_e5m2) if kind == "rotary" else ()
        for name, grads in layouts.items() if kind == "rotary" else [("cudnn", layouts["cudnn"])]:
            call = functools.partial(launch, *grads, cos, sin, head_shape, *cast_args)
            results += sweep(f"{kind} {name}", rotary.TILING, "cast" if cast_args else "plain", shapes, call,
                             ("rotary_backward",), moved, copy_us)
    cast = functools.partial(launch, *layouts["cudnn"], cos, sin, head_shape, scale, torch.float8_e5m2)
    if "transposed" in only:
        results += sweep_transposed("rotary transp.", rotary.TILING, "transposed", shapes, cast,
                                    ("rotary_backward",), 3 * TOKENS * HIDDEN * 2, 3 * TOKENS * HIDDEN)
    write_results("fp8_kernels", results)


if __name__ == "__main__":
    main()
