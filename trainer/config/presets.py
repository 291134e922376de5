"""Named model shapes (``--preset NAME``). Adding a preset is adding one entry to :data:`PRESETS`.

Every preset is a Llama-style decoder (RMSNorm, RoPE, SwiGLU, grouped-query attention, untied
output layer). The vocabulary is not part of a shape: it comes from the tokenizer recorded in the data.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    """The shape fields a preset fills in (any of them can be overridden by its flag)."""

    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    ffn_hidden_size: int
    rotary_base: float
    description: str


PRESETS: dict[str, ModelShape] = {
    "tiny": ModelShape(4, 128, 4, 2, 352, 10_000.0,
                       "~0.7M parameters besides the embeddings: CPU tests and the quickstart"),
    "125m": ModelShape(12, 768, 12, 12, 2048, 10_000.0, "GPT-3 Small width with SwiGLU"),
    "350m": ModelShape(24, 1024, 16, 16, 2816, 10_000.0, "GPT-3 Medium width with SwiGLU"),
    # NOTE: exactly the model of bench/baselines/ (the GPU comparisons): keep it so throughput compares.
    "1.3b": ModelShape(24, 2048, 16, 16, 5632, 10_000.0, "DESIGN §7 baseline shape (1.37B with a 32k vocabulary)"),
    "8b": ModelShape(32, 4096, 32, 8, 14336, 500_000.0, "Llama-3-8B shape (GQA with 8 KV heads, RoPE base 500k)"),
}


def preset_table() -> str:
    """One line per preset, for ``--help`` and error messages."""
    return "; ".join(
        f"{name}: {s.num_layers}L d{s.hidden_size} h{s.num_attention_heads}/kv{s.num_query_groups} "
        f"ffn{s.ffn_hidden_size}"
        for name, s in PRESETS.items()
    )
