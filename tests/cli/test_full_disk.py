"""Every corpus command that writes, on a real file system that fills up (a 1 MB tmpfs, ``small_disk``): one line
naming the file and the fix, never a traceback, nothing half-written under a final name, nothing there before lost.
(``trainer run --save`` and ``corpus blend``'s index maps have theirs next to their other tests.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

EXAMPLES = REPO / "examples"
TOKENIZER = ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(EXAMPLES / "tokenizer.json")]


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> Path:
    """examples/code.jsonl tokenized on an ordinary disk (about 0.6 MB)."""
    prefix = tmp_path_factory.mktemp("pair") / "code"
    run_cli("corpus", "tokenize", "--input", str(EXAMPLES / "code.jsonl"), "--output-prefix", str(prefix), *TOKENIZER,
            "--quiet")
    return Path(f"{prefix}_text_document")


def _fill(disk: Path, leave: int = 0) -> None:
    """Fill ``disk`` up to ``leave`` bytes free."""
    free = shutil.disk_usage(disk).free - leave
    with open(disk / "filler", "wb") as handle:
        handle.write(b"\0" * max(free, 0))


def _one_line_full(result) -> str:
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("Error: cannot write ") and "No space left on device" in error, error
    return error


def test_tokenize_on_a_full_disk(small_disk: Path) -> None:
    _fill(small_disk, 64 << 10)
    result = run_cli("corpus", "tokenize", "--input", str(EXAMPLES / "code.jsonl"), "--output-prefix",
                     str(small_disk / "code"), *TOKENIZER, "--quiet", check=False)
    assert "rerun the same command with --resume" in _one_line_full(result)
    kept = {path.name for path in small_disk.iterdir()}
    assert any(name.endswith(".partial") for name in kept), kept  # the work so far, for --resume
    assert not kept & {f"code_text_document{suffix}" for suffix in (".bin", ".idx", ".meta.json")}, kept


def test_merge_on_a_full_disk(small_disk: Path, pair: Path) -> None:
    _fill(small_disk, 64 << 10)
    result = run_cli("corpus", "merge", "--input", str(pair), "--output-prefix", str(small_disk / "merged"),
                     check=False)
    assert "needed); free space and run the merge again, or choose another --output-prefix" in _one_line_full(result)
    assert sorted(path.name for path in small_disk.iterdir()) == ["filler"]


def test_add_checksums_on_a_full_disk_keeps_the_sidecar(small_disk: Path, pair: Path) -> None:
    for suffix in (".bin", ".idx", ".meta.json"):
        shutil.copy(f"{pair}{suffix}", small_disk / f"code{suffix}")
    sidecar = small_disk / "code.meta.json"
    meta = json.loads(sidecar.read_text())
    del meta["checksums"]
    sidecar.write_text(json.dumps(meta, indent=2))
    before = sidecar.read_bytes()
    _fill(small_disk)
    result = run_cli("corpus", "add-checksums", str(small_disk / "code"), check=False)
    assert f"cannot write {sidecar}: No space left on device" in _one_line_full(result)  # not its temporary name
    assert sidecar.read_bytes() == before
    assert sorted(path.name for path in small_disk.iterdir()) == ["code.bin", "code.idx", "code.meta.json", "filler"]
