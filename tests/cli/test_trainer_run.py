"""``trainer run`` as users launch it: Megatron spellings, YAML + flags, clean errors, SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from cli.trainer import main
from tests.conftest import REPO, assert_exited, run_cli
from trainer.checkpoint import store as checkpoint

TINY = ["--mock-data", "--seq-length", "16", "--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
        "--ffn-hidden-size", "64", "--vocab-size", "96", "--micro-batch-size", "2", "--eval-iters", "0"]


@pytest.fixture
def captured(monkeypatch):
    """Parse only: the TrainConfig `trainer run` would train with."""
    import trainer.run.loop

    seen = []

    def fake_train(config):
        seen.append(config)
        return trainer.run.loop.TrainResult(0, None, "completed", None)

    monkeypatch.setattr(trainer.run.loop, "train", fake_train)
    return seen


def test_megatron_spellings_and_greedy_data_path(captured, tmp_path):
    config_file = tmp_path / "run.yaml"
    config_file.write_text("optim: {lr: 0.01, min_lr: 0.001}\nmodel: {preset: 125m}\n")
    result = CliRunner().invoke(main, [
        "run", "--config", str(config_file), "--data-path", "0.7", "web_text_document", "0.3", "code_text_document",
        "--split", "98,2,0", "--seq-length", "128", "--train-iters", "10", "--global-batch-size", "8", "--bf16",
        "--lr", "0.02", "--num-layers", "3", "--lr-decay-style", "cosine", "--no-log-throughput", "--save", "ck"])
    assert result.exit_code == 0, result.output
    (config,) = captured
    assert config.data.data_path == ["0.7", "web_text_document", "0.3", "code_text_document"]
    assert config.data.split == "98,2,0" and config.training.precision == "bf16"
    assert config.optim.lr == 0.02 and config.optim.min_lr == 0.001 and config.optim.lr_decay_style == "cosine"
    assert (config.model.num_layers, config.model.hidden_size) == (3, 768)
    assert config.logging.log_throughput is False and config.checkpoint.save == "ck"


@pytest.mark.parametrize("args, message", [
    (["--mock-data", "--seq-length", "8"], "--train-iters is required"),
    (["--mock-data", "--seq-length", "8", "--train-iters", "2", "--preset", "huge"], "--preset 'huge': unknown"),
    (["--train-iters", "2"], "give exactly one data source"),
    (["--mock-data", "--seq-length", "8", "--train-iters", "2", "--config", "missing.yaml"], "no such file"),
    (["--mock-data", "--seq-length", "8", "--train-iters", "2", "--lr-decay-style", "cosinus"],
     "'cosinus' is not one of 'constant', 'linear', 'cosine'"),
    (["--mock-data", "--seq-length", "8", "--train-iters", "2", "--load", str(REPO / "pyproject.toml")],
     "pyproject.toml is a file, not a checkpoint folder"),
    (["--mock-data", "--seq-length", "8", "--train-iters", "2", "--tokenizer-model", "x.json"],
     "--tokenizer-model needs --tokenizer-type"),
    (["--mock-data", "--seq-length", "8", "--train-iters", "2", "--vocab-file", "v.json", "--merge-file", "m.txt"],
     "--vocab-file and --merge-file need --tokenizer-type"),
])
def test_errors_are_one_line_without_traceback(captured, args, message):
    result = CliRunner().invoke(main, ["run", *args])
    assert_exited(result, 1, 2)  # 2: a usage error click found, 1: one the command found
    assert message in result.output


@pytest.mark.parametrize("first, last, said", [(5, 5, "(step 5, as logged)"), (3, 4, "(mean of steps 3-4, as logged)")])
def test_the_summary_names_the_steps_of_its_loss(monkeypatch, first, last, said):
    import trainer.run.loop

    result = trainer.run.loop.TrainResult(last, trainer.run.loop.WindowLoss(2.5, first, last), "completed", None)
    monkeypatch.setattr(trainer.run.loop, "train", lambda config: result)
    output = CliRunner().invoke(main, ["run", *TINY, "--train-iters", str(last)]).output
    assert f"stopped at step {last} (completed), loss 2.5000 {said}" in output


def test_run_end_to_end_in_a_fresh_process(tmp_path):
    metrics = tmp_path / "m.jsonl"
    result = run_cli("trainer", "run", *TINY, "--train-iters", "4", "--log-interval", "2", "--metrics-jsonl",
                     str(metrics), "--save", str(tmp_path / "ckpt"))
    assert "stopped at step 4 (completed)" in result.stdout
    assert "attention backend: math" in result.stderr and "6N + 12*L*d*S" in result.stderr
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [record["step"] for record in records] == [2, 4]
    assert checkpoint.complete_iterations(tmp_path / "ckpt") == [4]
    # one loss: the summary's is the last log line's (the mean over its interval), and CPU figures are per process
    assert f"loss {records[-1]['loss']:.4f} (mean of steps 3-4, as logged)" in result.stdout
    assert f"loss {records[-1]['loss']:.4f} |" in result.stderr
    assert " tok/s/process | " in result.stderr and "TFLOP/s/process" in result.stderr and "/GPU" not in result.stderr


def test_sigterm_saves_and_exits_cleanly(tmp_path):
    metrics, save = tmp_path / "m.jsonl", tmp_path / "ckpt"
    process = subprocess.Popen(
        [sys.executable, "-m", "cli.trainer", "run", *TINY, "--train-iters", "100000", "--log-interval", "1",
         "--metrics-jsonl", str(metrics), "--save", str(save)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr[-2000:]
    assert "received SIGTERM" in stderr and "(received SIGTERM)" in stdout
    last_step = json.loads(metrics.read_text().splitlines()[-1])["step"]
    assert checkpoint.complete_iterations(save) == [last_step]


def test_a_save_on_a_full_disk_is_one_line_and_leaves_the_last_checkpoint(small_disk):
    """A real 1 MB file system fills up mid-save (torch's zip writer then reports "unexpected pos", not ENOSPC):
    one line naming the folder and the space needed, no partial folder, the last complete checkpoint loadable."""
    save = small_disk / "ckpt"
    result = run_cli("trainer", "run", *TINY, "--train-iters", "10", "--save-interval", "2", "--save", str(save),
                     check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    kept = checkpoint.complete_iterations(save)
    assert kept and kept[-1] < 10
    assert error.startswith(f"Error: cannot write {save}/.iter_{kept[-1] + 2:07d}.partial-"), error
    assert "No space left on device (" in error and " kB needed); free space and resume with --load " \
        f"{save} (iteration {kept[-1]} is intact), or choose another --save" in error
    assert sorted(path.name for path in save.iterdir()) == [
        *(f"iter_{iteration:07d}" for iteration in kept), checkpoint.TRACKER]
    assert checkpoint.find(save) == checkpoint.iteration_dir(save, kept[-1])
