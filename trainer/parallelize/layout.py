"""Which model a TP × PP × DP layout can train, and which share of it each pipeline rank holds.

:func:`validate_layout` checks the model's shape against the parallel sizes before anything is built,
with an error naming the flags to change. Pipeline stages split the layers evenly; with ``V`` virtual
stages per rank (interleaved 1F1B), global stage ``s = chunk × PP + pp_rank`` holds layers
``[s·L/(PP·V), (s+1)·L/(PP·V))`` — the order ``torch.distributed.pipelining``'s interleaved schedule
and Megatron both use.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from corpus.core.errors import ConfigError
from trainer.config.schema import ModelConfig, ParallelConfig
from trainer.model.attention import AttentionBackend
from trainer.model.gpt import GPT, StageSpec, build_model, parameter_counts
from trainer.parallel.state import ParallelState


def virtual_stages(config: ParallelConfig, num_layers: int) -> int:
    """Model chunks per pipeline rank (1 without interleaving)."""
    if config.virtual_pipeline_model_parallel_size is not None:
        return config.virtual_pipeline_model_parallel_size
    per_stage = config.num_layers_per_virtual_pipeline_stage
    if per_stage is None:
        return 1
    span = per_stage * config.pipeline_model_parallel_size
    if num_layers % span:
        raise ConfigError(f"--num-layers {num_layers} is not divisible by --num-layers-per-virtual-pipeline-stage "
                          f"{per_stage} × --pipeline-model-parallel-size {config.pipeline_model_parallel_size}")
    return num_layers // span


def _divisible(value: int, by: int, what: str, how: str) -> None:
    if value % by:
        raise ConfigError(f"{what} {value} is not divisible by {how} {by}")


def validate_layout(model: ModelConfig, parallel: ParallelState, seq_length: int, micro_batches: int) -> None:
    """Refuse a model shape or batch the layout cannot split evenly (each message names the flags)."""
    tp, stages = parallel.tp_size, parallel.pp_size * parallel.vpp_size
    how = "--tensor-model-parallel-size"
    _divisible(model.num_attention_heads, tp, "--num-attention-heads", how)
    _divisible(model.num_query_groups, tp, "--num-query-groups (key/value heads; each TP rank holds whole groups)",
               how)
    _divisible(model.ffn_hidden_size, tp, "--ffn-hidden-size", how)
    if parallel.sequence_parallel:
        _divisible(seq_length, tp, "--seq-length (split over the TP group by --sequence-parallel)", how)
    _divisible(model.num_layers, stages, "--num-layers",
               "the number of pipeline stages (--pipeline-model-parallel-size × virtual stages per rank) =")
    if parallel.pp_size > 1 and micro_batches < parallel.pp_size:
        raise ConfigError(f"{micro_batches} micro-batch(es) per step (--global-batch-size / (--micro-batch-size × DP "
                          f"{parallel.dp_size})) cannot fill {parallel.pp_size} pipeline stages; raise "
                          "--global-batch-size or lower --micro-batch-size to get at least one per stage")
    if parallel.vpp_size > 1:
        rounds = max(1, micro_batches // parallel.pp_size)
        if micro_batches % rounds:
            raise ConfigError(f"interleaved 1F1B runs micro-batches in rounds of about PP = {parallel.pp_size}: "
                              f"{micro_batches} micro-batches per step is not a multiple of {rounds} rounds; use a "
                              f"multiple of {parallel.pp_size} (set by --global-batch-size)")


def stage_spec(num_layers: int, num_stages: int, index: int) -> StageSpec:
    """What global pipeline stage ``index`` of ``num_stages`` holds."""
    per = num_layers // num_stages
    return StageSpec(range(index * per, (index + 1) * per), first=index == 0, last=index == num_stages - 1)


def local_stage_indices(parallel: ParallelState) -> list[int]:
    """Global stage indices of this rank's model chunks, in chunk order."""
    return [chunk * parallel.pp_size + parallel.pp_rank for chunk in range(parallel.vpp_size)]


def build_chunks(config: ModelConfig, vocab_size: int, seq_length: int, parallel: ParallelState,
                 attention: AttentionBackend, seed: int) -> tuple[list[GPT], list[int]]:
    """This rank's model chunks (one per virtual stage, each initialised as the whole model would be) and
    their global stage indices."""
    indices = local_stage_indices(parallel)
    num_stages = parallel.pp_size * parallel.vpp_size
    chunks = [build_model(config, vocab_size, seq_length, parallel, attention, seed,
                          stage_spec(config.num_layers, num_stages, index)) for index in indices]
    return chunks, indices


def whole_model_counts(config: ModelConfig, vocab_size: int, seq_length: int, attention: AttentionBackend) -> dict:
    """:func:`~trainer.model.gpt.parameter_counts` of the whole unsplit model (built on the meta device)."""
    with torch.device("meta"):
        model = GPT(config, vocab_size, seq_length, ParallelState(torch.device("meta")), attention)
    return parameter_counts(model)


def describe(parallel: ParallelState, config: ParallelConfig) -> str:
    """One log line for the layout and the data-parallel options."""
    virtual = f" × {parallel.vpp_size} virtual" if parallel.vpp_size > 1 else ""
    options = [name for name, on in (("sequence parallel", parallel.sequence_parallel),
                                     ("distributed optimizer", config.use_distributed_optimizer),
                                     ("overlapped grad reduce", config.overlap_grad_reduce),
                                     ("overlapped param gather", config.overlap_param_gather)) if on]
    backend = dist.get_backend() if dist.is_initialized() else "none"
    return (f"parallel: world {parallel.world_size} = TP {parallel.tp_size} × PP {parallel.pp_size}{virtual} × DP "
            f"{parallel.dp_size} (rank {parallel.rank}: tp {parallel.tp_rank}, dp {parallel.dp_rank}, pp "
            f"{parallel.pp_rank}); {', '.join(options) or 'no overlap options'}; backend {backend}")
