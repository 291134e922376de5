"""``corpus merge`` through the CLI: its flags come from MergeConfig, so --input takes several prefixes after one
flag (as the other commands' lists do) or repeated, with the same result."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_cli
from tests.corpus.blending.blend_data import write_example


def test_inputs_listed_after_one_flag_or_repeated_merge_alike(tmp_path: Path) -> None:
    first = write_example(tmp_path / "a_text_document", "web", 0, 10)
    second = write_example(tmp_path / "b_text_document", "web", 10, 25)
    listed = run_cli("corpus", "merge", "--input", str(first), str(second), "--output-prefix", str(tmp_path / "l"))
    repeated = run_cli("corpus", "merge", "--input", str(first), "--input", str(second),
                       "--output-prefix", str(tmp_path / "r"))
    assert "merged 2 inputs" in listed.stdout and "merged 2 inputs" in repeated.stdout
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"l{suffix}").read_bytes() == (tmp_path / f"r{suffix}").read_bytes()
