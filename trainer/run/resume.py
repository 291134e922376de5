"""A run into and out of checkpoints: :func:`save` writes the model, optimizer, RNG and loader state of every
rank (and the per-source token counts, the online mixer's state); :func:`resume` restores them at any parallel
layout (the checkpoint's shape must match; only the vocabulary's padding may differ)."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from trainer.checkpoint import store as checkpoint
from trainer.checkpoint.state_dict import (
    copy_padded_rows,
    fit_padded_rows,
    init_optimizer_state,
    model_state,
    optimizer_state,
)
from trainer.errors import CheckpointError
from trainer.run.state import Run
from trainer.runtime.rng import rng_state, set_rng_state

log = logging.getLogger(__name__)


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
    if run.telemetry is not None:
        info["telemetry"] = run.telemetry.state_dict()
    if run.mixer is not None:
        info["mixing"] = run.mixer.state_dict()
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
    if run.telemetry is not None:
        run.telemetry.load_state_dict(info.get("telemetry"))
    if run.mixer is not None:
        run.mixer.load_state_dict(info.get("mixing"))
        # NOTE: after the loader's draw is restored: unchanged weights leave its segment as it was (exact resume)
        run.data.online.set_weights(run.mixer.weights, run.data.loaders["train"].consumed_samples)
    run.iteration = info["iteration"]
    if run.iteration > run.config.training.train_iters:
        raise CheckpointError(f"{directory} is at iteration {run.iteration}, past --train-iters "
                              f"{run.config.training.train_iters}; raise --train-iters to continue")
