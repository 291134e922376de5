"""``--compile``: torch.compile each transformer block and the final norm in place, and the fused loss's per-chunk
step; ``--compile-cache``: their compiled artifacts carried from one run to the next.

Per block rather than the whole model: one graph compiled once serves every layer (the layers share
code and shapes), compile time stays that of one block, and the embedding, the output GEMMs and the
optimizer stay eager. Inside a block Inductor fuses RMSNorm, RoPE, SwiGLU, the residual adds and the
FP8 scaling/casts around the GEMMs. The final norm compiles too, with the last block's residual add (eager, its
fp32 steps are ten kernels; compiled, two). The fused loss's softmax step (``trainer.model.fused_loss``) compiles
into one looped kernel over the logits (the log-sum-exp, then their gradient written in their dtype) and a small
one for the loss; a one-pass Triton kernel holding each row in registers is no faster in the step
(bench/RESULTS.md).
``nn.Module.compile`` keeps parameter names, so checkpoints of a compiled run load into an eager one and back.

The cache file is PyTorch's portable "mega-cache" (``torch.compiler.save_cache_artifacts``): the FX
graphs Inductor compiled, their Triton kernels and autotuning results, keyed by graph and software, so a
file from another model, torch or GPU only misses — it never changes what runs. Loading it warms the
caches of this process; the log says how many graphs then came from it.

NOTE: our own Triton ops (``torch.library.triton_op``) compile into the blocks' code, but AOTAutograd keys
its cache on the graph that calls them, not on their source: an edited kernel would hit the entry compiled
from the old one (two trees sharing one machine's caches run each other's kernels). So :func:`tag_caches` puts
a digest of the kernels package's sources into every cache key.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import logging
import time
from pathlib import Path
from typing import Iterator

import torch

from corpus.core.atomic_write import write_atomically
from corpus.core.errors import ConfigError
from trainer.model.fused_loss import compile_chunk_loss
from trainer.model.gpt import GPT

log = logging.getLogger(__name__)

#: Inductor's coordinate-descent search over each reduction kernel's launch parameters: the FP8 blocks' amax and
#: norm reductions run faster for some compile time (bench/RESULTS.md).
INDUCTOR_OPTIONS = {"coordinate_descent_tuning": True}


#: The package whose source files go into every cache key: our Triton ops and their kernels.
KERNEL_PACKAGE = "trainer.kernels"


def kernel_sources() -> list[Path]:
    """Every source file of :data:`KERNEL_PACKAGE` (the ops, their formulas and their Triton kernels), sorted."""
    return sorted(Path(importlib.import_module(KERNEL_PACKAGE).__file__).parent.rglob("*.py"))


def kernel_fingerprint(paths: list[Path] | None = None) -> str:
    """A digest of the bytes of ``paths`` (default: :func:`kernel_sources`), each prefixed by its length so that
    bytes moved from the end of one file to the start of the next change it too."""
    digest = hashlib.sha256()
    for path in kernel_sources() if paths is None else paths:
        data = path.read_bytes()
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()[:16]


def tag_caches() -> None:
    """Add ``blendforge-ops-<fingerprint>`` to ``torch.compiler.config.cache_key_tag`` (after any tag of the
    user's, once), so Inductor's, AOTAutograd's and the ``--compile-cache`` file's entries compiled from other
    sources of our Triton ops miss instead of running them."""
    tag = f"blendforge-ops-{kernel_fingerprint()}"
    current = torch.compiler.config.cache_key_tag
    if tag not in current.split("+"):
        torch.compiler.config.cache_key_tag = f"{current}+{tag}" if current else tag


def should_compile(mode: str, device: torch.device, why_eager: str | None) -> bool:
    """Whether ``--compile mode`` compiles here: ``blocks`` always (an error when ``why_eager`` says the
    blocks must stay eager), ``auto`` on CUDA unless ``why_eager`` (logged), ``off`` never."""
    if mode == "blocks" and why_eager:
        raise ConfigError(f"--compile blocks: {why_eager}; use --compile off (or auto)")
    if mode == "auto" and device.type == "cuda" and why_eager:
        log.info("--compile auto: blocks stay eager: %s", why_eager)
    return mode == "blocks" or (mode == "auto" and device.type == "cuda" and why_eager is None)


def compile_model(model: GPT) -> None:
    """Compile every block of ``model`` and its final norm in place (their state-dict keys are unchanged) and
    its fused loss's per-chunk step, with the compile caches keyed on our Triton ops' sources too
    (:func:`tag_caches`)."""
    tag_caches()
    for module in [*model.layers, model.final_norm]:
        if module is not None:
            module.compile(options=INDUCTOR_OPTIONS)
    model.chunk_loss = compile_chunk_loss()


def cache_file(path: str, rank: int, world_size: int) -> Path:
    """``--compile-cache``'s file for this process: ``path``, or ``path.rankN`` when several processes each
    compile their own stage's and shard's graphs."""
    return Path(path) if world_size == 1 else Path(f"{path}.rank{rank}")


def load_compiled(path: Path) -> None:
    """Warm this process's compile caches from ``path`` (missing: logged; unreadable or foreign: a warning,
    and the run compiles as without it)."""
    if not path.exists():
        log.info("--compile-cache %s: not there yet; written after the first step", path)
        return
    try:
        info = torch.compiler.load_cache_artifacts(path.read_bytes())  # None (and torch's warning) if damaged
        problem = None if info is not None else "torch rejected its contents"
    except Exception as error:  # NOTE: any failure here only costs the compilation the cache would have saved
        info, problem = None, f"{type(error).__name__}: {str(error)[:200]}"
    if info is None:
        log.warning("--compile-cache %s could not be loaded (%s); compiling without it, and the file will be "
                    "rewritten", path, problem)
        return
    kinds = ", ".join(f"{len(keys)} {kind}" for kind, keys in info.artifacts.items())
    log.info("--compile-cache %s: loaded %s", path, kinds or "nothing")


def _graph_counts() -> tuple[int, int]:
    """Inductor's graphs so far in this process: (served by a cache, compiled)."""
    from torch._dynamo.utils import counters  # NOTE: here, so a run that never compiles never imports Dynamo

    return counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]


@contextlib.contextmanager
def announce_compilation(step: int, cache: Path | None) -> Iterator[None]:
    """Log that step ``step`` compiles the blocks before it runs and, once it has, how long it took and how many
    graphs a cache served: a cold compile of a large model is minutes without output, which looks like a hang.
    ``cache``: the run's ``--compile-cache`` file (None: the line says what it would spare)."""
    hint = (f"a warm Inductor cache or --compile-cache {cache} (when it holds this model) makes it seconds"
            if cache else "--compile-cache FILE keeps the result for the next run")
    log.info("step %d: compiling the transformer blocks (torch.compile; minutes on a GPU when Inductor's cache is "
             "cold; %s)", step, hint)
    hits, misses = _graph_counts()
    start = time.perf_counter()
    yield
    now_hits, now_misses = _graph_counts()
    log.info("step %d: compiled and ran in %.1f s (%d graphs compiled, %d from a cache); later steps run the "
             "compiled blocks", step, time.perf_counter() - start, now_misses - misses, now_hits - hits)


def save_compiled(path: Path) -> None:
    """Write everything this process compiled or loaded to ``path`` (a temporary name, then a rename), and
    log how many of its graphs the cache served."""
    artifacts = torch.compiler.save_cache_artifacts()
    if artifacts is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, artifacts[0])
    hits, misses = _graph_counts()
    log.info("--compile-cache %s: written (%.1f MB); graphs so far: %d from a cache, %d compiled", path,
             len(artifacts[0]) / 1e6, hits, misses)
