"""The plain-PyTorch baseline: a Llama-style GPT (RMSNorm, RoPE, SwiGLU, untied output layer) at the trainer's
speed shape (``bench/baselines/common.py``), trained eager, with ``torch.compile`` of the whole model, and compiled
with torchao's FP8 linears (all but the output layer), fused AdamW, bf16 autocast; the chip's ceilings first.

    python3 bench/baselines/torch_gpt.py           # one GPU, ~3 minutes; $OUT/baseline.json
    python -m bench.baselines.torch_gpt --smoke    # anywhere, a tiny shape: checks the script, measures nothing

Each configuration: a fresh model (seed 0), 3 untimed steps, then 12 timed back to back on one random batch;
tokens/s, MFU, peak memory and the last loss (``train_<configuration>`` in the JSON). Compare its figures with
the trainer's measured in the same job (``bench/train_h200.py --phases baseline,speed``), not across machines.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: the repository's packages first
from bench.baselines.ceilings import ceilings  # noqa: E402
from bench.baselines.common import Shape, next_token_step, run_all, speed_shape, train_record  # noqa: E402

TIMED_STEPS = 12
ROTARY_BASE = 10_000.0
#: ``--smoke``: a shape that trains anywhere in seconds, to check the script end to end (it measures nothing).
SMOKE = Shape(vocab=512, hidden=64, layers=2, heads=4, ffn=128, seq=64, micro_batch=2)


class RMSNorm(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, 1e-5)


def rotary_tables(seq: int, head_dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE's cos and sin, [1, 1, seq, head_dim / 2] (fp32)."""
    inverse = 1.0 / (ROTARY_BASE ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    angles = torch.outer(torch.arange(seq, device=device).float(), inverse)
    return angles.cos()[None, None], angles.sin()[None, None]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on interleaved pairs of the last dimension."""
    even, odd = x[..., ::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), -1).flatten(-2)


class Block(nn.Module):
    """Pre-norm block: ``x + attention(norm(x))``, then ``x + w2(silu(gate) * up)`` of ``norm(x)``."""

    def __init__(self, shape: Shape) -> None:
        super().__init__()
        width, self.heads = shape.hidden, shape.heads
        self.attention_norm, self.mlp_norm = RMSNorm(width), RMSNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.projection = nn.Linear(width, width, bias=False)
        self.gate_up = nn.Linear(width, 2 * shape.ffn, bias=False)
        self.down = nn.Linear(shape.ffn, width, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        qkv = self.qkv(self.attention_norm(x)).view(batch, seq, 3, self.heads, width // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.projection(attended.transpose(1, 2).reshape(batch, seq, width))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, -1)
        return x + self.down(F.silu(gate) * up)


class GPT(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.embedding = nn.Embedding(shape.vocab, shape.hidden)
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.final_norm = RMSNorm(shape.hidden)
        self.output = nn.Linear(shape.hidden, shape.vocab, bias=False)

    def forward(self, tokens: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.output(self.final_norm(x))


def train(shape: Shape, device: torch.device, steps: int, compiled: bool = False, fp8: bool = False) -> dict:
    """One configuration's :func:`~bench.baselines.common.train_record`."""
    torch.manual_seed(0)
    model = GPT(shape).to(device)
    if fp8:
        from torchao.float8 import convert_to_float8_training

        convert_to_float8_training(model, module_filter_fn=lambda module, name: name != "output")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    forward = torch.compile(model) if compiled else model
    cos, sin = rotary_tables(shape.seq, shape.hidden // shape.heads, device)
    tokens = torch.randint(0, shape.vocab, (shape.micro_batch, shape.seq + 1), device=device)
    step = next_token_step(lambda inputs: forward(inputs, cos, sin), tokens, optimizer,
                           lambda: torch.autocast(device.type, dtype=torch.bfloat16))
    return train_record(model, step, shape, steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="a tiny shape for two steps on whatever device is "
                        "there (the CPU too): checks the script, measures nothing")
    args = parser.parse_args()
    if not (torch.cuda.is_available() or args.smoke):
        raise SystemExit("the baseline needs a CUDA GPU (--smoke runs a tiny shape on the CPU)")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shape, steps = (SMOKE, 2) if args.smoke else (speed_shape(), TIMED_STEPS)
    runs = {"train_eager_bf16": lambda: train(shape, device, steps),
            "train_compile_bf16": lambda: train(shape, device, steps, compiled=True),
            "train_compile_fp8_torchao": lambda: train(shape, device, steps, compiled=True, fp8=True)}
    run_all("baseline", runs, {} if args.smoke else ceilings())


if __name__ == "__main__":
    main()
