"""Checkpoint state of a model split over TP × PP × DP, in a layout-independent form that
``torch.distributed.checkpoint`` reshards on load.

- Names are the whole model's (``layers.<global index>…``), whatever stage holds a layer, so a
  pipeline layout changes only who saves and loads which key.
- A tensor-parallel weight is stored as its *logical* whole (``ShardedWeight.logical_shape``): a DTensor
  over the mesh's ``tp`` dimension, ``Shard(logical_dim)``; one TP rank's piece is a chunk of it, so any
  TP size reads what it needs. SwiGLU's ``[gate; up]`` is ``[2, ffn, d]`` sharded on dim 1, so the halves
  stay halves.
- Optimizer state (AdamW ``exp_avg``, ``exp_avg_sq``, ``step``) is per parameter, under the same name, saved
  by whichever DP rank steps the parameter (all with plain DDP, its owner under ZeRO-1); replicas are
  deduplicated by DCP.
- The padded vocabulary depends on TP (``--make-vocab-size-divisible-by`` × TP): an embedding or output
  layer saved with another padding loads the rows both have (the real vocabulary is always among them).

Every entry is a view of the live tensor, so DCP loads in place.
"""

from __future__ import annotations

import logging
from typing import Iterator

import torch
from torch import nn
from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata
from torch.distributed.tensor import DTensor, Shard

from trainer.errors import CheckpointError
from trainer.model.gpt import GPT
from trainer.model.layers import ShardedWeight
from trainer.parallel.state import ParallelState

log = logging.getLogger(__name__)

ADAM_STATES = ("exp_avg", "exp_avg_sq")


def named_parameters(chunks: list[GPT]) -> Iterator[tuple[str, nn.Module, nn.Parameter]]:
    """(global name, owning module, parameter) of every parameter of the chunks."""
    for chunk in chunks:
        for module_name, module in chunk.named_modules():
            for name, param in module.named_parameters(recurse=False):
                yield chunk.global_name(f"{module_name}.{name}" if module_name else name), module, param


def _contiguous_stride(shape: tuple[int, ...]) -> tuple[int, ...]:
    return torch.empty(shape, device="meta").stride()


def checkpoint_view(module: nn.Module, tensor: torch.Tensor, parallel: ParallelState) -> torch.Tensor:
    """``tensor`` (a parameter of ``module`` or a state shaped like it) as the checkpoint stores it."""
    tensor = tensor.detach()
    if not isinstance(module, ShardedWeight):
        return tensor
    local = module.logical_weight(tensor)
    if parallel.tp_size == 1:
        return local
    return DTensor.from_local(local, parallel.mesh["tp"], [Shard(module.logical_dim)], run_check=False,
                              shape=torch.Size(module.logical_shape), stride=_contiguous_stride(module.logical_shape))


def model_state(chunks: list[GPT], parallel: ParallelState) -> dict[str, torch.Tensor]:
    """The chunks' weights by global name (views: loading fills the model in place)."""
    return {name: checkpoint_view(module, param, parallel) for name, module, param in named_parameters(chunks)}


def init_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Create AdamW's state for every parameter it steps without changing any weight (a step with zero
    gradients at learning rate 0), so a checkpoint has tensors to load into."""
    saved = [(group["lr"], group["weight_decay"]) for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["lr"], group["weight_decay"] = 0.0, 0.0
        for param in group["params"]:
            param.grad = torch.zeros_like(param) if param.grad is None else param.grad.zero_()
    optimizer.step()
    for group, (lr, decay) in zip(optimizer.param_groups, saved):
        group["lr"], group["weight_decay"] = lr, decay


def optimizer_state(chunks: list[GPT], optimizer: torch.optim.Optimizer, parallel: ParallelState) -> dict:
    """``{"state": {global name: {exp_avg, exp_avg_sq, step}}}`` for the parameters this rank steps."""
    state = {}
    for name, module, param in named_parameters(chunks):
        if param in optimizer.state and optimizer.state[param]:
            entry = optimizer.state[param]
            state[name] = {key: checkpoint_view(module, entry[key], parallel) for key in ADAM_STATES}
            state[name]["step"] = entry["step"]
    return {"state": state}


def _leaves(tree: dict, prefix: str = "") -> Iterator[tuple[dict, str, str]]:
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield tree, key, f"{prefix}{key}"


def fit_padded_rows(template: dict, metadata: Metadata) -> list[tuple[torch.Tensor, torch.Tensor, int]]:
    """Replace entries whose saved shape differs only in rows (a vocabulary padded for another TP size) by
    buffers of the saved shape; returns (buffer, target, first row of the target) to copy back with
    :func:`copy_padded_rows` once loaded. Any other shape difference is a :class:`CheckpointError`."""
    fixes = []
    for parent, key, fqn in _leaves(template):
        saved, value = metadata.state_dict_metadata.get(fqn), parent[key]
        if not isinstance(saved, TensorStorageMetadata) or saved.size == value.size():
            continue
        if len(saved.size) != value.dim() or saved.size[1:] != value.size()[1:]:
            raise CheckpointError(f"{fqn}: saved with shape {tuple(saved.size)}, this model has "
                                  f"{tuple(value.size())}; give the shape flags of the run that saved it")
        local = value.to_local() if isinstance(value, DTensor) else value
        first = value.device_mesh.get_local_rank() * local.shape[0] if isinstance(value, DTensor) else 0
        parent[key] = torch.empty(saved.size, dtype=saved.properties.dtype, device=local.device)
        fixes.append((parent[key], local, first))
        log.warning("%s: saved with %d rows (vocabulary padded for another TP size), this layout has %d; "
                    "loading the rows both have", fqn, saved.size[0], value.size()[0])
    return fixes


def copy_padded_rows(fixes: list[tuple[torch.Tensor, torch.Tensor, int]]) -> None:
    """Copy each loaded buffer's rows into the target shard that holds them."""
    for buffer, target, first in fixes:
        rows = max(0, min(target.shape[0], buffer.shape[0] - first))
        target[:rows].copy_(buffer[first:first + rows])
