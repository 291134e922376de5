"""Assemble a run from its config — device, data, the parallelized model, optimizer, schedule — logging every
choice made; :mod:`trainer.run.loop` drives what this builds and :mod:`trainer.run.resume` moves it in and out
of checkpoints."""

from __future__ import annotations

import logging
from dataclasses import replace

from corpus.core.errors import ConfigError
from trainer.config.schema import ModelConfig, TrainConfig, padded_vocab_size
from trainer.fp8 import select_fp8
from trainer.model.attention import AttentionShape, check_backend_name, select_backend
from trainer.model.gpt import uses_fused_loss
from trainer.optim.optimizer import build_optimizer
from trainer.optim.schedule import LRSchedule
from trainer.parallel.state import ParallelState, init_parallel
from trainer.parallelize.apply import parallelize
from trainer.parallelize.compile import cache_file, load_compiled
from trainer.parallelize.layout import describe, validate_layout, virtual_stages, whole_model_counts
from trainer.run.data import build_data, open_data
from trainer.run.memory import check_memory, estimate_memory
from trainer.run.metrics import FLOP_CONVENTION, MetricsSink, flops_per_token, peak_tflops
from trainer.run.resume import resume
from trainer.run.state import Run
from trainer.run.telemetry import SourceTelemetry
from trainer.runtime.device import pick_device, pick_precision
from trainer.runtime.rng import seed_everything

log = logging.getLogger(__name__)


def model_vocab_size(model: ModelConfig, tokenizer_vocab: int | None, tensor_parallel_size: int) -> int:
    """The padded vocabulary of the model: ``--vocab-size`` or the tokenizer's, padded as Megatron pads it."""
    if model.vocab_size is None and tokenizer_vocab is None:
        raise ConfigError("the data records no tokenizer vocabulary (files without a .meta.json sidecar, e.g. "
                          "written by Megatron); give the model's vocabulary with --vocab-size, or the data's "
                          "tokenizer with --tokenizer-type and --tokenizer-model (or tokenizer: in the blend)")
    if model.vocab_size is not None and tokenizer_vocab is not None and tokenizer_vocab > model.vocab_size:
        raise ConfigError(f"the data's tokenizer has {tokenizer_vocab} ids but --vocab-size is {model.vocab_size}: "
                          f"the model could not embed them; raise --vocab-size to at least {tokenizer_vocab} or drop "
                          "it (the default is the tokenizer's)")
    size = model.vocab_size if model.vocab_size is not None else tokenizer_vocab
    return padded_vocab_size(size, model.make_vocab_size_divisible_by, tensor_parallel_size)


def _check_batch_sizes(config: TrainConfig, parallel: ParallelState) -> int:
    """The micro-batches per step on each DP rank, once the global batch is known to split evenly."""
    micro = config.training.micro_batch_size
    global_batch = config.training.global_batch_size or micro * parallel.dp_size
    if global_batch % (micro * parallel.dp_size):
        raise ConfigError(f"--global-batch-size {global_batch} must be a multiple of --micro-batch-size {micro} × "
                          f"data-parallel size {parallel.dp_size}")
    return global_batch // (micro * parallel.dp_size)


def _quiet_unless_logging(parallel: ParallelState) -> None:
    """Only the logging rank speaks at INFO; the others keep warnings and errors."""
    if not parallel.is_logging_rank:
        for name in ("trainer", "corpus"):
            logging.getLogger(name).setLevel(logging.WARNING)


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
    # Every choice that can be refused is made before the data is indexed and the model built.
    schedule = LRSchedule(config.optim, config.training.train_iters)
    model_config = config.model
    # NOTE: the FP8 backend first: Transformer Engine fails to import ("undefined symbol" in libcudnn_cnn)
    # once the attention probe has loaded torch's own cuDNN.
    fp8 = select_fp8(config.fp8, device, model_config.gemm_backend)
    check_backend_name(model_config.attention_backend)
    seed_everything(config.training.seed)
    accumulation = _check_batch_sizes(config, parallel)
    global_batch = accumulation * config.training.micro_batch_size * parallel.dp_size
    opened = open_data(config)
    seq_length = opened.seq_length
    validate_layout(model_config, parallel, seq_length, accumulation)
    # NOTE: a tokenizer sized by --vocab-size (NullTokenizer's) gives the model its vocabulary, EOD included,
    # as Megatron pads tokenizer.vocab_size
    asked = replace(model_config, vocab_size=None) if opened.vocab_size_sized_tokenizer else model_config
    vocab = model_vocab_size(asked, opened.vocab_size, parallel.tp_size)
    shape = AttentionShape(config.training.micro_batch_size, seq_length,
                           model_config.num_attention_heads // parallel.tp_size,
                           model_config.num_query_groups // parallel.tp_size, model_config.head_dim, precision.dtype,
                           opened.document_masked)
    attention = select_backend(model_config.attention_backend, device, shape)
    counts = whole_model_counts(model_config, vocab, seq_length, attention)
    check_memory(config, estimate_memory(config, parallel, counts, vocab, seq_length, precision.dtype.itemsize,
                                         attention.name, uses_fused_loss(model_config, parallel)), parallel)
    data = build_data(config, opened, parallel, global_batch)
    # NOTE: online mixing feeds on the per-source losses, so they are measured even under --log-per-source off
    measured = config.logging.log_per_source != "off" or data.online is not None
    num_sources = len(data.source_names) if measured else 0
    engine, compiled = parallelize(config, parallel, precision, fp8, attention, vocab, data.seq_length, accumulation,
                                   num_sources)
    peak, peak_note = peak_tflops(device, config.logging.peak_tflops)
    run = Run(config, parallel, precision, data, engine,
              build_optimizer(engine.reducer.optimizer_parameters(), config.optim, device), schedule,
              flops_per_token(model_config, counts["matmul"], data.seq_length), peak,
              telemetry=(SourceTelemetry(data.source_names, data.source_weights, data.schedule,
                                         data.online.draw if data.online is not None else None)
                         if config.logging.log_per_source != "off" else None),
              mixer=data.online.online_mixer() if data.online is not None else None)
    run.compiled = compiled
    fp8.parts.attach_optimizer(run.optimizer)
    _log_choices(run, vocab, counts, compiled, peak_note)
    if config.model.compile_cache and not compiled:
        log.info("--compile-cache %s ignored: the blocks run eager", config.model.compile_cache)
    elif config.model.compile_cache:
        run.compile_cache = cache_file(config.model.compile_cache, parallel.rank, parallel.world_size)
        load_compiled(run.compile_cache)
    if config.checkpoint.load:
        resume(run, config.checkpoint.load)
    return run


def _log_choices(run: Run, vocab: int, counts: dict, compiled: bool, peak_note: str) -> None:
    """One log line each for the model, the layout, the batch, the execution choices and the FLOP convention."""
    config, model_config, parallel = run.config, run.config.model, run.parallel
    log.info("model: preset %s, %d layers, d=%d, %d heads / %d kv, ffn %d, vocab %d (padded), %.1fM parameters "
             "(%.1fM in matmuls)", model_config.preset, model_config.num_layers,
             model_config.hidden_size, model_config.num_attention_heads, model_config.num_query_groups,
             model_config.ffn_hidden_size, vocab, counts["total"] / 1e6, counts["matmul"] / 1e6)
    log.info(describe(parallel, config.parallel))
    log.info("device %s, precision %s, global batch %d = micro %d × accumulation %d × DP %d, seq %d; %s",
             parallel.device, run.precision.name, run.global_batch_size, config.training.micro_batch_size,
             run.accumulation, parallel.dp_size, run.data.seq_length, run.data.description)
    blocks = ("compiled (torch.compile, during the first step: minutes when Inductor's cache is cold)" if compiled
              else "eager")
    loss = "fused chunked cross-entropy" if run.model.fused_loss else "logits + cross-entropy"
    optim = config.optim
    fp32_grads = optim.main_params_dtype == "fp32" or config.parallel.accumulate_allreduce_grads_in_fp32
    grads = "fp32" if fp32_grads else "bf16"
    log.info("execution: blocks %s, activation recompute %s, loss %s, weights %s, gradients accumulated and "
             "reduced in %s, Adam moments %s/%s", blocks, model_config.recompute_granularity or "off", loss,
             optim.main_params_dtype, grads, optim.exp_avg_dtype, optim.exp_avg_sq_dtype)
    peak = run.peak_tflops
    log.info("%s; %.3g GFLOP/token; peak: %s", FLOP_CONVENTION, run.flops_per_token / 1e9,
             f"{peak:g} TFLOP/s ({peak_note})" if peak else peak_note)


def metrics_sink(run: Run) -> MetricsSink:
    """The console/TensorBoard/JSONL sink, trimmed to the resumed step; files on the logging rank only."""
    config = run.config.logging
    if not run.parallel.is_logging_rank:
        config = replace(config, tensorboard_dir=None, metrics_jsonl=None)
    device = "GPU" if run.parallel.device.type == "cuda" else "process"
    return MetricsSink(config, run.iteration, run.config.training.train_iters, device)
