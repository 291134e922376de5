"""Will the run fit? An estimate of the memory one process needs, made before the model is built, so an
impossible shape is refused in one line naming the knobs, instead of an allocator's traceback minutes later or
the kernel's OOM killer with no message at all.

Per process (one device, or one CPU process): the weights, their gradients and the Adam moments of its share
of the model (``--main-params-dtype``, ``--exp-avg[-sq]-dtype``, ZeRO-1 dividing the moments over DP), the
activations kept for the backward pass of a micro-batch (all of them, or with ``--recompute-granularity full``
only each block's input plus one block's worth), the S×S attention scores when the math kernel materialises
them, and the logits when the loss is not fused. It leaves out allocator slack and workspaces: it refuses what
cannot fit, it does not promise that the rest will.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

import torch

from corpus.core.disk import format_bytes
from corpus.core.errors import ConfigError
from trainer.config.schema import TrainConfig
from trainer.model.attention import BACKENDS
from trainer.parallel.state import ParallelState

#: Bytes per value of each dtype name the config uses.
DTYPE_BYTES = {"fp32": 4, "bf16": 2}
#: What lowers the estimate, for the refusal's message.
KNOBS = ("lower --micro-batch-size (--global-batch-size stays reached by gradient accumulation), shorten "
         "--seq-length, add --recompute-granularity full, spread the model with --tensor-model-parallel-size / "
         "--pipeline-model-parallel-size or the optimizer state with --use-distributed-optimizer, or pick a smaller "
         "--preset")


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one process needs, by what needs them."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    attention_scores: int
    logits: int

    @property
    def total(self) -> int:
        return sum(getattr(self, f.name) for f in fields(self))

    def describe(self) -> str:
        """``12.3 GB (weights 2.0 GB, gradients …)``, the parts that are not zero."""
        parts = [f"{f.name.replace('_', ' ')} {format_bytes(getattr(self, f.name))}" for f in fields(self)
                 if getattr(self, f.name)]
        return f"{format_bytes(self.total)} ({', '.join(parts)})"


def estimate_memory(config: TrainConfig, parallel: ParallelState, counts: dict, vocab: int, seq_length: int,
                    compute_bytes: int, attention: str, fused_loss: bool) -> MemoryEstimate:
    """The estimate for one process of ``config`` (``counts``: the whole model's parameter counts; ``attention``:
    the name of the attention backend in :data:`~trainer.model.attention.BACKENDS`)."""
    model, optim = config.model, config.optim
    tp, pp = parallel.tp_size, parallel.pp_size
    # A pipeline stage holds its layers and one of the two vocabulary-sized matrices (both when PP is 1).
    vocab_matrices = vocab * model.hidden_size * (2 if pp == 1 else 1)
    params = (counts["total"] - 2 * vocab * model.hidden_size) // pp // tp + vocab_matrices // tp
    fp32_grads = optim.main_params_dtype == "fp32" or config.parallel.accumulate_allreduce_grads_in_fp32
    moments = DTYPE_BYTES[optim.exp_avg_dtype] + DTYPE_BYTES[optim.exp_avg_sq_dtype]
    sharded = parallel.dp_size if config.parallel.use_distributed_optimizer else 1
    tokens = config.training.micro_batch_size * seq_length
    heads = model.num_attention_heads // tp
    per_layer = _values_per_token(config, tp) * tokens * compute_bytes
    scores = (config.training.micro_batch_size * heads * seq_length * seq_length * 4 * 2
              if BACKENDS[attention].materialises_scores else 0)
    if model.recompute_granularity == "full":
        kept = model.num_layers * tokens * model.hidden_size * compute_bytes + per_layer
        scores_kept = scores
    else:
        kept, scores_kept = model.num_layers * per_layer, model.num_layers * scores
    # NOTE: 1F1B keeps up to PP micro-batches in flight on the first stage, each for its L / PP layers: L layers.
    return MemoryEstimate(
        weights=params * DTYPE_BYTES[optim.main_params_dtype], gradients=params * (4 if fp32_grads else 2),
        optimizer=params * moments // sharded, activations=kept, attention_scores=scores_kept,
        logits=0 if fused_loss else tokens * (vocab // tp) * 4 * 2)


def _values_per_token(config: TrainConfig, tp: int) -> int:
    """Values one transformer block keeps per token for its backward pass: the norms' inputs and outputs and the
    residual stream (whole), the QKV, attention and SwiGLU activations (split over TP)."""
    model = config.model
    kv = 2 * model.num_query_groups * model.head_dim
    return 6 * model.hidden_size + (2 * model.hidden_size + kv + 3 * model.ffn_hidden_size) // tp


def available_bytes(parallel: ParallelState) -> tuple[int | None, str]:
    """Memory this process may use and where the figure came from: the device's free memory, or on CPU the
    machine's available memory shared by the processes of this host (None when unknown)."""
    device = parallel.device
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free, f"free on {torch.cuda.get_device_name(device)}"
    try:
        with open("/proc/meminfo") as meminfo:
            kilobytes = next(int(line.split()[1]) for line in meminfo if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return None, "unknown"
    processes = int(os.environ.get("LOCAL_WORLD_SIZE", parallel.world_size))
    share = f", shared by {processes} processes" if processes > 1 else ""
    return kilobytes * 1024 // processes, f"available on this machine{share}"


def check_memory(config: TrainConfig, estimate: MemoryEstimate, parallel: ParallelState) -> None:
    """Refuse a run whose estimate exceeds what is available (``--no-check-memory`` skips this)."""
    if not config.training.check_memory:
        return
    available, where = available_bytes(parallel)
    if available is not None and estimate.total > available:
        raise ConfigError(f"this run needs about {estimate.describe()} per process, but {format_bytes(available)} "
                          f"is {where}: {KNOBS}; --no-check-memory skips this estimate")
