"""The GPT: a Llama-style decoder (RMSNorm, RoPE, SwiGLU, grouped-query attention, untied output layer).

Weight layouts follow Megatron so tensor parallelism splits them on one dimension:
- ``qkv``: rows grouped per key/value head, ``[q heads of the group…, k, v]`` × head_dim each; a TP shard
  is a contiguous block of whole groups;
- ``fc1``: ``[gate; up]`` of the SwiGLU, per TP shard.
``trainer.checkpoint.export`` maps these onto transformers' Llama names.

Build with :func:`build_model`: parameters are created on the ``meta`` device, materialised on the
target device and initialised from the seed there (NOTE: no full-size CPU copy of a large model).

A pipeline stage is a :class:`GPT` too, holding a :class:`StageSpec`'s share: some layers, plus the
embedding on the first stage and the final norm and output layer on the last. Parameter names stay
the whole model's (:meth:`GPT.global_name`), and each module is initialised from a seed derived from
that name and its whole (unsharded) weight, so every TP × PP layout starts from the same weights.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from corpus.core.errors import ConfigError
from trainer.config.schema import ModelConfig
from trainer.model.attention import AttentionBackend
from trainer.model.fused_loss import ChunkLoss, chunk_loss_and_grad, fused_token_losses
from trainer.model.layers import (
    ColumnParallelLinear,
    LocalGemm,
    RMSNorm,
    RotaryEmbedding,
    RowParallelLinear,
    VocabParallelEmbedding,
    local_gemm,
    scaled_init_std,
)
from trainer.parallel.collectives import TensorParallel
from trainer.parallel.state import ParallelState
from trainer.parallel.vocab_cross_entropy import token_losses


def residual_dtype(config: ModelConfig, compute_dtype: torch.dtype) -> torch.dtype:
    """Dtype of the hidden states between blocks and stages: the compute dtype (Megatron's default), fp32
    under ``--fp32-residual-connection``."""
    return torch.float32 if config.fp32_residual_connection else compute_dtype


class SelfAttention(nn.Module):
    """Grouped-query causal self-attention with rotary positions."""

    def __init__(self, config: ModelConfig, parallel: ParallelState, attention: AttentionBackend,
                 gemm: LocalGemm) -> None:
        super().__init__()
        if config.num_query_groups % parallel.tp_size:
            raise ConfigError(f"--num-query-groups {config.num_query_groups} is not divisible by the tensor-parallel "
                              f"size {parallel.tp_size}: each TP rank holds whole key/value heads")
        groups_per_rank = config.num_query_groups // parallel.tp_size
        self.shape = (groups_per_rank, config.num_attention_heads // config.num_query_groups, config.head_dim)
        width = (config.num_attention_heads + 2 * config.num_query_groups) * config.head_dim
        out_std = scaled_init_std(config.init_method_std, config.num_layers)
        self.qkv = ColumnParallelLinear(config.hidden_size, width, parallel, config.init_method_std, gemm)
        self.proj = RowParallelLinear(config.num_attention_heads * config.head_dim, config.hidden_size, parallel,
                                      out_std, gemm)
        self.attention = attention

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                cu_seqlens: torch.Tensor | None) -> torch.Tensor:
        # NOTE: the whole sequence, also when x is this rank's slice (sequence parallel)
        q, k, v = self.qkv.rotary_heads(x, rotary, self.shape)
        out = self.attention.attend(q, k, v, cu_seqlens)
        return self.proj(out.reshape(*q.shape[:2], -1))


class SwiGLU(nn.Module):
    """``down(silu(gate(x)) * up(x))`` with gate and up fused in one GEMM."""

    def __init__(self, config: ModelConfig, parallel: ParallelState, gemm: LocalGemm) -> None:
        super().__init__()
        out_std = scaled_init_std(config.init_method_std, config.num_layers)
        self.fc1 = ColumnParallelLinear(config.hidden_size, 2 * config.ffn_hidden_size, parallel,
                                        config.init_method_std, gemm, stacked=2)
        self.fc2 = RowParallelLinear(config.ffn_hidden_size, config.hidden_size, parallel, out_std, gemm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.fc1.swiglu(x))


class TransformerLayer(nn.Module):
    """Pre-norm block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))`` — with that last add left to the
    next block (or the final norm), which takes ``(residual, branch)`` and adds them before its first norm.

    NOTE: the block-end add as a kernel of its own reads two hidden-state tensors and writes one; added in the next
    compiled block it fuses into that block's first norm kernel, as the mid-block add fuses into the second norm
    (bench/RESULTS.md)."""

    def __init__(self, config: ModelConfig, parallel: ParallelState, attention: AttentionBackend,
                 gemm: LocalGemm) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(config.hidden_size, config.norm_epsilon)
        self.attn = SelfAttention(config, parallel, attention, gemm)
        self.mlp_norm = RMSNorm(config.hidden_size, config.norm_epsilon)
        self.mlp = SwiGLU(config, parallel, gemm)

    def forward(self, residual: torch.Tensor, branch: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                cu_seqlens: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The block's input is ``residual + branch`` (the previous block's residual stream and MLP output);
        returns this block's residual stream and MLP output, still to be added."""
        x = residual + branch
        x = x + self.attn(self.attn_norm(x), rotary, cu_seqlens)
        return x, self.mlp(self.mlp_norm(x))


@dataclass(frozen=True)
class StageSpec:
    """The share of the model one pipeline chunk holds: global layer indices, and whether it has the
    embedding (first) and the final norm + output layer (last)."""

    layers: range
    first: bool = True
    last: bool = True

    @classmethod
    def whole(cls, num_layers: int) -> StageSpec:
        """The whole model (no pipeline parallelism)."""
        return cls(range(num_layers))


def _module_seed(seed: int, name: str) -> int:
    return (seed * 1_000_003 + zlib.crc32(name.encode())) % 2**63


class GPT(nn.Module):
    """Embedding → layers → final norm → output layer (logits over the padded vocabulary, this TP rank's
    slice), or the part of it a :class:`StageSpec` names."""

    def __init__(self, config: ModelConfig, vocab_size: int, seq_length: int, parallel: ParallelState,
                 attention: AttentionBackend, stage: StageSpec | None = None) -> None:
        super().__init__()
        gemm = local_gemm(config.gemm_backend)
        self.config, self.vocab_size, self.seq_length = config, vocab_size, seq_length
        self.stage = stage or StageSpec.whole(config.num_layers)
        self.tp = TensorParallel(parallel)
        self.embedding = (VocabParallelEmbedding(vocab_size, config.hidden_size, parallel, config.init_method_std)
                          if self.stage.first else None)
        self.rope = RotaryEmbedding(config.head_dim, config.rotary_base, seq_length)
        self.layers = nn.ModuleList(TransformerLayer(config, parallel, attention, gemm) for _ in self.stage.layers)
        self.final_norm = RMSNorm(config.hidden_size, config.norm_epsilon) if self.stage.last else None
        # NOTE: the output layer keeps the plain GEMM (bf16 under autocast) whatever the blocks use (FP8).
        self.output = (ColumnParallelLinear(config.hidden_size, vocab_size, parallel, config.init_method_std,
                                            local_gemm("plain")) if self.stage.last else None)
        self.recompute = config.recompute_granularity == "full"
        self.fused_loss = uses_fused_loss(config, parallel)
        self.chunk_loss: ChunkLoss = chunk_loss_and_grad  # compiled with the blocks (trainer.parallelize.compile)

    def global_name(self, name: str) -> str:
        """The whole model's name of parameter/module ``name`` of this stage (``layers.<global index>…``)."""
        parts = name.split(".", 2)
        if parts[0] == "layers" and len(parts) > 1:
            parts[1] = str(self.stage.layers[int(parts[1])])
        return ".".join(parts)

    def init_weights(self, seed: int) -> None:
        """(Re)initialise every parameter and buffer (Megatron's normal init), each module from a seed of
        ``seed`` and its global name, whatever the TP/PP layout."""
        device = next(self.parameters()).device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.no_grad():
            for name, module in self.named_modules():
                if hasattr(module, "reset_parameters") and module is not self:
                    torch.manual_seed(_module_seed(seed, self.global_name(name)))
                    module.reset_parameters()

    def hidden_states(self, inputs: torch.Tensor, position_ids: torch.Tensor,
                      cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden states [B, S, d] after this stage's layers for ``inputs`` (token ids [B, S] on the first
        stage, else the previous stage's hidden states), through the final norm on the last stage (what the
        output layer reads). Each block is recomputed in the backward pass under full recompute."""
        kind = position_ids.device.type
        dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else torch.float32
        x = self.embedding(inputs).to(residual_dtype(self.config, dtype)) if self.embedding is not None else inputs
        # NOTE: zeros, not None, as the first block's branch, and needing a gradient as the later blocks' branch does
        # (Dynamo guards on both): every block then runs the same compiled graph, compiled once
        branch = torch.zeros_like(x, requires_grad=torch.is_grad_enabled())
        rotary = self.rope(position_ids, dtype)
        for layer in self.layers:
            if self.recompute and torch.is_grad_enabled():
                x, branch = checkpoint(layer, x, branch, rotary, cu_seqlens, use_reentrant=False)
            else:
                x, branch = layer(x, branch, rotary, cu_seqlens)
        return self.final_norm(x, branch) if self.final_norm is not None else x + branch

    def forward(self, inputs: torch.Tensor, position_ids: torch.Tensor,
                cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [B, S, vocab / TP] for ``inputs`` (see :meth:`hidden_states`); a stage without the output
        layer returns its hidden states."""
        x = self.hidden_states(inputs, position_ids, cu_seqlens)
        return self.output(x) if self.output is not None else x

    def loss_sum(self, batch: dict[str, torch.Tensor], inputs: torch.Tensor | None = None,
                 num_sources: int = 0) -> torch.Tensor:
        """[1 + num_sources] on the last stage: the sum of the masked token losses of a micro-batch (fp32), then
        each source's part of it, by the batch's ``source_ids`` (detached: telemetry, no gradient). ``inputs``
        are the previous stage's hidden states (None: the batch's tokens). Through the fused chunked loss when
        ``--cross-entropy-loss-fusion`` is on (TP 1: the logits are never materialised), else the
        vocab-parallel cross-entropy of the logits (every TP rank then holds every token's loss)."""
        inputs = batch["tokens"] if inputs is None else inputs
        if self.fused_loss:
            hidden = self.hidden_states(inputs, batch["position_ids"], batch.get("cu_seqlens"))
            total, losses = fused_token_losses(hidden, self.output.weight, batch["labels"], batch["loss_mask"],
                                               self.chunk_loss)
        else:
            logits = self(inputs, batch["position_ids"], batch.get("cu_seqlens"))
            losses = masked_token_losses(logits, batch["labels"], batch["loss_mask"], self.tp)
            total = losses.sum()
        if not num_sources:
            return total.reshape(1)
        return torch.cat([total.reshape(1), source_sums(losses.detach(), batch["source_ids"], num_sources)])


def masked_token_losses(logits: torch.Tensor, labels: torch.Tensor, loss_mask: torch.Tensor,
                        tp: TensorParallel | None = None) -> torch.Tensor:
    """The cross-entropy of each token times its loss mask, fp32, shaped like ``labels``. ``logits`` may be a TP
    rank's vocabulary slice (vocab-parallel cross-entropy)."""
    return token_losses(logits, labels, tp) * loss_mask.float()


def token_loss_sum(logits: torch.Tensor, labels: torch.Tensor, loss_mask: torch.Tensor,
                   tp: TensorParallel | None = None) -> torch.Tensor:
    """Sum over unmasked tokens of the cross-entropy, in fp32 (the caller divides by the token count of
    the whole global batch, so accumulation over micro-batches equals one big batch)."""
    return masked_token_losses(logits, labels, loss_mask, tp).sum()


def source_sums(values: torch.Tensor, source_ids: torch.Tensor, num_sources: int) -> torch.Tensor:
    """Sums of ``values`` [B, ...] per source [num_sources], in ``values``' dtype, by the source of each sample
    ``source_ids`` [B]. A masked sum over a one-hot matrix, not ``index_add_`` (CUDA's atomic adds sum in any
    order) nor a matmul (TF32 on CUDA): the same bits at every run."""
    per_sample = values.flatten(1).sum(1)
    one_hot = torch.nn.functional.one_hot(source_ids.to(per_sample.device), num_sources).to(per_sample.dtype)
    return (per_sample[:, None] * one_hot).sum(0)


def build_model(config: ModelConfig, vocab_size: int, seq_length: int, parallel: ParallelState,
                attention: AttentionBackend, seed: int, stage: StageSpec | None = None) -> GPT:
    """The GPT (or its ``stage``) on ``parallel.device``, initialised from ``seed`` (fp32 master weights)."""
    with torch.device("meta"):
        model = GPT(config, vocab_size, seq_length, parallel, attention, stage)
    model.to_empty(device=parallel.device)
    model.init_weights(seed)
    return model


def uses_fused_loss(config: ModelConfig, parallel: ParallelState) -> bool:
    """Whether the model computes its loss chunk by chunk (``--cross-entropy-loss-fusion``; default: on CUDA)."""
    fusion = config.cross_entropy_loss_fusion
    # NOTE: the fused loss assumes the whole vocabulary on this rank; under TP the vocab-parallel loss runs.
    return (parallel.device.type == "cuda" if fusion is None else fusion) and parallel.tp_size == 1


def parameter_counts(model: GPT) -> dict[str, int]:
    """Parameters in total, in the input embedding, and in matmuls (every weight but the input embedding
    and the norm scales: the N of the FLOP formula)."""
    total = sum(p.numel() for p in model.parameters())
    embedding = model.embedding.weight.numel()
    norms = sum(p.numel() for module in model.modules() if isinstance(module, RMSNorm) for p in module.parameters())
    return {"total": total, "embedding": embedding, "matmul": total - embedding - norms}
