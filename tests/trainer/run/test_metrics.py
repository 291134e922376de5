"""The FLOP convention against a hand count and torch's FLOP counter; MFU; the metrics sinks."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from trainer.config.schema import LoggingConfig, ModelConfig
from trainer.model.attention import BACKENDS
from trainer.model.gpt import build_model, parameter_counts
from trainer.parallel.state import ParallelState
from trainer.run.metrics import MetricsSink, flops_per_token, peak_tflops, throughput, trim_jsonl


def test_flops_of_the_design_baseline_by_hand():
    """DESIGN §7's 1.37B model: 24 layers, d=2048, 16 heads, FFN 5632, vocab 32768, seq 4096."""
    layers, d, ffn, vocab, seq = 24, 2048, 5632, 32768, 4096
    per_layer = 4 * d * d + 3 * d * ffn  # q, k, v, o projections + gate, up, down
    n = layers * per_layer + vocab * d  # + the output layer; the input embedding is a lookup
    assert n == 1_300_234_240
    model = ModelConfig(preset="1.3b")
    # 6 × 1,300,234,240 = 7,801,405,440 for the weights; 12 × 24 × 2048 × 4096 = 2,415,919,104 for attention
    assert flops_per_token(model, n, seq) == 10_217_324_544


def test_flop_formula_equals_torch_flop_counter():
    config = ModelConfig(num_layers=2, hidden_size=32, num_attention_heads=4, num_query_groups=2, ffn_hidden_size=48)
    model = build_model(config, 128, 24, ParallelState(torch.device("cpu")), BACKENDS["math"], 0)
    tokens = torch.randint(0, 128, (2, 24))
    with FlopCounterMode(display=False) as counter:
        model(tokens, torch.arange(24).expand(2, -1)).sum().backward()
    assert counter.get_total_flops() / tokens.numel() == flops_per_token(config, parameter_counts(model)["matmul"], 24)


def test_mfu_and_unknown_devices():
    record = throughput(tokens=40_000, seconds=1.0, flops_token=10e9, num_devices=2, peak=1000.0)
    assert record["tokens_per_s"] == 40_000 and record["tokens_per_s_per_gpu"] == 20_000
    assert record["tflops_per_gpu"] == pytest.approx(200.0) and record["mfu"] == pytest.approx(0.2)
    assert "mfu" not in throughput(1, 1.0, 1.0, 1, None)
    peak, note = peak_tflops(torch.device("cpu"), None)
    assert peak is None and "MFU omitted" in note
    assert peak_tflops(torch.device("cpu"), 123.0) == (123.0, "--peak-tflops")


def test_jsonl_is_trimmed_to_the_resumed_step_then_appended(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in (1, 2, 3, 4)) + '{"step": 5, "lo')
    trim_jsonl(path, 2)
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2]
    sink = MetricsSink(LoggingConfig(metrics_jsonl=str(path), tensorboard_dir=str(tmp_path / "tb")), 2, 10)
    sink.write({"step": 3, "loss": 0.5, "lr": 0.1, "grad_norm": 1.0, **throughput(100, 1.0, 1.0, 1, None)})
    sink.write({"step": 3, "split": "valid", "eval_loss": 0.7, "eval_ppl": 2.0})
    sink.close()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 3] and records[-1]["eval_loss"] == 0.7
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


def test_a_fresh_run_moves_an_earlier_runs_jsonl_aside(tmp_path):
    path = tmp_path / "m.jsonl"
    earlier = [json.dumps({"step": s, "loss": 1.0}) + "\n" for s in (1, 2)]
    for run in range(1, 3):  # two earlier runs: .1 then .2, neither overwritten
        path.write_text("".join(earlier) + json.dumps({"run": run}) + "\n")
        sink = MetricsSink(LoggingConfig(metrics_jsonl=str(path)), 0, 10)
        sink.write({"step": 1, "loss": 0.5, "lr": 0.1, "grad_norm": 1.0, **throughput(100, 1.0, 1.0, 1, None)})
        sink.close()
        assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1]
        assert json.loads((tmp_path / f"m.jsonl.{run}").read_text().splitlines()[-1]) == {"run": run}
    path.write_text("")
    MetricsSink(LoggingConfig(metrics_jsonl=str(path)), 0, 10).close()  # an empty file is simply reused
    assert not (tmp_path / "m.jsonl.3").exists()
