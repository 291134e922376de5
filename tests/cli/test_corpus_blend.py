"""`corpus blend` end to end, as a user runs it: the shipped blend over the shipped sample text,
tokenized with the shipped tokenizer as the quickstart does."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from corpus.blending.datasets import build_split_datasets, megatron_sample_counts, show_samples_command
from corpus.blending.schema import load_blend
from corpus.indexed import index_arrays, read_header
from corpus.inspect.checks import check_prefix
from tests.conftest import REPO, invoke_cli, run_cli
from tests.corpus.blending.blend_data import EXAMPLES, example_texts, tokenize_web, write_example


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """The quickstart's layout, with the shipped blends/web_code.yaml unchanged: the shipped sample
    tokenized with the shipped tokenizer into blends/data (web, and code as two shards)."""
    root = tmp_path_factory.mktemp("project")
    data = root / "blends" / "data"
    write_example(data / "web_text_document", "web")
    write_example(data / "code" / "code-00000-of-00002_text_document", "code", 0, 28)
    write_example(data / "code" / "code-00001-of-00002_text_document", "code", 28)
    shutil.copy(REPO / "blends" / "web_code.yaml", root / "blends" / "web_code.yaml")
    (root / "examples").mkdir()
    shutil.copy(EXAMPLES / "tokenizer.json", root / "examples" / "tokenizer.json")
    return root


def _blend(project: Path) -> str:
    return str(project / "blends" / "web_code.yaml")


def test_dry_run_plans_every_split(project: Path, index_map_cache: Path) -> None:
    maps_before = set(index_map_cache.glob("gpt-*"))
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
    assert set(index_map_cache.glob("gpt-*")) == maps_before  # a dry run writes no maps


def test_counts_without_evaluation_flags_are_what_the_trainer_asks_with_its_defaults(project: Path) -> None:
    """corpus blend predicts the trainer's valid and test counts from the same evaluation defaults (one place holds
    them): left out on both sides, the counts agree."""
    from trainer.config.loading import load_config
    from trainer.run.data import sample_counts

    config = load_config(None, {"data": {"blend": _blend(project)}, "training": {"train_iters": 1000}})
    expected = sample_counts(config, 2)
    report = json.loads(run_cli("corpus", "blend", _blend(project), "--train-iters", "1000", "--global-batch-size",
                                "2", "--json").stdout)
    assert {plan["split"]: plan["size"] for plan in report} == {"train": expected.train, "valid": expected.valid}


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
        assert len(sample["tokens"]) == load_blend(_blend(project)).seq_length + 1
        assert sample["source"] == trainer_view.source_name(sample["index"])


def test_samples_decode_to_the_real_text(project: Path) -> None:
    from corpus.tokenizers import TokenizerConfig, build_tokenizer

    tokenizer = build_tokenizer(TokenizerConfig(type="HuggingFaceTokenizer", model=str(EXAMPLES / "tokenizer.json")))
    printed = run_cli("corpus", "blend", _blend(project), "--num-samples", "400", "--show-samples", "0:40", "--json")
    texts = {"web": "\n".join(example_texts("web")), "code": "\n".join(example_texts("code"))}
    checked = 0
    for line in printed.stdout.splitlines():
        sample = json.loads(line)
        ids = sample["tokens"]
        eods = [i for i, token in enumerate(ids) if token == tokenizer.eod]
        inner = ids[: eods[0]] if eods else ids  # the part before any document boundary
        text = tokenizer.decode(inner[2:])[2:-2]  # trim pieces of characters cut by the sample's edges
        if len(text) > 20:
            assert text in texts[sample["source"]], sample["index"]
            checked += 1
    assert checked >= 20


def test_human_output_and_errors_without_traceback(project: Path) -> None:
    shown = run_cli("corpus", "blend", _blend(project), "--num-samples", "50", "--show-samples", "0:2").stdout
    assert len(shown.splitlines()) == 2 and f"{load_blend(_blend(project)).seq_length + 1} tokens:" in shown
    bad = project / "blends" / "bad.yaml"
    bad.write_text((project / "blends" / "web_code.yaml").read_text().replace("weight: 0.3", "weight: -1"))
    result = invoke_cli("corpus", "blend", str(bad))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "bad.yaml:" in result.stderr and "sources[1].weight" in result.stderr
    assert "give a weight > 0" in result.stderr
    wrong = project / "blends" / "wrong_tokenizer.yaml"
    other = project / "examples" / "other.json"
    other.write_text((EXAMPLES / "tokenizer.json").read_text().replace("<|endoftext|>", "<|end|>"))
    wrong.write_text((project / "blends" / "web_code.yaml").read_text().replace("tokenizer.json", "other.json"))
    result = invoke_cli("corpus", "blend", str(wrong))
    assert result.returncode == 1 and "tokenizer.path" in result.stderr and "not the tokenizer" in result.stderr
    out_of_range = invoke_cli("corpus", "blend", _blend(project), "--num-samples", "10", "--show-samples", "5:50")
    assert out_of_range.returncode == 1 and "pick a range inside 0:" in out_of_range.stderr
    usage = invoke_cli("corpus", "blend", _blend(project), "--build")
    assert usage.returncode == 2 and "--build needs --num-samples" in usage.stderr
    usage = invoke_cli("corpus", "blend", _blend(project), "--build", "--show-samples", "0:1")
    assert usage.returncode == 2 and "choose one of" in usage.stderr


def test_the_blend_command_never_imports_torch(project: Path) -> None:
    """A warm sample lookup must not pay torch's import (seconds): the data side never makes a job wait."""
    script = ("import sys\nfrom cli.corpus import main\n"
              f"main(['blend', {_blend(project)!r}, '--num-samples', '64', '--show-samples', '0:1', '--json'], "
              "standalone_mode=False)\nassert 'torch' not in sys.modules, 'torch was imported'\n")
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_a_blend_without_split_says_it_takes_megatrons_default(project: Path) -> None:
    shipped = (project / "blends" / "web_code.yaml").read_text()
    assert 'split: "98,2,0"\n' in shipped
    unsplit = project / "blends" / "unsplit.yaml"
    unsplit.write_text(shipped.replace('split: "98,2,0"\n', ""))
    report = run_cli("corpus", "blend", str(unsplit)).stdout
    assert report.splitlines()[0] == "split 969,30,1 (Megatron's default: the blend sets no 'split')"
    assert "Megatron's default" not in run_cli("corpus", "blend", _blend(project)).stdout


def test_show_samples_decode_with_the_sources_tokenizer_like_inspect_show(project: Path) -> None:
    from corpus.tokenizers import TokenizerConfig, build_tokenizer

    tokenizer = build_tokenizer(TokenizerConfig(type="HuggingFaceTokenizer", model=str(EXAMPLES / "tokenizer.json")))
    command = ["corpus", "blend", _blend(project), "--num-samples", "50", "--show-samples", "0:3"]
    printed = [json.loads(line) for line in run_cli(*command, "--json").stdout.splitlines()]
    assert [p["text"] for p in printed] == [tokenizer.decode(p["tokens"]) for p in printed]
    human = run_cli(*command).stdout.splitlines()
    assert len(human) == 3 and human[0].endswith(json.dumps(printed[0]["text"], ensure_ascii=False))
    raw = run_cli(*command, "--ids").stdout.splitlines()
    assert raw[0].endswith(" ".join(map(str, printed[0]["tokens"][-4:]))) and "text" not in raw[0]


@pytest.mark.parametrize("program", [("corpus", "blend"), ("trainer", "run", "--train-iters", "1", "--blend")])
@pytest.mark.parametrize("spoil, said", [
    (lambda text: "seed: 99\n" + text, "seed: key 'seed' is given twice (lines 1 and "),
    (lambda text: text.replace("{name: web,", "{name: web, name: web2,"),
     "sources[0].name: key 'name' is given twice (line "),
    (lambda text: "# café\n".encode("latin-1") + text.encode(),
     "bad.yaml:1: not UTF-8: byte 0xe9 at offset 5 cannot be decoded; save the file as UTF-8"),
    (lambda text: text.encode("utf-16"), "not UTF-8: byte 0xff at offset 0 (a UTF-16 byte-order mark)"),
], ids=["duplicate-key", "duplicate-key-in-flow-mapping", "latin-1-comment", "utf-16"])
def test_a_blend_file_that_is_not_what_it_seems_is_one_clean_line(project: Path, program: tuple[str, ...], spoil,
                                                                    said: str) -> None:
    """A key given twice (YAML keeps the last silently) or a file that is not UTF-8 stops both commands that read
    blends before any work, naming the lines or the byte."""
    bad = project / "blends" / "bad.yaml"
    spoilt = spoil((project / "blends" / "web_code.yaml").read_text())
    bad.write_bytes(spoilt if isinstance(spoilt, bytes) else spoilt.encode())
    result = invoke_cli(program[0], *program[1:], str(bad))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert said in result.stderr and str(bad) in result.stderr


def test_a_sequence_length_no_source_can_fill_is_refused_before_any_work(project: Path, index_map_cache: Path
                                                                         ) -> None:
    maps_before = set(index_map_cache.glob("gpt-*"))
    for command in (["corpus", "blend", _blend(project), "--num-samples", "8"],
                    ["corpus", "blend", _blend(project), "--num-samples", "8", "--build"]):
        result = invoke_cli(*command, "--seq-length", "100000000000")
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert "seq_length: 100,000,000,000 tokens per sample (100,000,000,001 with the label token) is more than " \
               "any train source holds (the largest, web, has " in result.stderr
        assert "lower seq_length (or --seq-length)" in result.stderr
    assert set(index_map_cache.glob("gpt-*")) == maps_before


def test_maps_the_cache_disk_cannot_hold_are_refused_with_the_estimate(project: Path, small_disk: Path) -> None:
    blend = project / "blends" / "small_cache.yaml"
    blend.write_text((project / "blends" / "web_code.yaml").read_text() + f"cache_dir: {small_disk}\n")
    for extra in ([], ["--build"], ["--show-samples", "0:1"]):
        result = invoke_cli("corpus", "blend", str(blend), "--num-samples", "200000", *extra)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert "cache_dir: the index maps of this request need about 4.5 MB in the cache " in result.stderr
        assert f"{small_disk} but its disk has " in result.stderr and "point the blend's cache_dir at a larger disk" \
            in result.stderr
    assert not any(path.name.startswith(("gpt-", "blend-")) for path in small_disk.iterdir())
    assert invoke_cli("corpus", "blend", str(blend), "--num-samples", "2000", "--build").returncode == 0


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory) -> Path:
    return tokenize_web(tmp_path_factory.mktemp("tokenized"))


def _idx_arrays(prefix: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    raw = np.memmap(f"{prefix}.idx", dtype=np.uint8, mode="r+")
    return index_arrays(raw, read_header(f"{prefix}.idx"))


def _recompute_pointers(prefix: Path) -> None:
    lengths, pointers, _ = _idx_arrays(prefix)
    pointers[:] = np.concatenate(([0], np.cumsum(lengths[:-1].astype(np.int64) * 2)))


def _shift_a_token(prefix: Path) -> None:
    lengths, _, _ = _idx_arrays(prefix)
    lengths[3] -= 1
    lengths[4] += 1
    _recompute_pointers(prefix)


def _edit_sidecar(key: str, value) -> callable:
    def edit(prefix: Path) -> None:
        path = Path(f"{prefix}.meta.json")
        meta = json.loads(path.read_text())
        meta[key] = value(meta)
        path.write_text(json.dumps(meta))
    return edit


def _set_token(prefix: Path) -> None:
    tokens = np.memmap(f"{prefix}.bin", dtype=np.uint16, mode="r+")
    tokens[10] = json.loads(Path(f"{prefix}.meta.json").read_text())["vocab_size"]
    tokens.flush()


def _set_index(array: int, position: int, value: int) -> callable:
    def edit(prefix: Path) -> None:
        _idx_arrays(prefix)[array][position] = value
    return edit


def _swap_pointers(prefix: Path) -> None:
    pointers = _idx_arrays(prefix)[1]
    pointers[[1, 2]] = pointers[[2, 1]]


def _dtype_byte(prefix: Path) -> None:
    with open(f"{prefix}.idx", "r+b") as handle:
        handle.seek(17)
        handle.write(bytes([4]))


#: The damage the fault probe found read in silence, each planted in a pair `corpus tokenize` wrote.
DAMAGE = {
    "pointers-swapped": _swap_pointers,
    "pointer-set-to-0": _set_index(1, 3, 0),
    "document-index-2**62": _set_index(2, 5, 2**62),
    "document-index--1": _set_index(2, 5, -1),
    "dtype-byte": _dtype_byte,
    "lengths-shifted-pointers-recomputed": _shift_a_token,
    "token-id-past-the-vocabulary": _set_token,
    "sidecar-dtype": _edit_sidecar("dtype", lambda meta: "int32"),
    "sidecar-vocabulary": _edit_sidecar("vocab_size", lambda meta: meta["vocab_size"] + 7),
    "sidecar-eod": _edit_sidecar("eod_id", lambda meta: meta["eod_id"] + 1),
    "sidecar-append-eod-off": _edit_sidecar("append_eod", lambda meta: False),
}


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_pair_inspect_rejects_is_never_read_by_a_blend_or_the_trainer(tokenized: Path, tmp_path: Path,
                                                                       damage: str) -> None:
    """The pair reads fine first (its source table is cached); damaged in place, every command that reads it refuses
    it with `corpus inspect --check`'s first finding, before a sample is made."""
    data = tmp_path / "data"
    data.mkdir()
    for suffix in (".bin", ".idx", ".meta.json"):
        shutil.copy(f"{tokenized}{suffix}", data / f"web{suffix}")
    prefix = data / "web"
    blend = tmp_path / "blend.yaml"
    blend.write_text("seq_length: 32\nsplit: \"90,10,0\"\nsources:\n  - {name: web, prefix: data/web}\n")
    assert invoke_cli("corpus", "blend", str(blend), "--num-samples", "20", "--build").returncode == 0
    DAMAGE[damage](prefix)
    finding = str(check_prefix(str(prefix))[0])
    for command in (["corpus", "blend", str(blend), "--num-samples", "20"],
                    ["corpus", "blend", str(blend), "--num-samples", "20", "--build"],
                    ["corpus", "blend", str(blend), "--num-samples", "20", "--show-samples", "0:2"],
                    ["trainer", "run", "--blend", str(blend), "--train-iters", "1", "--eval-iters", "0",
                     "--num-layers", "1", "--hidden-size", "32", "--num-attention-heads", "4", "--micro-batch-size",
                     "1"]):
        result = invoke_cli(*command)
        assert result.returncode == 1 and "Traceback" not in result.stderr, (command, result.stderr)
        assert f"sources[0].prefix: {finding}" in result.stderr, (finding, result.stderr)
        assert f"this pair is damaged and is not read; list every problem with corpus inspect --check {prefix}" \
            in result.stderr


def test_the_shipped_anneal_schedule_per_phase_and_across_its_boundaries(project: Path) -> None:
    """blends/web_code_anneal.yaml over the quickstart's data: the dry run shows each phase's draws per source,
    and --show-samples crosses from one phase into the next exactly as the trainer's dataset does."""
    anneal = project / "blends" / "web_code_anneal.yaml"
    shutil.copy(REPO / "blends" / "web_code_anneal.yaml", anneal)
    table = run_cli("corpus", "blend", str(anneal), "--num-samples", "1000").stdout
    assert "scheduled blend: 1,000 samples asked" in table
    phase_lines = [line.split() for line in table.splitlines() if line[:1].isdigit()]
    assert [words[:2] for words in phase_lines] == [["1", "0-799"], ["2", "800-899"], ["3", "900-999"]]
    assert phase_lines[1][2:5] == ["ramp", "web", "0.700->0.400"]
    report = json.loads(run_cli("corpus", "blend", str(anneal), "--num-samples", "1000", "--json").stdout)[0]
    for phase, weights in zip(report["phases"], ({"web": 0.7, "code": 0.3}, None, {"web": 0.4, "code": 0.6})):
        assert sum(row["samples"] for row in phase["rows"]) == phase["stop"] - phase["first"]
        for row in phase["rows"] if weights else ():
            assert abs(row["samples"] - weights[row["name"]] * (phase["stop"] - phase["first"])) <= 1
            assert row["tokens"] == row["samples"] * 256
    assert report["phases"][2]["rows"][1]["epochs"] > report["phases"][0]["rows"][1]["epochs"] > 0
    shown = [json.loads(line) for line in run_cli("corpus", "blend", str(anneal), "--num-samples", "1000",
                                                  "--show-samples", "797:803", "--json").stdout.splitlines()]
    assert [sample["phase"] for sample in shown] == [1, 1, 1, 2, 2, 2]
    trainer_view = build_split_datasets(load_blend(anneal), megatron_sample_counts(125, 8, 1000, 0)).train
    for sample in shown:
        assert sample["tokens"] == trainer_view.tokens_of(sample["index"]).tolist()
        assert sample["source"] == trainer_view.source_name(sample["index"])
    human = run_cli("corpus", "blend", str(anneal), "--num-samples", "1000", "--show-samples", "800:801").stdout
    assert "     800 phase 2 " in human


def test_the_shipped_online_blend_dry_run_and_first_samples(project: Path) -> None:
    """blends/web_code_online.yaml over the quickstart's data: the dry run says the mix moves during the run and
    sizes each source for the most its weight can reach; --show-samples prints what the trainer reads until its
    first update (the sources' weights, Megatron's choice of source)."""
    online = project / "blends" / "web_code_online.yaml"
    shutil.copy(REPO / "blends" / "web_code_online.yaml", online)
    table = run_cli("corpus", "blend", str(online), "--num-samples", "1000").stdout
    assert "online blend: 1,000 samples asked" in table and "hold until the first online-mixing update" in table
    report = json.loads(run_cli("corpus", "blend", str(online), "--num-samples", "1000", "--json").stdout)[0]
    assert [row["weight"] for row in report["rows"]] == [0.7, 0.3]
    assert all(row["built"] >= 950 for row in report["rows"])  # 1 - floor 0.05 of the run, each
    shown = [json.loads(line) for line in run_cli("corpus", "blend", str(online), "--num-samples", "1000",
                                                  "--show-samples", "0:10", "--json").stdout.splitlines()]
    trainer_view = build_split_datasets(load_blend(online), megatron_sample_counts(125, 8, 1000, 0)).train
    assert [sample["source"] for sample in shown] == [trainer_view.source_name(i) for i in range(10)]
    assert sum(sample["source"] == "web" for sample in shown) == 7
    assert shown[3]["tokens"] == trainer_view.tokens_of(3).tolist()
