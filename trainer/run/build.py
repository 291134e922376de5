"""Assemble a run from its config (device, data, model, optimizer, schedule, metrics) and move it in
and out of checkpoints. :mod:`trainer.run.loop` drives what this builds."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from trainer.checkpoint import store as checkpoint
from trainer.model.attention import AttentionBackend, AttentionShape, select_backend
from trainer.parallelize.compile import cache_file, compile_model, load_compiled, should_compile
from trainer.config.schema import ModelConfig, TrainConfig, padded_vocab_size
from trainer.run.data import TrainData, build_data
from trainer.errors import CheckpointError, ConfigError
from trainer.fp8 import FP8Engine, select_fp8
from trainer.run.metrics import FLOP_CONVENTION, MetricsSink, flops_per_token, peak_tflops
from trainer.model.gpt import GPT
from trainer.optim.optimizer import build_optimizer
from trainer.parallelize.engine import StepEngine
from trainer.parallelize.layout import build_chunks, describe, validate_layout, virtual_stages, whole_model_counts
from trainer.checkpoint.state_dict import (copy_padded_rows, fit_padded_rows, init_optimizer_state, model_state,
                                         optimizer_state)
from trainer.parallel.state import ParallelState, init_parallel
from trainer.runtime.runtime import Precision, pick_device, pick_precision, rng_state, seed_everything, set_rng_state
from trainer.optim.schedule import LRSchedule

log = logging.getLogger(__name__)


@dataclass
class Run:
    """Everything the loop touches, built once by :func:`build_run`."""

    config: TrainConfig
    parallel: ParallelState
    precision: Precision
    data: TrainData
    model: GPT  # this rank's first model chunk (the whole model without pipeline parallelism)
    optimizer: torch.optim.Optimizer
    schedule: LRSchedule
    global_batch_size: int
    accumulation: int
    flops_per_token: float
    peak_tflops: float | None
    engine: StepEngine  # all of this rank's chunks, the pipeline schedule, gradient reduction
    iteration: int = 0
    checkpoint_dir: Path | None = None  # the last checkpoint written or loaded
    checkpoint_iteration: int | None = None
    iterators: dict = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    fp8: FP8Engine = field(default_factory=lambda: FP8Engine("plain"))  # bf16/fp32 unless --fp8-format
    compile_cache: Path | None = None  # --compile-cache's file for this rank, when the blocks are compiled

    def batches(self, split: str):
        """The (persistent) micro-batch iterator of ``split``."""
        if split not in self.iterators:
            self.iterators[split] = iter(self.data.loaders[split])
        return self.iterators[split]


def model_vocab_size(model: ModelConfig, tokenizer_vocab: int | None, tensor_parallel_size: int) -> int:
    """The padded vocabulary of the model: ``--vocab-size`` or the tokenizer's, padded as Megatron pads it."""
    if model.vocab_size is None and tokenizer_vocab is None:
        raise ConfigError("the data records no tokenizer vocabulary (files without a .meta.json sidecar, e.g. "
                          "written by Megatron); give the model's vocabulary with --vocab-size")
    if model.vocab_size is not None and tokenizer_vocab is not None and tokenizer_vocab > model.vocab_size:
        raise ConfigError(f"the data's tokenizer has {tokenizer_vocab} ids but --vocab-size is {model.vocab_size}: "
                          f"the model could not embed them; raise --vocab-size to at least {tokenizer_vocab} or drop "
                          "it (the default is the tokenizer's)")
    size = model.vocab_size if model.vocab_size is not None else tokenizer_vocab
    return padded_vocab_size(size, model.make_vocab_size_divisible_by, tensor_parallel_size)


def _batch_sizes(config: TrainConfig, parallel: ParallelState) -> tuple[int, int]:
    micro = config.training.micro_batch_size
    global_batch = config.training.global_batch_size or micro * parallel.dp_size
    if global_batch % (micro * parallel.dp_size):
        raise ConfigError(f"--global-batch-size {global_batch} must be a multiple of --micro-batch-size {micro} × "
                          f"data-parallel size {parallel.dp_size}")
    return global_batch, global_batch // (micro * parallel.dp_size)


def _quiet_unless_logging(parallel: ParallelState) -> None:
    """Only the logging rank speaks at INFO; the others keep warnings and errors."""
    if not parallel.is_logging_rank:
        for name in ("trainer", "corpus"):
            logging.getLogger(name).setLevel(logging.WARNING)


def _build_engine(config: TrainConfig, parallel: ParallelState, precision: Precision, fp8: FP8Engine,
                  attention: AttentionBackend, vocab: int, seq_length: int, accumulation: int) -> tuple[StepEngine, bool]:
    """This rank's model chunks on the run's local GEMM (FP8 or not) behind the step engine, and whether
    their blocks were compiled (``--compile``: the blocks of every chunk)."""
    chunks, stage_indices = build_chunks(replace(config.model, gemm_backend=fp8.gemm_name), vocab, seq_length,
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
    engine = StepEngine(chunks, stage_indices, parallel, precision, fp8, config.parallel, accumulation,
                        config.training.micro_batch_size)
    return engine, compiled


def build_run(config: TrainConfig) -> Run:
    """Build every component of ``config`` (logging the choices made), then resume if ``--load`` says so."""
    device = pick_device(config.training.device)
    parallel = init_parallel(config.parallel, device, virtual_stages(config.parallel, config.model.num_layers))
    _quiet_unless_logging(parallel)
    precision = pick_precision(config.training, device)
    if config.optim.main_params_dtype == "bf16" and precision.name != "bf16":
        raise ConfigError(f"--main-params-dtype bf16 keeps the weights in bf16, but this run computes in "
                          f"{precision.name} (--precision auto is fp32 on CPU): add --bf16, or drop "
                          "--main-params-dtype")
    seed_everything(config.training.seed)
    global_batch, accumulation = _batch_sizes(config, parallel)
    data = build_data(config, parallel, global_batch)
    model_config = config.model
    validate_layout(model_config, parallel, data.seq_length, accumulation)
    vocab = model_vocab_size(model_config, data.vocab_size, parallel.tp_size)
    shape = AttentionShape(config.training.micro_batch_size, data.seq_length, model_config.num_attention_heads // parallel.tp_size,
                           model_config.num_query_groups // parallel.tp_size, model_config.head_dim, precision.dtype,
                           config.data.reset_attention_mask)
    # NOTE: the FP8 backend first: Transformer Engine fails to import ("undefined symbol" in libcudnn_cnn)
    # once the attention probe has loaded torch's own cuDNN (seen on the H200 with TE 2.20.2).
    fp8 = select_fp8(config.fp8, device, model_config.gemm_backend)
    attention = select_backend(model_config.attention_backend, device, shape)
    engine, compiled = _build_engine(config, parallel, precision, fp8, attention, vocab, data.seq_length, accumulation)
    counts = whole_model_counts(model_config, vocab, data.seq_length, attention)
    peak, peak_note = peak_tflops(device, config.logging.peak_tflops)
    run = Run(config, parallel, precision, data, engine.chunks[0],
              build_optimizer(engine.reducer.optimizer_parameters(), config.optim, device),
              LRSchedule(config.optim, config.training.train_iters), global_batch, accumulation,
              flops_per_token(model_config, counts["matmul"], data.seq_length), peak, engine, fp8=fp8)
    fp8.parts.attach_optimizer(run.optimizer)
    log.info("model: preset %s, %d layers, d=%d, %d heads / %d kv, ffn %d, vocab %d (padded), %.1fM parameters "
             "(%.1fM in matmuls)", model_config.preset, model_config.num_layers,
             model_config.hidden_size, model_config.num_attention_heads, model_config.num_query_groups,
             model_config.ffn_hidden_size, vocab, counts["total"] / 1e6, counts["matmul"] / 1e6)
    log.info(describe(parallel, config.parallel))
    log.info("device %s, precision %s, global batch %d = micro %d × accumulation %d × DP %d, seq %d; %s",
             device, precision.name, global_batch, config.training.micro_batch_size, accumulation, parallel.dp_size,
             data.seq_length, data.description)
    blocks = ("compiled (torch.compile, during the first step: minutes when Inductor's cache is cold, ~3 min for "
              "the 1.3b FP8 blocks on an H200)" if compiled else "eager")
    loss = "fused chunked cross-entropy" if run.model.fused_loss else "logits + cross-entropy"
    optim = config.optim
    fp32_grads = optim.main_params_dtype == "fp32" or config.parallel.accumulate_allreduce_grads_in_fp32
    grads = "fp32" if fp32_grads else "bf16"
    log.info("execution: blocks %s, activation recompute %s, loss %s, weights %s, gradients accumulated and "
             "reduced in %s, Adam moments %s/%s", blocks, model_config.recompute_granularity or "off", loss,
             optim.main_params_dtype, grads, optim.exp_avg_dtype, optim.exp_avg_sq_dtype)
    log.info("%s; %.3g GFLOP/token; peak: %s", FLOP_CONVENTION, run.flops_per_token / 1e9,
             f"{peak:g} TFLOP/s ({peak_note})" if peak else peak_note)
    if config.model.compile_cache and not compiled:
        log.info("--compile-cache %s ignored: the blocks run eager", config.model.compile_cache)
    elif config.model.compile_cache:
        run.compile_cache = cache_file(config.model.compile_cache, parallel.rank, parallel.world_size)
        load_compiled(run.compile_cache)
    if config.checkpoint.load:
        resume(run, config.checkpoint.load)
    return run


def model_shape(run: Run) -> dict:
    """What must agree between a checkpoint and the model loading it."""
    shape = {name: getattr(run.config.model, name) for name in
             ("num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "ffn_hidden_size")}
    return {**shape, "vocab_size": run.model.vocab_size}


def save(run: Run) -> Path:
    """Write the run's state as checkpoint ``run.iteration`` under ``--save`` (every rank its shards)."""
    run.engine.reducer.wait_weights()
    chunks = run.engine.chunks
    tensors = {"model": model_state(chunks, run.parallel),
               "optimizer": optimizer_state(chunks, run.optimizer, run.parallel)}
    plain_rng, tensor_rng = rng_state(run.parallel.device)
    info = {"loaders": {split: loader.state_dict() for split, loader in run.data.loaders.items() if loader is not None},
            "rng": plain_rng, "config": run.config.to_dict(), "model_shape": model_shape(run),
            "seq_length": run.data.seq_length, "schedule": run.schedule.describe(),
            "tokenizer": {"vocab_size": run.data.vocab_size, "eod_id": run.data.eod_id, "record": run.data.tokenizer},
            "torch_version": torch.__version__}
    directory = checkpoint.save(run.config.checkpoint.save, run.iteration, {**tensors, "rng": tensor_rng}, info,
                                run.config.checkpoint.save_retain)
    run.checkpoint_dir, run.checkpoint_iteration = directory, run.iteration
    log.info("saved checkpoint %s", directory)
    return directory


def resume(run: Run, path: str) -> None:
    """Restore the run from the checkpoint ``--load`` names (nothing there: start from scratch)."""
    directory = checkpoint.find(path)
    if directory is None:
        log.info("no checkpoint in %s: training from scratch", path)
        return
    info = checkpoint.read_info(directory)
    _check_shape(run, info, directory)
    options = run.config.checkpoint
    weights_only = options.finetune
    chunks = run.engine.chunks
    template = {"model": model_state(chunks, run.parallel)}
    if not (weights_only or options.no_load_optim):
        # NOTE: creates the optimizer state so DCP has tensors to load into; only done when that state is
        # then overwritten, so a fresh optimizer really starts fresh.
        init_optimizer_state(run.optimizer)
        template["optimizer"] = optimizer_state(chunks, run.optimizer, run.parallel)
    if not (weights_only or options.no_load_rng):
        template["rng"] = rng_state(run.parallel.device)[1]
    padded = fit_padded_rows(template, checkpoint.read_metadata(directory))
    checkpoint.load(directory, template)
    copy_padded_rows(padded)
    if "rng" in template:
        set_rng_state(info["rng"], template["rng"], run.parallel.device)
    if not weights_only:
        _restore_progress(run, info, directory)
        run.checkpoint_dir, run.checkpoint_iteration = directory, run.iteration
    log.info("loaded %s (iteration %d%s)", directory, info["iteration"], ", weights only" if weights_only else "")


def _check_shape(run: Run, info: dict, directory: Path) -> None:
    """The checkpoint's model must be this one; only the vocabulary padding (which follows TP) may differ."""
    saved, expected = dict(info.get("model_shape") or {}), model_shape(run)
    saved_vocab, vocab = saved.pop("vocab_size", None), expected.pop("vocab_size")
    if saved != expected:
        raise CheckpointError(f"{directory} holds a model of shape {info.get('model_shape')}, this run builds "
                              f"{model_shape(run)}; give the same shape flags (or --preset) as the run that saved it")
    if saved_vocab != vocab:
        log.warning("%s was saved with a padded vocabulary of %s, this layout pads it to %d (--make-vocab-size-"
                    "divisible-by × TP): the padding rows differ, the real vocabulary loads unchanged",
                    directory, saved_vocab, vocab)


def _restore_progress(run: Run, info: dict, directory: Path) -> None:
    saved_schedule = info.get("schedule")
    if saved_schedule != run.schedule.describe():
        log.warning("learning-rate schedule differs from the checkpoint's (%s); using this run's (%s)",
                    saved_schedule, run.schedule.describe())
    for split, loader in run.data.loaders.items():
        if loader is not None and split in info["loaders"]:
            loader.load_state_dict(info["loaders"][split], allow_blend_change=run.config.data.override_blend_check)
    run.iteration = info["iteration"]
    if run.iteration > run.config.training.train_iters:
        raise CheckpointError(f"{directory} is at iteration {run.iteration}, past --train-iters "
                              f"{run.config.training.train_iters}; raise --train-iters to continue")


def metrics_sink(run: Run) -> MetricsSink:
    """The console/TensorBoard/JSONL sink, trimmed to the resumed step; files on the logging rank only."""
    config = run.config.logging
    if not run.parallel.is_logging_rank:
        config = replace(config, tensorboard_dir=None, metrics_jsonl=None)
    return MetricsSink(config, run.iteration, run.config.training.train_iters)
