"""Checkpoints in Megatron's layout, written with ``torch.distributed.checkpoint`` (sharded, so a later
run at another parallel layout can reshard them)::

    SAVE/iter_0000100/   .metadata, __0_0.distcp …  model, optimizer, torch RNG states
                         run.json                    step, loader states, Python/numpy RNG, config
    SAVE/latest_checkpointed_iteration.txt           "100"

Atomic: a checkpoint is written under a hidden partial name and renamed to ``iter_*`` only when
complete (the rename is the commit point), then the tracker file is replaced. A process killed at any
moment leaves the previous checkpoint loadable and never a half-written ``iter_*`` folder.

Many processes (torchrun): every rank writes its shards into the partial folder rank 0 named; rank 0
alone writes ``run.json``, renames, updates the tracker and prunes, between barriers, so no rank moves
on before the commit. The folder must be on storage every rank sees (a shared filesystem across nodes).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from corpus.core.atomic_write import fsync_folder, write_atomically
from corpus.core.disk import OutputError, free_bytes
from trainer.errors import CheckpointError

log = logging.getLogger(__name__)

TRACKER = "latest_checkpointed_iteration.txt"
INFO = "run.json"
_ITER = re.compile(r"^iter_(\d{7,})$")


def iteration_dir(root: str | os.PathLike, iteration: int) -> Path:
    """``root/iter_0000100`` for iteration 100 (Megatron's naming)."""
    return Path(root) / f"iter_{iteration:07d}"


def _is_complete(directory: Path) -> bool:
    return (directory / ".metadata").is_file() and (directory / INFO).is_file()


def complete_iterations(root: Path) -> list[int]:
    """Iterations with a complete checkpoint under ``root``, ascending."""
    if not root.is_dir():
        return []
    found = [int(m.group(1)) for entry in root.iterdir() if (m := _ITER.match(entry.name))]
    return sorted(i for i in found if _is_complete(iteration_dir(root, i)))


def _dcp_call(function, state: dict, directory: Path) -> None:
    with warnings.catch_warnings():  # NOTE: one process needs no process group; DCP warns about that
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
        function(state, checkpoint_id=str(directory), no_dist=not dist.is_initialized())


def _is_writer() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def _partial_dir(root: Path, final: Path) -> Path:
    """The partial folder of this save: rank 0 clears stale ones and names it, every rank learns the name."""
    name = [None]
    if _is_writer():
        root.mkdir(parents=True, exist_ok=True)
        for stale in root.glob(".iter_*.partial-*"):  # left by a process killed mid-save
            shutil.rmtree(stale, ignore_errors=True)
        name = [f".{final.name}.partial-{os.getpid()}"]
        (root / name[0]).mkdir()
    if dist.is_initialized():
        dist.broadcast_object_list(name, src=0)
    return root / name[0]


def save(root: str | os.PathLike, iteration: int, tensors: dict, info: dict, retain: int | None = None) -> Path:
    """Write checkpoint ``iteration`` under ``root`` atomically, point the tracker at it and keep only the
    newest ``retain`` checkpoints. ``tensors`` goes through DCP (every rank its shards); ``info`` (JSON,
    rank 0's) into ``run.json``."""
    root = Path(root)
    final = iteration_dir(root, iteration)
    partial = root
    try:
        partial = _partial_dir(root, final)
        _dcp_call(dcp.save, tensors, partial)
        if _is_writer():
            _commit(root, partial, final, iteration, info, retain)
    except (OSError, CheckpointException) as error:
        if _is_writer() and partial != root:
            shutil.rmtree(partial, ignore_errors=True)  # never a half-written checkpoint left behind
        cause = _os_error(error, partial, _tensor_bytes(tensors))
        if cause is None:
            raise
        raise _save_failed(root, partial, cause, _tensor_bytes(tensors)) from None
    if dist.is_initialized():
        dist.barrier()
    return final


def _tensor_bytes(state: object) -> int:
    """Bytes of the tensors in a (nested) state dict: about what this rank's shards take on disk."""
    if isinstance(state, torch.Tensor):
        return state.nelement() * state.element_size()
    if isinstance(state, dict):
        return sum(_tensor_bytes(value) for value in state.values())
    if isinstance(state, (list, tuple)):
        return sum(_tensor_bytes(value) for value in state)
    return 0


def _os_error(error: BaseException, partial: Path, needed: int) -> OSError | None:
    """The file system error behind a failed save (DCP wraps each rank's in a CheckpointException). A failure that
    carries none while the disk has less room than the checkpoint needs is taken for a full disk: torch's zip
    writer reports a short write as a ``RuntimeError`` ("unexpected pos") and drops the ``ENOSPC`` behind it."""
    if isinstance(error, OSError):
        return error
    failures = error.failures.values() if isinstance(error, CheckpointException) else ()
    cause = next((failure for failure, _ in failures if isinstance(failure, OSError)), None)
    free = free_bytes(partial)
    if cause is None and free is not None and free < needed:
        cause = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(partial))
    return cause


def _save_failed(root: Path, partial: Path, error: OSError, needed: int) -> OutputError:
    """The one-line error of a save the disk refused, naming the checkpoint still there to resume from and, for a
    full disk, the space the checkpoint needs."""
    previous = complete_iterations(root)
    resume = (f"resume with --load {root} (iteration {previous[-1]} is intact)" if previous
              else "run again (no checkpoint was completed)")
    return OutputError(error.filename or partial, error, needed).for_command("--save", resume)


def _commit(root: Path, partial: Path, final: Path, iteration: int, info: dict, retain: int | None) -> None:
    write_atomically(partial / INFO, json.dumps({"iteration": iteration, **info}, indent=2, sort_keys=True) + "\n")
    if final.exists():  # re-saving an iteration (a new run over an old folder): swap, then drop the old one
        replaced = root / f".{final.name}.replaced-{os.getpid()}"
        os.replace(final, replaced)
        os.replace(partial, final)
        shutil.rmtree(replaced)
    else:
        os.replace(partial, final)
    fsync_folder(root)
    write_atomically(root / TRACKER, f"{iteration}\n")
    _prune(root, retain, keep=iteration)


def _prune(root: Path, retain: int | None, keep: int) -> None:
    if retain is None:
        return
    for iteration in complete_iterations(root)[:-retain]:
        if iteration != keep:
            shutil.rmtree(iteration_dir(root, iteration))
            log.info("removed checkpoint %s (--save-retain %d)", iteration_dir(root, iteration), retain)


def find(path: str | os.PathLike) -> Path | None:
    """The checkpoint folder ``--load PATH`` means: PATH itself when it is one ``iter_*`` checkpoint;
    else the tracker's iteration, or the newest complete checkpoint when the tracker is missing or
    points at nothing complete; None when PATH holds no checkpoint (a first run with --load = --save)."""
    path = Path(path)
    if path.is_file():
        raise CheckpointError(f"--load {path} is a file, not a checkpoint folder; give the --save folder of the run "
                              "(or one iter_* folder in it)")
    if _is_complete(path):
        return path
    iterations = complete_iterations(path)
    tracker = path / TRACKER
    if tracker.is_file():
        text = tracker.read_text().strip()
        if text.isdigit() and int(text) in iterations:
            return iteration_dir(path, int(text))
        log.warning("%s says %r but that checkpoint is missing or incomplete", tracker, text)
    if (path / ".metadata").exists() or (path.name.startswith("iter_") and path.is_dir()):
        raise CheckpointError(f"{path}: incomplete checkpoint (no {INFO} or .metadata); load another iter_* folder "
                              f"or its parent")
    if iterations:
        log.warning("loading the newest complete checkpoint under %s: iteration %d", path, iterations[-1])
        return iteration_dir(path, iterations[-1])
    return None


def read_info(directory: str | os.PathLike) -> dict:
    """The ``run.json`` of a checkpoint folder."""
    path = Path(directory) / INFO
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path}: cannot read ({error}); is this a blendforge checkpoint folder?") from None


def read_metadata(directory: str | os.PathLike) -> dcp.metadata.Metadata:
    """DCP's index of a checkpoint folder: every saved key with its global shape."""
    return dcp.FileSystemReader(str(directory)).read_metadata()


def load(directory: str | os.PathLike, tensors: dict) -> None:
    """Fill ``tensors`` (a template with the wanted keys, e.g. only ``model``) in place from ``directory``."""
    try:
        _dcp_call(dcp.load, tensors, Path(directory))
    except (RuntimeError, ValueError, KeyError) as error:
        raise CheckpointError(f"{directory}: cannot load into this model ({str(error).splitlines()[0][:300]}); "
                              "was it saved with another model shape?") from None

