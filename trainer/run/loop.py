"""The training loop: gradient accumulation to the global batch, clipping, the LR schedule, evaluation,
logging, checkpoints and clean stops. ``train(config)`` is what ``trainer run`` calls.

A step (counted from 1, after the optimizer update) takes ``global_batch / (micro_batch × DP)``
micro-batches; the loss is the mean over every unmasked token of the global batch, so accumulating
micro-batches gives the same gradient as one large batch.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from corpus.core.errors import ConfigError
from trainer.config.schema import TrainConfig
from trainer.errors import OutOfMemory, TrainingDiverged
from trainer.optim.optimizer import clipped_step, set_learning_rate
from trainer.parallel.state import shutdown_parallel
from trainer.parallelize.compile import announce_compilation, save_compiled
from trainer.run.build import build_run, metrics_sink
from trainer.run.metrics import MetricsSink, perplexity, throughput
from trainer.run.profiling import StepProfiler
from trainer.run.resume import save
from trainer.run.state import Run
from trainer.run.telemetry import evaluation_record
from trainer.runtime.collection import GarbageCollection, garbage_collection
from trainer.runtime.device import fetch_later
from trainer.runtime.stops import stop_on_signals

log = logging.getLogger(__name__)

OOM_HINT = ("lower --micro-batch-size (--global-batch-size stays reached by gradient accumulation), shorten "
            "--seq-length, or pick a smaller --preset; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True reduces "
            "fragmentation")
#: What torch's CPU allocator says when it cannot allocate (a plain RuntimeError, unlike CUDA's OutOfMemoryError).
CPU_OOM = "DefaultCPUAllocator: can't allocate memory"


def out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is an allocation that failed, on a GPU or on the CPU."""
    return isinstance(error, torch.OutOfMemoryError) or (isinstance(error, RuntimeError) and CPU_OOM in str(error))


@dataclass
class StepResult:
    """What one optimizer step measured."""

    loss: float
    grad_norm: float
    lr: float
    seconds: float


@dataclass
class TrainResult:
    """How a run ended."""

    iteration: int
    loss: WindowLoss | None
    stopped_by: str
    checkpoint: Path | None


def _next_batch(run: Run, split: str) -> dict[str, torch.Tensor]:
    """The next micro-batch of ``split``. An evaluation split that runs out (a run extended past the
    --train-iters its loader was sized for) starts over instead of stopping the training."""
    try:
        return next(run.batches(split))
    except StopIteration:
        if split == "train":
            raise ConfigError(f"the train data ran out of samples at step {run.iteration}; the loader was built for "
                              "fewer samples than this run reads") from None
    log.info("%s data exhausted at step %d: evaluating from its first sample again", split, run.iteration)
    loader = run.data.loaders[split]
    loader.load_state_dict({**loader.state_dict(), "consumed_samples": 0})
    run.iterators[split] = iter(loader)
    return next(run.iterators[split])


def _micro_batches(run: Run, split: str, count: int) -> list[dict[str, torch.Tensor]]:
    return _checked(run, [_next_batch(run, split) for _ in range(count)], f"{split} data")


def _checked(run: Run, batches: list[dict[str, torch.Tensor]], what: str) -> list[dict[str, torch.Tensor]]:
    """``batches``, once no token id in them is outside the model's vocabulary."""
    # NOTE: the largest id over every rank, so that all ranks stop together (no rank left in a collective)
    largest = int(run.engine.world_max(max(float(batch["tokens"].max()) for batch in batches)))
    if largest >= run.model.vocab_size:
        raise ConfigError(f"{what} holds token id {largest} but the model's vocabulary is "
                          f"{run.model.vocab_size}: the data was tokenized with a bigger vocabulary; give a "
                          f"--vocab-size above {largest}")
    return batches


def train_step(run: Run) -> StepResult:
    """One optimizer step over a global batch; raises :class:`TrainingDiverged` before applying a bad one."""
    started = time.perf_counter()
    batches = _micro_batches(run, "train", run.accumulation)
    counts = run.engine.token_counts(batches)
    tokens = max(1.0, counts[0])
    sums = run.engine.forward_backward(batches, tokens)
    values = torch.stack([sums[0] / tokens, run.engine.reducer.global_norm()])
    finite = torch.isfinite(values).all()
    # NOTE: read after the update is queued, so the GPU never waits for Python; the per-source sums come along
    read_values = fetch_later(torch.cat([values, sums[1:]]))
    step = run.iteration + 1
    lr = run.schedule(step)
    set_learning_rate(run.optimizer, lr)
    clipped_step(run.optimizer, values[1], run.config.optim.clip_grad or math.inf, finite)
    run.engine.reducer.gather_weights()
    loss, grad_norm, *source_loss_sums = read_values()
    if not (math.isfinite(loss) and math.isfinite(grad_norm)):
        raise TrainingDiverged(
            f"step {step}: loss {loss}, gradient norm {grad_norm}; the step was not applied and the last "
            "checkpoint is untouched. Resume from it with a lower --lr, a longer --lr-warmup-iters or "
            "--clip-grad 1.0; check the data around this step with the corpus blend command logged at start")
    run.iteration = step
    if run.mixer is not None:
        _mix(run, source_loss_sums, counts[1:])
    if run.telemetry is not None:
        run.telemetry.add(source_loss_sums, counts[1:])
    return StepResult(loss, grad_norm, lr, time.perf_counter() - started)


def _mix(run: Run, loss_sums: list[float], tokens: list[float]) -> None:
    """Hand the step's per-source losses (the same on every rank: all-reduced) to the online mixer; when it
    updates, the next step's samples are drawn with the new weights."""
    weights = run.mixer.after_step(run.iteration, loss_sums, tokens)
    if weights is None:
        return
    run.data.online.set_weights(weights, run.data.loaders["train"].consumed_samples)
    mixer = run.mixer
    losses = ", ".join(f"{name} {loss:.{mixer.config.loss_decimals}f}" for name, loss in zip(
        mixer.names, mixer.last_losses))
    log.info("step %d: online mixing update %d (%s) from the losses of steps %d-%d (%s): weights %s", run.iteration,
             mixer.updates, mixer.config.rule, run.iteration - mixer.config.update_interval + 1, run.iteration, losses,
             ", ".join(f"{name} {weight:.3f}" for name, weight in zip(mixer.names, weights)))


def _loss_and_tokens(run: Run, draw: Callable[[], list[dict[str, torch.Tensor]]], iterations: int
                     ) -> tuple[float, float]:
    """Token loss sum and loss-bearing tokens over ``iterations`` global batches ``draw`` gives, forward only."""
    total, tokens = 0.0, 0.0
    for _ in range(iterations):
        batches = draw()
        total += run.engine.evaluate(batches)
        tokens += run.engine.global_tokens(batches)
    return total, tokens


def evaluate(run: Run, split: str) -> float | None:
    """Mean token loss over ``--eval-iters`` global batches of ``split`` (None when it has no data)."""
    if run.data.loaders.get(split) is None or run.config.logging.eval_iters == 0:
        return None
    run.engine.reducer.wait_weights()
    total, tokens = _loss_and_tokens(run, lambda: _micro_batches(run, split, run.accumulation),
                                     run.config.logging.eval_iters)
    return total / max(tokens, 1.0)


def evaluate_sources(run: Run) -> dict[str, tuple[float, float]]:
    """Each source's (loss sum, tokens) over its fixed validation samples, read from the first one at every call
    (so every evaluation sees the same samples)."""
    run.engine.reducer.wait_weights()
    iterations = run.data.source_valid_samples // run.global_batch_size
    return {name: _loss_and_tokens(run, _from_the_start(run, loader, f"{name}'s validation data"), iterations)
            for name, loader in run.data.source_valid.items()}


def _from_the_start(run: Run, loader, what: str) -> Callable[[], list[dict[str, torch.Tensor]]]:
    """The function giving ``loader``'s global batches one after another, from its first sample."""
    loader.load_state_dict({**loader.state_dict(), "consumed_samples": 0})
    batches = iter(loader)
    return lambda: _checked(run, [next(batches) for _ in range(run.accumulation)], what)


@dataclass(frozen=True)
class WindowLoss:
    """The training loss a run reports: the mean over the steps ``first`` to ``last`` since the previous log line
    (Megatron's definition; a console line, a ``--metrics-jsonl`` record and the run's summary all use it)."""

    loss: float
    first: int
    last: int


class _Window:
    """Steps since the last log line: averaged loss and throughput over them."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.seconds = 0.0
        self.logged: WindowLoss | None = None  # the loss of the last log line

    def add(self, result: StepResult) -> None:
        self.losses.append(result.loss)
        self.seconds += result.seconds

    def loss(self, step: int) -> WindowLoss | None:
        """The loss over the steps up to ``step`` not logged yet, else the last log line's."""
        if not self.losses:
            return self.logged
        return WindowLoss(sum(self.losses) / len(self.losses), step - len(self.losses) + 1, step)

    def record(self, run: Run, last: StepResult) -> dict:
        tokens = len(self.losses) * run.global_batch_size * run.data.seq_length
        logged = self.loss(run.iteration)
        record = {"step": run.iteration, "loss": logged.loss, "lr": last.lr, "grad_norm": last.grad_norm,
                  **throughput(tokens, self.seconds, run.flops_per_token, run.parallel.world_size, run.peak_tflops),
                  "consumed_samples": run.iteration * run.global_batch_size}
        if run.telemetry is not None:
            record["sources"] = run.telemetry.record(record["consumed_samples"])
        if run.data.schedule is not None:
            record["phase"] = run.data.schedule.phase_at(record["consumed_samples"] - 1) + 1
        if run.parallel.device.type == "cuda":  # the peak of these steps: an eager first step's stays its own
            record["peak_memory_gib"] = torch.cuda.max_memory_allocated(run.parallel.device) / 2**30
            torch.cuda.reset_peak_memory_stats(run.parallel.device)
        self.__init__()
        self.logged = logged
        return record


def _evaluate_and_log(run: Run, sink: MetricsSink, split: str = "valid") -> None:
    loss = evaluate(run, split)
    if loss is not None:
        record = {"step": run.iteration, "split": split, "eval_loss": loss, "eval_ppl": perplexity(loss)}
        if split == "valid" and run.data.source_valid:
            record["sources"] = evaluation_record(evaluate_sources(run))
        sink.write(record)


def _announce_phase(run: Run, previous: int | None) -> int | None:
    """Log the phase of the blend's weight schedule the next step starts in, when it is not ``previous``'s (the
    first step of a run or of a resume always logs it); returns that phase."""
    schedule = run.data.schedule
    if schedule is None:
        return None
    first = run.iteration * run.global_batch_size
    phase = schedule.phase_at(first)
    if phase != previous:
        weights = ", ".join(f"{name} {weight:.3f}" for name, weight in zip(schedule.names, schedule.weights_at(first)))
        ramp = (f", ramping to {', '.join(f'{w:.3f}' for w in schedule.end[phase])}"
                if (schedule.start[phase] != schedule.end[phase]).any() else "")
        log.info("step %d: phase %d/%d of the blend's schedule (samples %d-%d): weights %s%s", run.iteration + 1,
                 phase + 1, schedule.num_phases, schedule.bounds[phase], schedule.bounds[phase + 1] - 1, weights, ramp)
    return phase


def _loop(run: Run, sink: MetricsSink, profiler: StepProfiler, stop,
          collection: GarbageCollection) -> tuple[str, WindowLoss | None]:
    """Steps until ``--train-iters`` or a stop request; returns (why it stopped, the loss as logged)."""
    config, window, last, steps, phase = run.config, _Window(), None, 0, None
    compiling_step = 1 + run.fp8.parts.eager_steps if run.compiled else None  # this process's steps, from 1
    while run.iteration < config.training.train_iters:
        phase = _announce_phase(run, phase)
        profiler.before_step(run.iteration + 1)
        announce = (announce_compilation(run.iteration + 1, run.compile_cache) if steps + 1 == compiling_step
                    else contextlib.nullcontext())
        try:
            with announce:
                last = train_step(run)
        except RuntimeError as error:
            if not out_of_memory(error):
                raise
            raise OutOfMemory(f"out of memory at step {run.iteration + 1}: {OOM_HINT}") from None
        steps += 1
        if steps == compiling_step and run.compile_cache:
            save_compiled(run.compile_cache)  # the training graphs, kept even if this run is killed later
        profiler.after_step(run.iteration)
        collection.after_step(run.iteration)
        window.add(last)
        if run.iteration % config.logging.log_interval == 0 or run.iteration == config.training.train_iters:
            sink.write(window.record(run, last))
        if config.logging.eval_iters and run.iteration % config.logging.eval_interval == 0:
            collection.before_pause()
            _evaluate_and_log(run, sink)
        reason = stop.check(run.iteration)
        if run.engine.any_rank(reason is not None) and reason is None:
            reason = "another rank asked to stop"  # every rank must save and stop at the same step
        interval = config.checkpoint.save_interval
        if config.checkpoint.save and (reason or (interval and run.iteration % interval == 0)):
            collection.before_pause()
            save(run)
        if reason:
            return reason, window.loss(run.iteration)
    return "completed", window.loss(run.iteration)


def train(config: TrainConfig) -> TrainResult:
    """Run training as ``config`` says: build, resume, loop, evaluate, checkpoint. Returns how it ended.

    Running out of memory anywhere (building, a step, an evaluation) is an :class:`OutOfMemory` naming the knobs."""
    try:
        return _train(config)
    except RuntimeError as error:
        if not out_of_memory(error):
            raise
        raise OutOfMemory(f"out of memory: {OOM_HINT}") from None


def _train(config: TrainConfig) -> TrainResult:
    run = build_run(config)
    for split, command in run.data.reproduce.items():
        log.info("%s samples of this run: %s", split, command)
    sink = metrics_sink(run)
    profiler = StepProfiler(config.profile, config.logging.tensorboard_dir, run.parallel.device)
    try:
        with stop_on_signals(config.training) as stop, garbage_collection(config.training) as collection:
            stopped_by, loss = _loop(run, sink, profiler, stop, collection)
            run.engine.reducer.wait_weights()  # ZeRO-1 broadcasts still in flight (--overlap-param-gather)
            profiler.stop(run.iteration)
            if stopped_by == "completed":
                if config.logging.eval_iters and run.iteration % config.logging.eval_interval:
                    _evaluate_and_log(run, sink)
                _evaluate_and_log(run, sink, "test")
            if run.compile_cache:
                save_compiled(run.compile_cache)  # now with the evaluation graphs
            if config.checkpoint.save and run.checkpoint_iteration != run.iteration:
                save(run)
    finally:
        sink.close()
        shutdown_parallel(run.parallel)
    log.info("stopped at step %d: %s", run.iteration, stopped_by)
    return TrainResult(run.iteration, loss, stopped_by, run.checkpoint_dir)
