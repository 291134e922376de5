"""Tiny, fast training configurations shared by the trainer tests."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tests.conftest import REPO, run_cli
from trainer.config.loading import load_config, merge
from trainer.config.schema import TrainConfig
from trainer.run.loop import train

SHORT_TEXT = "The cat sat on the mat."

TINY_MODEL = {"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "num_query_groups": 2,
              "ffn_hidden_size": 64, "vocab_size": 96}


def tiny_overrides(tmp_path: Path, **sections: dict) -> dict:
    """Flag-style overrides of a ~30k-parameter mock-data run with per-step metrics in tmp_path."""
    base = {
        "data": {"mock_data": True, "seq_length": 16},
        "model": TINY_MODEL,
        "training": {"train_iters": 8, "micro_batch_size": 2, "global_batch_size": 4},
        "optim": {"lr": 3e-3, "lr_warmup_iters": 2},
        "logging": {"log_interval": 1, "eval_interval": 4, "eval_iters": 1,
                    "metrics_jsonl": str(tmp_path / "metrics.jsonl")},
    }
    return merge(base, sections)


def tiny_config(tmp_path: Path, **sections: dict) -> TrainConfig:
    """:func:`tiny_overrides` as a TrainConfig."""
    return load_config(None, tiny_overrides(tmp_path, **sections))


def read_metrics(path: Path) -> list[dict]:
    """The records of a --metrics-jsonl file."""
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def fork_or_spawn() -> str:
    """How to start a process that runs the trainer: ``fork`` (torch and the trainer are imported already, ~6 s
    of CPU a fresh interpreter spends again), or ``spawn`` while this process runs a torch.distributed process
    group, which a forked child would inherit without the threads that serve it."""
    return "spawn" if dist.is_initialized() else "fork"


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """torch on one intra-op thread inside the block: tiny models run fastest so, and results that tests compare
    bit for bit are computed with the same reduction order."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, and 2 cores are shared by every test process."""
    with single_thread():
        yield


@pytest.fixture(scope="session")
def one_process_layout_run(tmp_path_factory) -> Path:
    """The one-process run the parallel layouts are compared with (``layout_overrides`` of
    ``tests/trainer/parallelize/support.py``: 20 steps of the 4-layer model), trained once per session on one
    thread; the folder holding its ``metrics.jsonl``."""
    from tests.trainer.parallelize.support import layout_overrides  # NOTE: support imports this module

    folder = tmp_path_factory.mktemp("one_process")
    with single_thread():
        train(load_config(None, layout_overrides(folder)))
    return folder


@pytest.fixture(scope="session")
def sample_blend(tmp_path_factory) -> Path:
    """The shipped blend (blends/web_code.yaml) over the shipped sample, tokenized as the README's
    quickstart does it (web as one file, code as two shards), in a copy of the repo layout."""
    root = tmp_path_factory.mktemp("sample")
    (root / "examples").mkdir()
    shutil.copy(REPO / "examples" / "tokenizer.json", root / "examples")
    (root / "blends").mkdir()
    shutil.copy(REPO / "blends" / "web_code.yaml", root / "blends")
    common = ["--json-keys", "text", "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model",
              str(REPO / "examples" / "tokenizer.json"), "--append-eod", "--quiet"]
    run_cli("corpus", "tokenize", "--input", str(REPO / "examples" / "web.jsonl"), "--output-prefix",
            str(root / "blends" / "data" / "web"), *common)
    for shard in ("0", "1"):
        run_cli("corpus", "tokenize", "--input", str(REPO / "examples" / "code.jsonl"), "--output-prefix",
                str(root / "blends" / "data" / "code" / "code"), "--shard-index", shard, "--num-shards", "2", *common)
    return root / "blends" / "web_code.yaml"


def blend_overrides(tmp_path: Path, blend: Path, **sections: dict) -> dict:
    """:func:`tiny_overrides` reading ``blend`` (seq 64 for speed; index maps cached in tmp_path)."""
    base = tiny_overrides(tmp_path)
    base["data"] = {"blend": str(blend), "seq_length": 64, "data_cache_path": str(tmp_path / "maps")}
    base["model"] = {key: value for key, value in TINY_MODEL.items() if key != "vocab_size"}  # the tokenizer's
    return merge(base, sections)


@pytest.fixture(scope="session")
def two_sources(tmp_path_factory) -> Path:
    """A blend of one short text repeated (``repeated``) and the shipped web prose (``varied``), half and half,
    tokenized with the shipped tokenizer through ``corpus tokenize``."""
    root = tmp_path_factory.mktemp("two_sources")
    (root / "repeated.jsonl").write_text("".join(json.dumps({"text": SHORT_TEXT}) + "\n" for _ in range(400)))
    tokenizer = REPO / "examples" / "tokenizer.json"
    for name, text in (("repeated", root / "repeated.jsonl"), ("varied", REPO / "examples" / "web.jsonl")):
        run_cli("corpus", "tokenize", "--input", str(text), "--output-prefix", str(root / name), "--json-keys", "text",
                "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(tokenizer), "--append-eod",
                "--quiet")
    blend = root / "two.yaml"
    blend.write_text(f"seq_length: 64\nsplit: '90,10,0'\ntokenizer: {{kind: huggingface, path: {tokenizer}}}\n"
                     "sources:\n  - {name: repeated, prefix: repeated_text_document, weight: 0.5}\n"
                     "  - {name: varied, prefix: varied_text_document, weight: 0.5}\n")
    return blend
