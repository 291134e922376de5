"""The data-only install (``pip install blendforge``, no torch): every ``corpus`` command on the shipped sample, and
the numpy datasets, run without importing torch (Python's own import log says what was imported, child processes
included); the trainer and the torch loader, without torch, say which extra to install in one line.
(``.ci/data_only`` runs the same commands in a real virtual environment without torch.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

EXAMPLES = REPO / "examples"
TOKENIZE = ["--json-keys", "text", "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model",
            str(EXAMPLES / "tokenizer.json"), "--append-eod", "--quiet"]


def _imported(program: list[str], cwd: Path) -> set[str]:
    """Run ``python program…`` with Python's import log on (children inherit it); the modules it imported."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONPROFILEIMPORTTIME": "1"}
    result = subprocess.run([sys.executable, *program], cwd=cwd, env=environment, capture_output=True, text=True,
                            timeout=600)
    lines = [line for line in result.stderr.splitlines() if line.startswith("import time:")]
    errors = "\n".join(line for line in result.stderr.splitlines() if not line.startswith("import time:"))
    assert result.returncode == 0, f"{program} exited {result.returncode}\n{result.stdout}\n{errors}"
    assert lines, "no import log: PYTHONPROFILEIMPORTTIME had no effect"
    return {line.rsplit("|", 1)[1].strip() for line in lines}


def _torch_among(modules: set[str]) -> list[str]:
    return sorted(name for name in modules if name == "torch" or name.startswith("torch."))


def test_every_corpus_command_on_the_sample_runs_without_importing_torch(tmp_path):
    """The quickstart's data steps, plus merge, inspect, autotune and the numpy datasets."""
    project = tmp_path / "project"
    (project / "blends").mkdir(parents=True)
    (project / "examples").mkdir()
    shutil.copy(REPO / "blends" / "web_code.yaml", project / "blends")
    shutil.copy(EXAMPLES / "tokenizer.json", project / "examples")
    corpus = ["-m", "cli.corpus"]
    counts = ["--train-iters", "30", "--global-batch-size", "8", "--eval-interval", "10", "--eval-iters", "2"]
    steps = {
        "tokenize": [*corpus, "tokenize", "--input", str(EXAMPLES / "web.jsonl"), "--output-prefix",
                     "blends/data/web", *TOKENIZE],
        **{f"tokenize shard {shard}": [*corpus, "tokenize", "--input", str(EXAMPLES / "code.jsonl"),
                                       "--output-prefix", "blends/data/code/code", "--shard-index", str(shard),
                                       "--num-shards", "2", *TOKENIZE] for shard in (0, 1)},
        "merge": [*corpus, "merge", "--input", "blends/data/code/*_text_document", "--output-prefix", "merged/code"],
        "inspect": [*corpus, "inspect", "blends/data/web_text_document", "--check"],
        "blend": [*corpus, "blend", "blends/web_code.yaml", *counts],
        "show samples": [*corpus, "blend", "blends/web_code.yaml", *counts, "--show-samples", "0:2"],
        "numpy datasets": ["-c", "from corpus.blending.datasets import build_split_datasets, megatron_sample_counts\n"
                                 "from corpus.blending.schema import load_blend\n"
                                 "built = build_split_datasets(load_blend('blends/web_code.yaml'), "
                                 "megatron_sample_counts(30, 8, 10, 2))\n"
                                 "assert built.train[0]['tokens'].shape == (256,)"],
        "autotune": [*corpus, "autotune-workers", "--input", str(EXAMPLES / "web.jsonl"), *TOKENIZE[:-1],
                     "--max-documents", "40", "--batch-sizes-to-check", "4", "--threads-per-worker-to-check", "1",
                     "--workers-to-check", "1", "--repeats", "1", "--temp-dir", str(tmp_path)],
    }
    found = {name: _torch_among(_imported(program, project)) for name, program in steps.items()}
    assert found == {name: [] for name in steps}
    assert (project / "merged" / "code.idx").is_file()


def _without_torch(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter where torch cannot be imported, as in a data-only install."""
    return subprocess.run([sys.executable, "-c", "import sys\nsys.modules['torch'] = None\n" + code],
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("command", ["run --blend blends/web_code.yaml --preset tiny", "export --hf out --load ."])
def test_the_trainer_without_torch_names_the_extra_in_one_line(command):
    result = _without_torch(f"from cli.trainer import main\nmain({command.split()!r}, prog_name='trainer')")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    name = command.split()[0]
    assert result.stderr.strip() == (f"Error: trainer {name} needs torch, which is not installed: "
                                     "pip install 'blendforge[train]'")


def test_the_torch_loader_without_torch_names_the_extra_and_the_numpy_path():
    result = _without_torch("import corpus.blending.loader")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "ModuleNotFoundError: corpus.blending.loader gives torch tensors and needs torch, which is not installed: "
        "pip install 'blendforge[train]'; corpus.blending.datasets.build_split_datasets gives the same samples as "
        "numpy arrays without it")
