"""What the kernel benchmarks share: the ``1.3b`` preset's parameters as the trainer lays them out, and the launch
shapes a sweep times."""

from __future__ import annotations

import torch

from trainer.config.presets import PRESETS


def parameter_shapes(preset: str, vocab: int) -> list[tuple[int, ...]]:
    """Every parameter's shape of ``preset`` at one TP rank (embedding, per layer norms/QKV/proj/fc1/fc2,
    final norm, output), as ``trainer.model.gpt.GPT`` lays them out."""
    shape = PRESETS[preset]
    head_dim = shape.hidden_size // shape.num_attention_heads
    qkv = (shape.num_attention_heads + 2 * shape.num_query_groups) * head_dim
    hidden, ffn = shape.hidden_size, shape.ffn_hidden_size
    layer = [(hidden,), (qkv, hidden), (hidden, hidden), (hidden,), (2 * ffn, hidden), (hidden, ffn)]
    return [(vocab, hidden), *layer * shape.num_layers, (hidden,), (vocab, hidden)]


def bf16_parameters(shapes: list[tuple[int, ...]]) -> list[torch.nn.Parameter]:
    """bf16 parameters of ``shapes`` on the GPU with random bf16 gradients."""
    params = []
    for shape in shapes:
        param = torch.nn.Parameter(torch.randn(shape, device="cuda", dtype=torch.bfloat16) * 0.02)
        param.grad = torch.randn_like(param) * 1e-3
        params.append(param)
    return params


def launch_shapes(default: tuple[int, int, int], sweep: str) -> dict[str, tuple[int, int, int]]:
    """Labelled launch shapes (BLOCK, blocks a program, warps) of a one-launch kernel: ``default`` first, then each
    ``BLOCKxBLOCKS_PER_PROGRAMxWARPS`` entry of the comma-separated ``sweep``."""
    shapes = {"ours {}x{}x{} (default)".format(*default): default}
    shapes.update({f"ours {entry}": tuple(int(n) for n in entry.split("x")) for entry in sweep.split(",") if entry})
    return shapes
