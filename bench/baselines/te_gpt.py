"""The Transformer Engine baseline (what a Megatron-core + TE user runs): the trainer's speed shape
(``bench/baselines/common.py``) built from ``te.TransformerLayer`` (RMSNorm, SwiGLU, fused QKV, causal attention,
RoPE; bf16 parameters), an embedding and output layer in torch, fused AdamW, bf16 autocast; trained in bf16, with
FP8 delayed scaling (``DelayedScaling()``'s defaults: amax history 1024, max) and with FP8 current scaling.

    python3 bench/baselines/te_gpt.py         # one GPU with transformer-engine (the gpu extra); $OUT/te_baseline.json

Each configuration: a fresh model (seed 0), 3 untimed steps, then 10 timed back to back on one random batch;
tokens/s, MFU, peak memory and the last loss (``te_<configuration>`` in the JSON).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: the repository's packages first
from bench.baselines.common import Shape, next_token_step, run_all, speed_shape, train_record  # noqa: E402
from corpus.core.optional import missing  # noqa: E402

TIMED_STEPS = 10


def te_model(shape: Shape) -> nn.Module:
    """The GPT of ``shape`` with Transformer Engine's blocks and final norm."""
    import transformer_engine.pytorch as te
    from transformer_engine.pytorch.attention import RotaryPositionEmbedding

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embedding = nn.Embedding(shape.vocab, shape.hidden)
            self.blocks = nn.ModuleList(te.TransformerLayer(
                shape.hidden, shape.ffn, shape.heads, bias=False, normalization="RMSNorm", activation="swiglu",
                self_attn_mask_type="causal", fuse_qkv_params=True, hidden_dropout=0.0, attention_dropout=0.0,
                layer_number=number + 1, params_dtype=torch.bfloat16, attn_input_format="bshd")
                for number in range(shape.layers))
            self.final_norm = te.RMSNorm(shape.hidden, params_dtype=torch.bfloat16)
            self.output = nn.Linear(shape.hidden, shape.vocab, bias=False)
            self.rotary = RotaryPositionEmbedding(shape.hidden // shape.heads)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            x = self.embedding(tokens).to(torch.bfloat16)
            rotary = self.rotary(shape.seq).cuda()
            for block in self.blocks:
                x = block(x, rotary_pos_emb=rotary)
            return self.output(self.final_norm(x))

    return GPT()


def train(shape: Shape, recipe_name: str | None) -> dict:
    """One configuration's :func:`~bench.baselines.common.train_record`: bf16 (``recipe_name`` None) or FP8 with
    TE's ``DelayedScaling`` or ``Float8CurrentScaling`` recipe."""
    import transformer_engine.pytorch as te
    from transformer_engine.common import recipe as recipes

    torch.manual_seed(0)
    model = te_model(shape).cuda()
    recipe = getattr(recipes, recipe_name)() if recipe_name else None
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, shape.vocab, (shape.micro_batch, shape.seq + 1), device="cuda")

    @contextlib.contextmanager
    def precision() -> Iterator[None]:
        with torch.autocast("cuda", dtype=torch.bfloat16), te.fp8_autocast(enabled=recipe is not None,
                                                                            fp8_recipe=recipe):
            yield

    return train_record(model, next_token_step(model, tokens, optimizer, precision), shape, TIMED_STEPS)


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("the Transformer Engine baseline needs a CUDA GPU")
    warnings.filterwarnings("ignore")  # TE warns at import and on every FP8 call (deprecations, recipes)
    # NOTE: TE imported before anything loads torch's cuDNN: after it, TE's import fails on an undefined symbol
    reason = missing("transformer_engine.pytorch")
    if reason:
        raise SystemExit(f"{reason}: install Transformer Engine (the gpu extra: pip install -e '.[gpu]')")
    shape = speed_shape()
    run_all("te_baseline", {"te_bf16": lambda: train(shape, None),
                            "te_fp8_delayed": lambda: train(shape, "DelayedScaling"),
                            "te_fp8_current": lambda: train(shape, "Float8CurrentScaling")})


if __name__ == "__main__":
    main()
