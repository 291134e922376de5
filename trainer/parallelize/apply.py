"""The one step that turns a model config into this rank's trainable share of the model, in one order:

1. **pipeline split**: which global stages (layers, and the embedding or the output layer) this rank's chunks
   hold (:func:`~trainer.parallelize.layout.local_stage_indices`; one chunk, or ``V`` under interleaving);
2. **tensor parallel**: each chunk is built with the :class:`~trainer.parallel.state.ParallelState`, so every
   layer holds its TP shard of the weights and calls the TP collectives around its GEMM;
3. **precision**: the chunks' linears run the run's local GEMM (the FP8 backend's under ``--fp8-format``) and,
   under ``--main-params-dtype bf16``, their weights are bf16 (the optimizer's only copy);
4. **recompute**: under ``--recompute-granularity full`` each chunk recomputes its blocks in the backward pass
   (the model's flag; FP8 delayed scaling's calibration step forces it on for that step);
5. **compile**: ``--compile`` compiles every chunk's blocks, final norm and fused loss step;
6. **data parallel**: the :class:`~trainer.parallelize.engine.StepEngine` puts the chunks behind the pipeline
   schedule (PP > 1) and the gradient reduction over the DP group (buckets, ZeRO-1); with ``num_sources`` its
   loss and token sums carry each source's part too.

Each step depends on the ones before it (compiled code sees the FP8 GEMM and the bf16 weights; the gradient
buckets are laid over the final parameters), which is why this order is the only one.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from trainer.config.schema import TrainConfig
from trainer.fp8.backends import FP8Engine
from trainer.model.attention import AttentionBackend
from trainer.parallel.state import ParallelState
from trainer.parallelize.compile import compile_model, should_compile
from trainer.parallelize.engine import StepEngine
from trainer.parallelize.layout import build_chunks
from trainer.runtime.device import Precision


def parallelize(config: TrainConfig, parallel: ParallelState, precision: Precision, fp8: FP8Engine,
                attention: AttentionBackend, vocab_size: int, seq_length: int,
                micro_batches: int, num_sources: int = 0) -> tuple[StepEngine, bool]:
    """This rank's model chunks, built and wrapped in the order of the module docstring, behind their step
    engine; and whether their blocks were compiled."""
    chunks, stage_indices = build_chunks(replace(config.model, gemm_backend=fp8.gemm_name), vocab_size, seq_length,
                                         parallel, attention, config.training.seed)
    if config.optim.main_params_dtype == "bf16":
        for param in (param for chunk in chunks for param in chunk.parameters()):
            # the init drew fp32 weights: these are them rounded to nearest; buffers (FP8 scales) keep fp32
            param.data = param.data.to(torch.bfloat16)
    why_eager = None if fp8.compilable else "the te FP8 backend cannot be traced"
    compiled = should_compile(config.model.compile, parallel.device, why_eager)
    if compiled:
        for chunk in chunks:
            compile_model(chunk)
    engine = StepEngine(chunks, stage_indices, parallel, precision, fp8, config.parallel, micro_batches,
                        config.training.micro_batch_size, num_sources)
    return engine, compiled
