"""Typed training configuration: one dataclass per concern, every field documented, unknown keys rejected.

A run's configuration is built in layers, later ones winning: dataclass defaults → the model preset
(``model.preset``) → a YAML file (``--config run.yaml``, same nesting as :class:`TrainConfig`) → flags.
Each field's metadata carries its Megatron-style flag and help text; ``cli/trainer_run.py`` builds its
options from this table, so the flags, the YAML keys and the docs cannot drift apart. Turning YAML and
flags into a checked :class:`TrainConfig` is :mod:`trainer.config.loading`'s job.
"""

from __future__ import annotations

import dataclasses
import math
import os
import typing
from dataclasses import dataclass, field
from typing import Literal

from corpus.blending.counts import EVAL_INTERVAL, EVAL_ITERS
from corpus.blending.schema import DEFAULT_SPLIT
from corpus.core.errors import ConfigError
from corpus.core.typed_config import knob
from corpus.tokenizers.config import tokenizer_knob
from trainer.config.presets import PRESETS, preset_table

#: The learning-rate decay styles; each one's curve is in ``trainer.optim.schedule.DECAY_STYLES`` (a test holds the
#: two together), named here so a misspelt style is refused when the config is read, before any work.
DecayStyle = Literal["constant", "linear", "cosine"]


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


@dataclass
class ModelConfig:
    """The GPT's shape. Unset shape fields come from ``preset``."""

    preset: str = knob("tiny", f"Named model shape; shape flags override it. {preset_table()}.", "--preset")
    num_layers: int | None = knob(None, "Transformer layers.", "--num-layers")
    hidden_size: int | None = knob(None, "Model width d.", "--hidden-size")
    num_attention_heads: int | None = knob(None, "Query heads.", "--num-attention-heads")
    num_query_groups: int | None = knob(None, "Key/value heads (grouped-query attention).", "--num-query-groups")
    ffn_hidden_size: int | None = knob(None, "SwiGLU inner width.", "--ffn-hidden-size")
    rotary_base: float | None = knob(None, "RoPE base (theta).", "--rotary-base")
    norm_epsilon: float = knob(1e-5, "RMSNorm epsilon.", "--norm-epsilon")
    init_method_std: float = knob(0.02, "Std of the normal weight init (output projections scaled by 1/sqrt(2L)).",
                                  "--init-method-std")
    vocab_size: int | None = knob(None, "Model vocabulary before padding (default: the tokenizer's, from the data).",
                                  "--vocab-size")
    make_vocab_size_divisible_by: int = knob(128, "Pad the vocabulary to a multiple of this (× TP), as Megatron does.",
                                             "--make-vocab-size-divisible-by")
    attention_backend: str = knob("auto", "Attention kernel: auto (probe and pick, logged) or a name from "
                                  "trainer.model.attention.BACKENDS.", "--attention-backend")
    gemm_backend: str = knob("plain", "Local GEMM of the linear layers (trainer.model.layers.GEMMS); --fp8-format "
                             "replaces it with the FP8 backend's.", None)
    compile: Literal["auto", "blocks", "off"] = knob(
        "auto", "torch.compile each transformer block (fuses RMSNorm, RoPE, SwiGLU and the FP8 casts); auto: blocks "
        "on CUDA, off on CPU.", "--compile")
    compile_cache: str | None = knob(
        None, "Load torch.compile's artifacts (Inductor's generated code, Triton kernels, autotuning results) from "
        "FILE before compiling, and write them there after the first step and at the end: a later run of the same "
        "blocks on the same software, on a fresh machine, skips that part of the compilation. One file per rank "
        "(FILE.rankN) in a multi-process run.", "--compile-cache")
    recompute_granularity: Literal["full"] | None = knob(
        None, "Activation checkpointing: 'full' recomputes every transformer block in the backward pass (memory for "
        "compute).", "--recompute-granularity")
    cross_entropy_loss_fusion: bool | None = knob(
        None, "Chunked output layer + cross-entropy: no full logits tensor, no fp32 copy of it (default: on for CUDA).",
        "--cross-entropy-loss-fusion")
    fp32_residual_connection: bool = knob(
        False, "Keep the residual stream (the hidden states between blocks and pipeline stages) in fp32 under bf16; "
        "default: in the compute dtype, as Megatron does (half the bytes every norm, add and stage send moves).",
        "--fp32-residual-connection")

    def __post_init__(self) -> None:
        _require(self.preset in PRESETS, f"--preset {self.preset!r}: unknown; choose one of {', '.join(PRESETS)}")
        shape = PRESETS[self.preset]
        for name in ("num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "ffn_hidden_size",
                     "rotary_base"):
            if getattr(self, name) is None:
                setattr(self, name, getattr(shape, name))
        heads, groups = self.num_attention_heads, self.num_query_groups
        for name in ("num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "ffn_hidden_size"):
            _require(getattr(self, name) > 0, f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        _require(self.hidden_size % heads == 0,
                 f"--hidden-size {self.hidden_size} must be divisible by --num-attention-heads {heads}")
        _require(heads % groups == 0,
                 f"--num-attention-heads {heads} must be a multiple of --num-query-groups {groups}")
        _require(self.vocab_size is None or self.vocab_size > 0,
                 f"--vocab-size must be positive, got {self.vocab_size}")
        _require(self.make_vocab_size_divisible_by > 0, "--make-vocab-size-divisible-by must be positive")

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.hidden_size // self.num_attention_heads


@dataclass
class DataConfig:
    """What the trainer reads: a blend file, Megatron's ``--data-path`` list, or synthetic documents."""

    blend: str | None = knob(None, "Blend YAML file (see blends/web_code.yaml).", "--blend")
    data_path: list[str] = knob([], "Megatron-style data path: prefixes, optionally weighted "
                                "('0.7 web_text_document 0.3 code_text_document'); turned into a blend.", "--data-path")
    split: str | None = knob(None, f"Train/valid/test shares of sequences, e.g. '{DEFAULT_SPLIT}' "
                             f"(default: the blend's, else Megatron's {DEFAULT_SPLIT}).", "--split")
    data_cache_path: str | None = knob(None, "Where index maps are cached (default: the blend's cache_dir).",
                                       "--data-cache-path")
    mock_data: bool = knob(False, "Train on synthetic documents (benchmarks, smoke tests); no blend needed.",
                           "--mock-data")
    seq_length: int | None = knob(None, "Sequence length (default: the blend's seq_length).", "--seq-length")
    reset_position_ids: bool = knob(False, "Restart position ids at every document.", "--reset-position-ids")
    reset_attention_mask: bool = knob(False, "Document-masked attention: tokens attend within their document only.",
                                      "--reset-attention-mask")
    eod_mask_loss: bool = knob(False, "Do not train on predicting the token after an end-of-document.",
                               "--eod-mask-loss")
    override_blend_check: bool = knob(False, "Resume even if the checkpoint was trained on a different blend.",
                                      "--override-blend-check")
    tokenizer_type: str | None = tokenizer_knob(
        "type", "The data's tokenizer (a corpus tokenize --tokenizer-type): the vocabulary of data without .meta.json "
        "sidecars; checked against them.")
    tokenizer_model: str | None = tokenizer_knob("model", "With --tokenizer-type: its tokenizer.json, SentencePiece "
                                                 ".model or tiktoken file.")
    vocab_file: str | None = tokenizer_knob("vocab_file", "With --tokenizer-type GPT2BPETokenizer: vocab.json.")
    merge_file: str | None = tokenizer_knob("merge_file", "With --tokenizer-type GPT2BPETokenizer: merges.txt.")

    def __post_init__(self) -> None:
        given = [name for name, on in (("--blend", self.blend), ("--data-path", self.data_path),
                                       ("--mock-data", self.mock_data)) if on]
        _require(len(given) == 1, "give exactly one data source: --blend FILE, --data-path PREFIX… or --mock-data"
                 + (f" (got {' and '.join(given)})" if given else ""))
        _require(self.seq_length is None or self.seq_length > 0,
                 f"--seq-length must be positive, got {self.seq_length}")
        given = (("--tokenizer-model", self.tokenizer_model), ("--vocab-file", self.vocab_file),
                 ("--merge-file", self.merge_file))
        files = [flag for flag, value in given if value]
        _require(self.tokenizer_type is not None or not files,
                 f"{' and '.join(files)} need{'s' if len(files) == 1 else ''} --tokenizer-type")
        if (self.mock_data or self.data_path) and self.seq_length is None:
            raise ConfigError("--seq-length is required with --mock-data and --data-path (a blend file carries its "
                              "own)")


@dataclass
class OptimConfig:
    """AdamW and its learning-rate schedule (linear warmup, then decay to ``min_lr``)."""

    lr: float = knob(3e-4, "Peak learning rate.", "--lr")
    min_lr: float = knob(0.0, "Learning rate at the end of the decay.", "--min-lr")
    lr_warmup_iters: int = knob(0, "Linear warmup steps from --lr-warmup-init to --lr.", "--lr-warmup-iters")
    lr_warmup_init: float = knob(0.0, "Learning rate warmup starts from.", "--lr-warmup-init")
    lr_decay_style: DecayStyle = knob("linear", "Decay after warmup (trainer.optim.schedule.DECAY_STYLES holds "
                                      "each curve).", "--lr-decay-style")
    lr_decay_iters: int | None = knob(None, "Steps over which the lr decays (default: --train-iters).",
                                      "--lr-decay-iters")
    weight_decay: float = knob(0.01, "Decoupled weight decay (not applied to norm weights).", "--weight-decay")
    adam_beta1: float = knob(0.9, "Adam beta1.", "--adam-beta1")
    adam_beta2: float = knob(0.999, "Adam beta2.", "--adam-beta2")
    adam_eps: float = knob(1e-8, "Adam epsilon.", "--adam-eps")
    clip_grad: float = knob(1.0, "Clip the global gradient norm to this (0: no clipping).", "--clip-grad")
    main_params_dtype: Literal["fp32", "bf16"] = knob(
        "fp32", "Dtype of the weights the optimizer updates: fp32 master weights cast to bf16 for the GEMMs, or bf16: "
        "the model's weights are bf16 and the only copy, updated in fp32 and stored with stochastic rounding (no "
        "casts in the step, bf16 gradients, 2 bytes a weight instead of 4; needs --bf16).", "--main-params-dtype")
    exp_avg_dtype: Literal["fp32", "bf16"] = knob("fp32", "Dtype of Adam's first moment (bf16: stochastic rounding, "
                                                  "half the memory).", "--exp-avg-dtype")
    exp_avg_sq_dtype: Literal["fp32", "bf16"] = knob("fp32", "Dtype of Adam's second moment (bf16: stochastic "
                                                     "rounding, half the memory).", "--exp-avg-sq-dtype")

    def __post_init__(self) -> None:
        _require(self.lr > 0 and 0 <= self.min_lr <= self.lr,
                 f"need 0 <= --min-lr ({self.min_lr}) <= --lr ({self.lr}), --lr > 0")
        _require(self.lr_warmup_iters >= 0, "--lr-warmup-iters must be >= 0")
        _require(self.clip_grad >= 0 and self.weight_decay >= 0, "--clip-grad and --weight-decay must be >= 0")
        _require(self.lr_decay_iters is None or self.lr_decay_iters > 0, "--lr-decay-iters must be positive")
        _require(self.lr_decay_style in typing.get_args(DecayStyle),
                 f"--lr-decay-style {self.lr_decay_style!r}: choose one of {', '.join(typing.get_args(DecayStyle))}")


@dataclass
class FP8Config:
    """FP8 matmuls, switched on as Megatron does it (``--fp8-format``); ``trainer.fp8`` picks the backend."""

    fp8_format: Literal["hybrid", "e4m3"] | None = knob(
        None, "Train the transformer GEMMs in FP8: hybrid = e4m3 forward, e5m2 gradients; e4m3 = e4m3 everywhere. "
        "Needs a GPU of compute capability 8.9+. Embedding and output layer stay bf16.", "--fp8-format")
    fp8_recipe: Literal["delayed", "tensorwise", "blockwise"] = knob(
        "delayed", "Scaling: delayed (scales from an amax history; te and scaled_mm backends), tensorwise (current "
        "per-tensor scaling), blockwise (TE's 128-blocks; the torch backends: row-wise scales).",
        "--fp8-recipe")
    fp8_amax_history_len: int = knob(1, "Delayed scaling: steps of amax history.", "--fp8-amax-history-len")
    fp8_amax_compute_algo: Literal["max", "most_recent"] = knob(
        "most_recent", "Delayed scaling: scale from the history's max or its most recent amax.",
        "--fp8-amax-compute-algo")
    fp8_backend: str = knob("auto", "FP8 implementation: auto (of the backends that import and run the recipe, the "
                            "fastest measured: scaled_mm for every recipe today), torch (the same without Transformer "
                            "Engine), or a name from trainer.fp8.BACKENDS. A backend that cannot run the "
                            "recipe is an error naming those that can.", "--fp8-backend")
    fp8_transpose: Literal["fused", "kernel", "producers"] = knob(
        "producers", "scaled_mm backend: how the transposed FP8 copies of the weight gradient's operands are made: "
        "kernel: by a separate tiled Triton kernel (faster than fused, more peak memory: the forward keeps the "
        "transposed input); producers: as kernel, but under delayed scaling the SwiGLU and RoPE backward kernels "
        "write the transposed copies of the fc1 and QKV output gradients themselves (no transposing pass over "
        "them; the fastest); fused: by torch.compile inside the kernel producing the tensor.", "--fp8-transpose")
    fp8_min_dim: int = knob(512, "GEMMs with an input or output width below this stay bf16 (the casts would cost "
                            "more than the FP8 GEMM saves); widths not divisible by 16 always do.", "--fp8-min-dim")

    def __post_init__(self) -> None:
        _require(self.fp8_amax_history_len > 0, "--fp8-amax-history-len must be positive")
        _require(self.fp8_min_dim >= 16, "--fp8-min-dim must be at least 16 (FP8 GEMMs need multiples of 16)")


@dataclass
class TrainingConfig:
    """Steps, batch sizes, precision, device and seed."""

    train_iters: int | None = knob(None, "Optimizer steps to train for (required).", "--train-iters")
    global_batch_size: int | None = knob(None, "Samples per optimizer step (default: micro batch × data parallel); "
                                         "reached by gradient accumulation.", "--global-batch-size")
    micro_batch_size: int = knob(1, "Samples per forward/backward pass.", "--micro-batch-size")
    seed: int = knob(1234, "Seed of the weight init and every random number generator.", "--seed")
    precision: Literal["auto", "bf16", "fp32"] = knob(
        "auto", "Numeric precision: bf16 autocast (over fp32 master weights unless --main-params-dtype bf16), or fp32 "
        "(auto: bf16 on CUDA, fp32 on CPU).",
        "--precision", switches={"--bf16": "bf16"})
    device: Literal["auto", "cpu", "cuda"] = knob("auto", "Where to train (auto: CUDA when available).", "--device")
    exit_duration_in_mins: float | None = knob(None, "Save a checkpoint and exit cleanly after this many minutes.",
                                               "--exit-duration-in-mins")
    exit_interval: int | None = knob(None, "Save a checkpoint and exit cleanly at the first step that is a multiple "
                                     "of N.", "--exit-interval")
    manual_gc: bool = knob(False, "Turn Python's automatic garbage collector off and collect at chosen points instead "
                           "(every --manual-gc-interval steps, before evaluations and checkpoints): a collection "
                           "then never stalls a step, and every rank collects at the same step.", "--manual-gc")
    check_memory: bool = knob(True, "Estimate each process's memory (weights, gradients, optimizer state, "
                              "activations) before building the model; refuse a run that cannot fit.", "--check-memory")
    manual_gc_interval: int = knob(0, "Steps between collections under --manual-gc (0: only before evaluations and "
                                   "checkpoints, as Megatron does).", "--manual-gc-interval")

    def __post_init__(self) -> None:
        _require(self.train_iters is not None, "--train-iters is required (how many optimizer steps to train for)")
        _require(self.train_iters > 0, f"--train-iters must be positive, got {self.train_iters}")
        _require(self.micro_batch_size > 0, "--micro-batch-size must be positive")
        _require(self.global_batch_size is None or self.global_batch_size > 0, "--global-batch-size must be positive")
        _require(self.exit_interval is None or self.exit_interval > 0, "--exit-interval must be positive")
        _require(self.manual_gc_interval >= 0, "--manual-gc-interval must be 0 or positive")


@dataclass
class CheckpointConfig:
    """Where and when checkpoints are written and what a resume restores."""

    save: str | None = knob(None, "Checkpoint folder (SAVE/iter_0000100/ + latest_checkpointed_iteration.txt).",
                            "--save")
    save_interval: int | None = knob(None, "Save every N steps (always at the end, on SIGTERM and on "
                                     "--exit-duration-in-mins).", "--save-interval")
    save_retain: int | None = knob(None, "Keep only the newest K checkpoints (default: all).", "--save-retain")
    load: str | None = knob(None, "Resume from this checkpoint folder (or one iter_* folder in it); "
                            "an empty or missing folder starts from scratch.", "--load")
    no_load_optim: bool = knob(False, "Do not restore optimizer state when loading.", "--no-load-optim")
    no_load_rng: bool = knob(False, "Do not restore random number generator states when loading.", "--no-load-rng")
    finetune: bool = knob(False, "Load weights only; restart the step count, data and optimizer.", "--finetune")

    def __post_init__(self) -> None:
        _require(self.save_interval is None or self.save_interval > 0, "--save-interval must be positive")
        _require(self.save_retain is None or self.save_retain > 0, "--save-retain must be positive")
        for flag, path in (("--load", self.load), ("--save", self.save)):
            _require(path is None or not os.path.isfile(path), f"{flag} {path} is a file, not a checkpoint folder; "
                     "give the folder the run saves into (--load also takes one iter_* folder in it)")


@dataclass
class LoggingConfig:
    """Console, TensorBoard and JSONL metrics, and evaluation cadence."""

    log_interval: int = knob(100, "Log every N steps.", "--log-interval")
    eval_interval: int = knob(EVAL_INTERVAL, "Evaluate on the valid split every N steps.", "--eval-interval")
    eval_iters: int = knob(EVAL_ITERS, "Global batches per evaluation (0: no evaluation).", "--eval-iters")
    tensorboard_dir: str | None = knob(None, "Write TensorBoard event files here.", "--tensorboard-dir")
    metrics_jsonl: str | None = knob(None, "Write one JSON object per logged step (and per evaluation) here; a resumed "
                                     "run continues the file, a fresh one moves an existing file to FILE.1 (.2, …).",
                                     "--metrics-jsonl")
    log_throughput: bool = knob(True, "Show tokens/s per GPU (per process on CPU), model TFLOP/s and MFU on "
                                "console lines.",
                                "--log-throughput")
    peak_tflops: float | None = knob(None, "Dense bf16 peak TFLOP/s per device for MFU (default: looked up "
                                     "from the GPU name; needed for unknown GPUs).", "--peak-tflops")
    log_per_source: Literal["on", "files", "off"] = knob(
        "on", "Per-source telemetry: each blend source's training loss and tokens on every logged step (cumulative "
        "tokens, share achieved, weight asked) and its own validation loss at every evaluation. on: console (with "
        "2+ sources), TensorBoard and --metrics-jsonl; files: TensorBoard and --metrics-jsonl only; off: not "
        "computed.", "--log-per-source")
    eval_samples_per_source: int = knob(
        64, "Fixed validation samples of each source, evaluated alone at every evaluation (the same samples each "
        "time; rounded up to whole global batches; 0: none).", "--eval-samples-per-source")

    def __post_init__(self) -> None:
        _require(self.log_interval > 0 and self.eval_interval > 0,
                 "--log-interval and --eval-interval must be positive")
        _require(self.eval_iters >= 0, "--eval-iters must be >= 0")
        _require(self.eval_samples_per_source >= 0, "--eval-samples-per-source must be >= 0")


@dataclass
class ProfileConfig:
    """Profiling a range of steps, as Megatron spells it."""

    profile: bool = knob(False, "Profile steps --profile-step-start to --profile-step-end - 1.", "--profile")
    use_pytorch_profiler: bool = knob(False, "Use torch.profiler (a Chrome trace); without it, CUDA's profiler "
                                      "range for nsys --capture-range=cudaProfilerApi.", "--use-pytorch-profiler")
    profile_step_start: int = knob(10, "First profiled step (1-based).", "--profile-step-start")
    profile_step_end: int = knob(12, "Profiling stops before this step.", "--profile-step-end")
    profile_dir: str | None = knob(None, "Where traces go (default: --tensorboard-dir, else ./profile).",
                                   "--profile-dir")

    def __post_init__(self) -> None:
        _require(0 < self.profile_step_start < self.profile_step_end,
                 "need 0 < --profile-step-start < --profile-step-end")


@dataclass
class ParallelConfig:
    """How the world of ``torchrun`` processes is split: world = TP × PP × DP (rank layout in
    :mod:`trainer.parallel.state`). Checks against the model's shape happen once the model is known
    (:func:`trainer.parallelize.layout.validate_layout`)."""

    tensor_model_parallel_size: int = knob(1, "Tensor-parallel size: each layer's matrices split over this many "
                                           "GPUs (keep it within a node).", "--tensor-model-parallel-size",
                                           aliases=("--tp",))
    pipeline_model_parallel_size: int = knob(1, "Pipeline-parallel size: the layers split into this many stages.",
                                             "--pipeline-model-parallel-size", aliases=("--pp",))
    data_parallel_size: int | None = knob(None, "Data-parallel size (default: world size / (TP × PP)); given, it "
                                          "must equal that.", "--data-parallel-size", aliases=("--dp",))
    sequence_parallel: bool = knob(False, "Split norm regions along the sequence over the TP group (needs TP > 1).",
                                   "--sequence-parallel", aliases=("--sp",))
    virtual_pipeline_model_parallel_size: int | None = knob(
        None, "Model chunks per pipeline rank: the interleaved 1F1B schedule (needs PP > 1).",
        "--virtual-pipeline-model-parallel-size", aliases=("--vpp",))
    num_layers_per_virtual_pipeline_stage: int | None = knob(
        None, "Layers per virtual pipeline stage (the other way to ask for interleaved 1F1B).",
        "--num-layers-per-virtual-pipeline-stage")
    use_distributed_optimizer: bool = knob(False, "ZeRO-1: optimizer states partitioned over the data-parallel "
                                           "ranks.", "--use-distributed-optimizer")
    overlap_grad_reduce: bool = knob(False, "Reduce gradient buckets during the backward pass.",
                                     "--overlap-grad-reduce")
    overlap_param_gather: bool = knob(False, "With --use-distributed-optimizer: gather updated weights during the "
                                      "next forward pass.", "--overlap-param-gather")
    accumulate_allreduce_grads_in_fp32: bool = knob(
        False, "With --main-params-dtype bf16: accumulate gradients over micro-batches and reduce them over DP in "
        "fp32 (a flat fp32 buffer, each micro-batch's bf16 gradient added into it; costs a pass per micro-batch "
        "and twice the DP traffic). Without it they accumulate and reduce in bf16, as the baselines do.",
        "--accumulate-allreduce-grads-in-fp32")
    ddp_bucket_size: int | None = knob(None, "Parameters per gradient bucket (default: max(40M, 1M × DP) with "
                                       "--overlap-grad-reduce, else one bucket).", "--ddp-bucket-size")
    distributed_backend: Literal["auto", "nccl", "gloo"] = knob(
        "auto", "Process-group backend (auto: NCCL on CUDA, gloo on CPU).", "--distributed-backend")
    distributed_timeout_minutes: float = knob(10.0, "Timeout of collective operations.",
                                              "--distributed-timeout-minutes")

    def __post_init__(self) -> None:
        for name in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "data_parallel_size",
                     "virtual_pipeline_model_parallel_size", "num_layers_per_virtual_pipeline_stage",
                     "ddp_bucket_size"):
            value = getattr(self, name)
            _require(value is None or value > 0, f"--{name.replace('_', '-')} must be positive, got {value}")
        _require(self.virtual_pipeline_model_parallel_size is None
                 or self.num_layers_per_virtual_pipeline_stage is None,
                 "give --virtual-pipeline-model-parallel-size or --num-layers-per-virtual-pipeline-stage, not both")
        virtual = self.virtual_pipeline_model_parallel_size or self.num_layers_per_virtual_pipeline_stage
        _require(virtual is None or self.pipeline_model_parallel_size > 1,
                 "interleaved pipelining (--virtual-pipeline-model-parallel-size / "
                 "--num-layers-per-virtual-pipeline-stage) needs --pipeline-model-parallel-size > 1")
        _require(not self.overlap_param_gather or self.use_distributed_optimizer,
                 "--overlap-param-gather needs --use-distributed-optimizer (without it no weights are gathered)")
        _require(self.distributed_timeout_minutes > 0, "--distributed-timeout-minutes must be positive")


@dataclass
class TrainConfig:
    """Everything one ``trainer run`` needs; ``trainer.run.loop.train(config)`` runs it."""

    data: DataConfig = field(metadata={"help": "Data source."})
    training: TrainingConfig = field(metadata={"help": "Steps, batches, precision."})
    model: ModelConfig = field(default_factory=ModelConfig, metadata={"help": "Model shape."})
    optim: OptimConfig = field(default_factory=OptimConfig, metadata={"help": "Optimizer and schedule."})
    fp8: FP8Config = field(default_factory=FP8Config, metadata={"help": "FP8 training."})
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig, metadata={"help": "Checkpoints."})
    logging: LoggingConfig = field(default_factory=LoggingConfig, metadata={"help": "Logging and evaluation."})
    profile: ProfileConfig = field(default_factory=ProfileConfig, metadata={"help": "Profiling."})
    parallel: ParallelConfig = field(default_factory=ParallelConfig, metadata={"help": "TP × PP × DP layout."})

    def to_dict(self) -> dict:
        """Plain nested dict (YAML/JSON ready); ``trainer.config.loading.from_dict(TrainConfig,
        config.to_dict())`` round-trips."""
        return dataclasses.asdict(self)


def padded_vocab_size(vocab_size: int, divisible_by: int, tensor_parallel_size: int = 1) -> int:
    """Megatron's padding: round up to a multiple of ``divisible_by × TP`` so every TP shard is equal."""
    multiple = divisible_by * tensor_parallel_size
    return int(math.ceil(vocab_size / multiple) * multiple)
