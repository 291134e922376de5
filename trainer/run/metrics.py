"""Training metrics: the FLOP convention, MFU, and the console / TensorBoard / JSONL sinks.

Model FLOPs per token = 6·N + 12·L·d·S (PaLM's convention): N counts the weights of matmuls (all
parameters but the input embedding, a lookup, and the norm scales; the output layer is counted), the 6
is forward + backward of each weight's multiply-add, and 12·L·d·S the attention scores and weighted
sums over the full S×S square (no discount for causality). It equals what torch's FLOP counter
measures for this model (a test checks it). MFU divides that work per second by the dense bf16 peak of the
devices; for a device with no known peak MFU is omitted with a note (``--peak-tflops`` supplies one).

A record's ``sources`` object (per-source telemetry, :mod:`trainer.run.telemetry`) goes to TensorBoard as
``loss/<name>``, ``tokens/<name>``, ``tokens_total/<name>``, ``share/<name>``, ``scheduled_share/<name>`` and
``weight/<name>`` (training) or
``<split>_loss/<name>`` (evaluation), and to the console as one line per source when there are several.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

import torch

from corpus.core.atomic_write import write_atomically
from trainer.config.schema import LoggingConfig, ModelConfig

log = logging.getLogger(__name__)

FLOP_CONVENTION = ("model FLOPs/token = 6N + 12*L*d*S (N: matmul weights, i.e. all but the input embedding "
                   "and norms; full-square attention), MFU against the dense bf16 peak")

#: Dense (non-sparse) bf16 tensor-core peak in TFLOP/s, by a substring of torch.cuda.get_device_name().
PEAK_BF16_TFLOPS: dict[str, float] = {
    "H100": 989.4,
    "H200": 989.4,
    "H800": 989.4,
    "A100": 312.0,
    "A800": 312.0,
    "L40S": 362.1,
}


def flops_per_token(model: ModelConfig, matmul_params: int, seq_length: int) -> float:
    """Model FLOPs to train on one token (forward + backward), by :data:`FLOP_CONVENTION`."""
    return 6.0 * matmul_params + 12.0 * model.num_layers * model.hidden_size * seq_length


def peak_tflops(device: torch.device, override: float | None) -> tuple[float | None, str]:
    """Dense bf16 peak TFLOP/s of one device and where the figure came from (None: unknown)."""
    if override is not None:
        return override, "--peak-tflops"
    if device.type != "cuda":
        return None, f"no bf16 peak known for {device.type}; MFU omitted (give --peak-tflops to report it)"
    name = torch.cuda.get_device_name(device)
    for key, value in PEAK_BF16_TFLOPS.items():
        if key in name:
            return value, f"{name} dense bf16 peak"
    return None, f"no bf16 peak known for {name}; MFU omitted (give --peak-tflops to report it)"


def throughput(tokens: int, seconds: float, flops_token: float, num_devices: int, peak: float | None) -> dict:
    """tokens/s (global and per device), model TFLOP/s per device and MFU for ``tokens`` in ``seconds``."""
    tokens_per_s = tokens / seconds
    tflops = tokens_per_s * flops_token / num_devices / 1e12
    record = {"tokens_per_s": tokens_per_s, "tokens_per_s_per_gpu": tokens_per_s / num_devices,
              "tflops_per_gpu": tflops}
    if peak:
        record["mfu"] = tflops / peak
    return record


def trim_jsonl(path: Path, last_step: int) -> None:
    """Drop records after ``last_step`` (steps a crashed run logged past its last checkpoint), atomically,
    so a resumed run's file reads as one uninterrupted curve."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line torn by a kill mid-write
            continue
        if record.get("step", math.inf) <= last_step:
            kept.append(line)
    write_atomically(path, "".join(line + "\n" for line in kept))


def set_aside(path: Path) -> Path | None:
    """Move an earlier run's non-empty ``path`` to the first free ``<name>.1``, ``<name>.2``… (a rename) and
    return where it went: a fresh run writes its own file, and the old records are kept, not mixed in."""
    if not path.exists() or path.stat().st_size == 0:
        return None
    number = 1
    while (aside := path.with_name(f"{path.name}.{number}")).exists():
        number += 1
    os.replace(path, aside)
    return aside


class MetricsSink:
    """Writes each record to the console, TensorBoard (``--tensorboard-dir``) and JSONL (``--metrics-jsonl``)."""

    def __init__(self, config: LoggingConfig, resumed_step: int, train_iters: int, device: str = "GPU") -> None:
        """``device`` names what the per-device figures are per on console lines: ``GPU``, or ``process`` on CPU."""
        self.config, self.train_iters, self.device = config, train_iters, device
        self.jsonl = None
        if config.metrics_jsonl:
            path = Path(config.metrics_jsonl)
            path.parent.mkdir(parents=True, exist_ok=True)
            if resumed_step:
                trim_jsonl(path, resumed_step)
            elif (aside := set_aside(path)) is not None:
                log.info("--metrics-jsonl %s held an earlier run's records: moved to %s", path, aside)
            self.jsonl = path.open("a")
        self.tensorboard = self._tensorboard(config.tensorboard_dir, resumed_step)

    @staticmethod
    def _tensorboard(directory: str | None, resumed_step: int):
        if not directory:
            return None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            log.warning("tensorboard is not installed: no event files (pip install tensorboard)")
            return None
        return SummaryWriter(directory, purge_step=resumed_step + 1 if resumed_step else None)

    def write(self, record: dict) -> None:
        """Emit one record: ``step`` plus training metrics, or ``eval_loss`` for an evaluation."""
        step = record["step"]
        if self.jsonl:
            self.jsonl.write(json.dumps(record) + "\n")
            self.jsonl.flush()
        if self.tensorboard:
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)):
                    self.tensorboard.add_scalar(key if key.startswith("eval") else f"train/{key}", value, step)
            for tag, value in source_scalars(record):
                self.tensorboard.add_scalar(tag, value, step)
            self.tensorboard.flush()
        log.info("\n".join([self._console_line(record), *self._source_lines(record)]))

    def _source_lines(self, record: dict) -> list[str]:
        """One console line per source (none with one source: it would repeat the line above)."""
        sources = record.get("sources") or {}
        if self.config.log_per_source != "on" or len(sources) < 2:
            return []
        width = max(len(name) for name in sources)
        lines = []
        for name, numbers in sources.items():
            loss = "-" if numbers["loss"] is None else f"{numbers['loss']:.4f}"
            head = f"  {name:<{width}} {record.get('split', 'valid') + ' ' if 'eval_loss' in record else ''}loss {loss}"
            line = f"{head} | {numbers['tokens']:,} tokens"
            if "tokens_total" in numbers:
                weight = "" if numbers["weight"] is None else f" (weight {numbers['weight']:.3f})"
                share = "-" if numbers["share"] is None else f"{numbers['share']:.3f}"
                scheduled = numbers.get("scheduled_share")
                share += "" if scheduled is None else f" of {scheduled:.3f} scheduled"
                line += f" | {numbers['tokens_total']:,} in all, share {share}{weight}"
            lines.append(line)
        return lines

    def _console_line(self, record: dict) -> str:
        head = f"step {record['step']}/{self.train_iters}"
        if "eval_loss" in record:
            split = record.get("split", "valid")
            return f"{head} | {split} loss {record['eval_loss']:.4f} | ppl {record['eval_ppl']:.2f}"
        parts = [head, f"loss {record['loss']:.4f}", f"lr {record['lr']:.3e}", f"grad norm {record['grad_norm']:.3f}",
                 f"{record['tokens_per_s']:,.0f} tok/s"]
        if self.config.log_throughput:
            parts += [f"{record['tokens_per_s_per_gpu']:,.0f} tok/s/{self.device}",
                      f"{record['tflops_per_gpu']:.3g} TFLOP/s/{self.device}"]
            if "mfu" in record:
                parts.append(f"MFU {100 * record['mfu']:.1f}%")
        if "peak_memory_gib" in record:
            parts.append(f"peak mem {record['peak_memory_gib']:.1f} GiB")
        return " | ".join(parts)

    def close(self) -> None:
        """Flush and close the files."""
        if self.jsonl:
            self.jsonl.close()
        if self.tensorboard:
            self.tensorboard.close()


def source_scalars(record: dict) -> list[tuple[str, float]]:
    """The TensorBoard (tag, value) pairs of a record's ``sources``: training loss, tokens, cumulative tokens,
    share realised and scheduled, and the weight in force per source, or an evaluation's loss per source."""
    pairs = []
    for name, numbers in (record.get("sources") or {}).items():
        if "eval_loss" in record:
            pairs.append((f"{record.get('split', 'valid')}_loss/{name}", numbers["loss"]))
        else:
            pairs += [(f"{key}/{name}", numbers.get(key)) for key in ("loss", "tokens", "tokens_total", "share",
                                                                       "scheduled_share", "weight")]
    return [(tag, value) for tag, value in pairs if value is not None]


def perplexity(loss: float) -> float:
    """exp(loss), inf when it overflows."""
    return math.exp(loss) if loss < 700 else math.inf
