"""(helper) What one compiled FP8 block keeps for its backward pass, and what that pass computes again — on
the CPU, no GPU time: the split of forward and backward is AOTAutograd's (Inductor's min-cut partitioner),
the same on every device.

    python -m bench.fp8_block_graphs                 # scaled_mm tensorwise, bf16 weights, a small block
    python -m bench.fp8_block_graphs --recipe delayed   # the same with delayed scaling (past its first step)

Prints the tensors saved between the passes (dtype, shape), and per op family how often each pass runs it:
an RMSNorm, SiLU or FP8 cast that appears in the backward is recomputed there from saved bf16 tensors
instead of read from an FP8 copy the forward pass wrote. Finding of session 6 (bench/train_h200.md, seventh
run): of the eight FP8 operands of the forward pass the block saves one (the attention output's); the
backward casts 11 times — the 4 output gradients, and again the 3 other activations (from re-normalised
and re-SiLU'd bf16) and all 4 weights, for their transposed copies. With ``--recipe delayed`` (session 8) it
casts 10 times: the SwiGLU backward op casts the ``[gate; up]`` GEMM's gradient itself.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import torch
from functorch.compile import min_cut_rematerialization_partition
from torch._dynamo.backends.common import aot_autograd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainer.config.schema import ModelConfig  # noqa: E402
from trainer.fp8.delayed import Calibration  # noqa: E402
from trainer.fp8.scaled_mm import DelayedScaledGemm, ScaledMMRecipe, make_scaled_mm_gemm  # noqa: E402
from trainer.fp8.scaling import E4M3, E5M2, Eligibility  # noqa: E402
from trainer.model.attention import BACKENDS  # noqa: E402
from trainer.model.gpt import TransformerLayer  # noqa: E402
from trainer.model.layers import RotaryEmbedding  # noqa: E402
from trainer.parallel.state import ParallelState  # noqa: E402

#: Op-name fragments → family, first match wins.
FAMILIES = (("fp8 GEMM", "_scaled_mm"), ("amax", "amax"), ("rms_norm", "rms_norm"), ("rsqrt (norm)", "rsqrt"),
            ("silu", "silu"), ("swiglu backward", "swiglu"), ("attention", "attention"), ("GEMM", "mm"),
            ("transposing copy", "clone"))


def op_families(graph: torch.fx.Graph) -> collections.Counter:
    """How many call nodes of each :data:`FAMILIES` entry ``graph`` holds (FP8 casts counted apart)."""
    counts = collections.Counter()
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        name = str(node.target)
        dtype = node.kwargs.get("dtype", node.args[1] if "convert_element_type" in name else None)
        if dtype in (E4M3, E5M2):
            counts["cast to fp8"] += 1
            continue
        family = next((label for label, fragment in FAMILIES if fragment in name), None)
        if family:
            counts[family] += 1
    return counts


def saved_tensors(forward: torch.fx.Graph, user_outputs: int) -> list[str]:
    """``dtype[shape]`` of every forward output past the block's own: what the backward pass reads."""
    output = next(node for node in forward.nodes if node.op == "output")
    described = []
    for node in output.args[0][user_outputs:]:
        value = node.meta.get("val") if node is not None else None
        if isinstance(value, torch.Tensor):
            described.append(f"{node.name}: {str(value.dtype).removeprefix('torch.')}{list(value.shape)}")
    return described


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--ffn-hidden-size", type=int, default=768)
    parser.add_argument("--seq-length", type=int, default=128)
    parser.add_argument("--recipe", choices=("tensorwise", "delayed"), default="tensorwise")
    args = parser.parse_args()
    config = ModelConfig(preset="tiny", num_layers=1, hidden_size=args.hidden_size, num_attention_heads=4,
                         num_query_groups=4, ffn_hidden_size=args.ffn_hidden_size)
    recipe, eligible = ScaledMMRecipe(E4M3, E5M2, rowwise=False), Eligibility(min_dim=16)
    gemm = (DelayedScaledGemm(recipe, eligible, Calibration(active=False)) if args.recipe == "delayed"
            else make_scaled_mm_gemm(recipe, eligible))
    layer = TransformerLayer(config, ParallelState(torch.device("cpu")), BACKENDS["math"], gemm)
    with torch.no_grad():
        for module in layer.modules():
            if module is not layer and hasattr(module, "reset_parameters"):
                module.reset_parameters()
        for param in layer.parameters():
            param.data = param.data.to(torch.bfloat16)  # as --main-params-dtype bf16: buffers (scales) stay fp32

    graphs: dict[str, torch.fx.GraphModule] = {}

    def keep(kind: str):
        def compiler(module: torch.fx.GraphModule, _inputs):
            graphs[kind] = module
            return module.forward
        return compiler

    backend = aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward"),
                           partition_fn=min_cut_rematerialization_partition)
    positions = torch.arange(args.seq_length)[None].expand(2, -1)
    x = torch.randn(2, args.seq_length, args.hidden_size, dtype=torch.bfloat16, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        rotary = RotaryEmbedding(config.head_dim, 10_000.0, args.seq_length)(positions, torch.bfloat16)
        residual, branch = torch.compile(layer, backend=backend)(x, torch.zeros_like(x), rotary, None)
    (residual + branch).float().square().mean().backward()

    print(f"block d={args.hidden_size} ffn={args.ffn_hidden_size} seq={args.seq_length}, scaled_mm {args.recipe}, "
          "bf16 weights")
    print("saved for the backward pass:")
    for line in saved_tensors(graphs["forward"].graph, user_outputs=2):
        print(f"  {line}")
    forward, backward = op_families(graphs["forward"].graph), op_families(graphs["backward"].graph)
    print(f"\n{'op family':20} {'forward':>8} {'backward':>9}")
    for family in sorted(set(forward) | set(backward)):
        print(f"{family:20} {forward[family]:>8} {backward[family]:>9}")


if __name__ == "__main__":
    main()
