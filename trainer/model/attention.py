"""Attention kernels behind one signature, chosen once at start-up and logged.

Every backend computes causal attention on ``q`` [B, S, H, D] and ``k``/``v`` [B, S, G, D] (G key/value
heads, grouped-query attention) and returns [B, S, H, D]. With ``cu_seqlens`` (int32 segment starts
over the flattened B·S tokens plus B·S, as the data side emits for ``--reset-attention-mask`` and varlen
kernels take) a token only attends to earlier tokens of its own document.

``auto`` on CUDA times every backend that works for the run's shape (forward + backward) and keeps the
fastest: on Hopper that is SDPA's cuDNN kernel (bench/RESULTS.md), the flash-attn
package wins where it is importable and faster. On CPU ``auto`` is SDPA's math kernel.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from corpus.core.errors import ConfigError
from corpus.core.optional import missing

log = logging.getLogger(__name__)

#: ``attend(q, k, v, cu_seqlens_or_None) -> out``
Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]


@dataclass(frozen=True)
class AttentionBackend:
    """One registered kernel: how to call it and what it needs."""

    name: str
    attend: Attend
    cuda_only: bool
    needs_module: str | None = None  # an optional package imported lazily (None: part of torch)
    materialises_scores: bool = False
    """Keeps the S×S fp32 scores and their softmax for the backward pass (the memory estimate counts them)."""


def segment_ids(cu_seqlens: torch.Tensor, batch: int, size: int) -> torch.Tensor:
    """[B, S] index of the segment (document piece) each token belongs to, unique across rows."""
    starts = torch.zeros(batch * size, dtype=torch.int32, device=cu_seqlens.device)
    starts[cu_seqlens[:-1].long()] = 1
    return (torch.cumsum(starts, dim=0) - 1).view(batch, size)


def document_causal_mask(segments: torch.Tensor) -> torch.Tensor:
    """Boolean [B, 1, S, S] mask from :func:`segment_ids`: True where query i may attend key j
    (j <= i, same segment)."""
    size = segments.shape[1]
    causal = torch.ones(size, size, dtype=torch.bool, device=segments.device).tril()
    return (segments[:, None, :, None] == segments[:, None, None, :]) & causal


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor | None, *,
          kernel: SDPBackend) -> torch.Tensor:
    mask = None if cu_seqlens is None else document_causal_mask(segment_ids(cu_seqlens, *q.shape[:2]))
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    if k.shape[1] != q.shape[1]:  # NOTE: expanded here because not every SDPA kernel takes enable_gqa
        repeat = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
    with sdpa_kernel(kernel):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
    return out.transpose(1, 2)


def _flash_attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor | None) -> torch.Tensor:
    import flash_attn

    if cu_seqlens is None:
        return flash_attn.flash_attn_func(q, k, v, causal=True)
    longest = int(torch.diff(cu_seqlens).max())
    out = flash_attn.flash_attn_varlen_func(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), cu_seqlens,
                                            cu_seqlens, longest, longest, causal=True)
    return out.view_as(q)


BACKENDS: dict[str, AttentionBackend] = {
    "cudnn": AttentionBackend("cudnn", functools.partial(_sdpa, kernel=SDPBackend.CUDNN_ATTENTION), True),
    "flash_attn": AttentionBackend("flash_attn", _flash_attn, True, needs_module="flash_attn"),
    "flash": AttentionBackend("flash", functools.partial(_sdpa, kernel=SDPBackend.FLASH_ATTENTION), False),
    "efficient": AttentionBackend("efficient", functools.partial(_sdpa, kernel=SDPBackend.EFFICIENT_ATTENTION), True),
    "math": AttentionBackend("math", functools.partial(_sdpa, kernel=SDPBackend.MATH), False,
                             materialises_scores=True),
}


@dataclass(frozen=True)
class AttentionShape:
    """The shape a run calls attention with (what ``auto`` probes)."""

    batch: int
    seq_length: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype: torch.dtype
    document_masked: bool


def _unusable(backend: AttentionBackend, device: torch.device) -> str | None:
    """Why ``backend`` cannot run on ``device`` (None when it can)."""
    if backend.cuda_only and device.type != "cuda":
        return "needs CUDA"
    if backend.needs_module is not None:
        return missing(backend.needs_module)
    return None


def _time_backend(backend: AttentionBackend, shape: AttentionShape, device: torch.device, repeats: int = 3) -> float:
    """Milliseconds of one forward + backward at ``shape`` (raises if the kernel refuses the shape).

    NOTE: the inputs have the model's memory layout (q and k fresh from RoPE, v a strided slice of the
    fused QKV output), so a kernel that accepts them here accepts them in training."""
    per_group = shape.heads // shape.kv_heads
    qkv = torch.randn(shape.batch, shape.seq_length, shape.kv_heads, per_group + 2, shape.head_dim, device=device,
                      dtype=shape.dtype, requires_grad=True)
    q = qkv[:, :, :, :per_group].reshape(shape.batch, shape.seq_length, shape.heads, shape.head_dim)
    k, v = qkv[:, :, :, per_group].contiguous(), qkv[:, :, :, per_group + 1]
    cu_seqlens = None
    if shape.document_masked:  # two documents per row, as a typical packed sample has
        starts = torch.arange(0, shape.batch * shape.seq_length + 1, shape.seq_length // 2, device=device)
        cu_seqlens = starts.to(torch.int32)
    backend.attend(q, k, v, cu_seqlens).sum().backward(retain_graph=True)  # warm-up; the check that it runs
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        backend.attend(q, k, v, cu_seqlens).sum().backward(retain_graph=True)
    end.record()
    torch.cuda.synchronize(device)
    return start.elapsed_time(end) / repeats


def _refuses_mask(backend: AttentionBackend, device: torch.device, shape: AttentionShape) -> str | None:
    """Why ``backend`` cannot run this run's document-masked shape on CUDA (None when it can, or no mask):
    SDPA's flash kernel, for one, takes no mask. Checked once at start-up instead of failing at step 1."""
    if not shape.document_masked or device.type != "cuda":
        return None
    try:
        _time_backend(backend, shape, device, repeats=1)
    except RuntimeError as error:
        return f"refuses document-masked attention at this shape ({str(error).splitlines()[0][:80]})"
    return None


def check_backend_name(name: str) -> None:
    """Refuse an ``--attention-backend`` that is neither ``auto`` nor in :data:`BACKENDS` (before any work)."""
    if name != "auto" and name not in BACKENDS:
        raise ConfigError(f"--attention-backend {name!r}: unknown; choose auto or one of {', '.join(BACKENDS)}")


def select_backend(name: str, device: torch.device, shape: AttentionShape) -> AttentionBackend:
    """The backend to train with: ``name`` itself, or for ``auto`` the fastest that works (logged)."""
    check_backend_name(name)
    if name != "auto":
        reason = _unusable(BACKENDS[name], device) or _refuses_mask(BACKENDS[name], device, shape)
        if reason:
            raise ConfigError(f"--attention-backend {name}: {reason}; use --attention-backend auto")
        log.info("attention backend: %s (asked for)", name)
        return BACKENDS[name]
    if device.type != "cuda":
        log.info("attention backend: math (CPU)")
        return BACKENDS["math"]
    timings, notes = {}, []
    for backend in BACKENDS.values():
        reason = _unusable(backend, device) if backend.name != "math" else "slowest; used only if all else fails"
        if reason is None:
            try:
                timings[backend.name] = _time_backend(backend, shape, device)
            except RuntimeError as error:  # a kernel that refuses this shape/dtype/mask
                reason = str(error).splitlines()[0][:80]
        if reason:
            notes.append(f"{backend.name}: {reason}")
    best = min(timings, key=timings.get) if timings else "math"
    measured = ", ".join(f"{n} {ms:.2f} ms" for n, ms in sorted(timings.items(), key=lambda item: item[1]))
    log.info("attention backend: %s (fwd+bwd at B=%d S=%d: %s; skipped: %s)", best, shape.batch, shape.seq_length,
             measured or "none", "; ".join(notes) or "none")
    return BACKENDS[best]
