"""``corpus tokenize`` from and to a real S3 server: every input format and spelling, shards by object size,
``--on-error`` naming ``s3://…:line``, outputs uploaded ``.idx`` last (never half visible), ``--resume`` after
``kill -9`` and a run through every fault a store gives ending byte-identical to a local run."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

import corpus.indexed.publish
from corpus import storage
from corpus.indexed.errors import PrefixNotFound
from corpus.indexed.prefixes import expand
from corpus.tokenize.errors import BadRecordError
from corpus.tokenize.resume_state import state_path
from corpus.tokenize.run import tokenize
from tests.conftest import REPO, run_cli
from tests.corpus.tokenize.support import CODE, TOKENIZER, WEB, config, output_bytes
from tests.corpus.tokenize.test_resume import kill_after_records
from tests.s3_server import TRANSIENT

SUFFIXES = (".bin", ".idx")


def remote_bytes(prefix: str, keys: list[str]) -> dict[str, bytes]:
    """The ``.bin`` and ``.idx`` bytes of every key's remote output (as :func:`output_bytes` reads local ones)."""
    return {f"{key}{suffix}": storage.read_bytes(f"{prefix}_{key}_document{suffix}")
            for key in keys for suffix in SUFFIXES}


def upload_folder(folder: Path, url: str) -> None:
    for path in sorted(folder.iterdir()):
        storage.upload(path, f"{url}/{path.name}")


@pytest.fixture
def inputs(tmp_path, bucket) -> tuple[Path, str]:
    """The same four files (plain, gzip, zstd JSONL and Parquet) in a local folder and under a key prefix."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(WEB.read_bytes())
    (folder / "b.jsonl.gz").write_bytes(gzip.compress(CODE.read_bytes()))
    first_lines = b"".join(WEB.read_bytes().splitlines(keepends=True)[:30])
    (folder / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(first_lines))
    rows = [json.loads(line) for line in CODE.read_text().splitlines()[:50]]
    pq.write_table(pa.table({"text": [row["text"] for row in rows]}), folder / "d.parquet", row_group_size=16)
    upload_folder(folder, f"{bucket}/in")
    return folder, f"{bucket}/in"


@pytest.mark.parametrize("shard", [0, 1])
def test_sharded_tokenize_from_and_to_s3_equals_the_local_run(tmp_path, inputs, bucket, shard):
    folder, url = inputs
    local = tokenize(config(tmp_path, [folder], shard_index=shard, num_shards=2))
    remote_run = config(tmp_path, [url], shard_index=shard, num_shards=2).replace(output_prefix=f"{bucket}/out/web")
    remote = tokenize(remote_run)
    name = f"-{shard:05d}-of-00002"
    assert remote_bytes(f"{bucket}/out/web{name}", ["text"]) == output_bytes(tmp_path / f"out{name}", ["text"])
    assert remote.counters == local.counters and remote.counters.records_written > 0
    meta = json.loads(storage.read_bytes(f"{bucket}/out/web{name}_text_document.meta.json"))
    assert all(entry["path"].startswith(f"{url}/") for entry in meta["inputs"])
    assert not Path(storage.staging_prefix(f"{bucket}/out/web{name}")).parent.exists()


def test_globs_and_objects_name_inputs_as_locally(tmp_path, inputs):
    folder, url = inputs
    local = tokenize(config(tmp_path, [folder / "*.jsonl*", folder / "d.parquet"], name="local"))
    remote = tokenize(config(tmp_path, [f"{url}/*.jsonl*", f"{url}/d.parquet"], name="remote"))
    assert output_bytes(tmp_path / "remote", ["text"]) == output_bytes(tmp_path / "local", ["text"])
    assert remote.counters == local.counters


def test_remote_inputs_cut_into_parts_equal_the_local_run_of_one_process(tmp_path, inputs):
    """Parts that start inside an object (a JSONL cut, a Parquet row group) read it from there, in several processes."""
    folder, url = inputs
    local = tokenize(config(tmp_path, [folder], name="local", workers=1))
    remote = tokenize(config(tmp_path, [url], name="remote", workers=3, min_part_bytes=40_000))
    assert remote.parts > 3 and remote.processes == 3
    assert output_bytes(tmp_path / "remote", ["text"]) == output_bytes(tmp_path / "local", ["text"])
    assert remote.counters == local.counters


def test_bad_records_are_located_by_url_and_line(tmp_path, bucket):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": 3}\n{"text": "also fine"}\n')
    storage.upload(bad, f"{bucket}/bad.jsonl")
    with pytest.raises(BadRecordError, match=f"{bucket}/bad.jsonl:2: key 'text' is a JSON number"):
        tokenize(config(tmp_path, [f"{bucket}/bad.jsonl"]).replace(output_prefix=f"{bucket}/out/bad"))
    with pytest.raises(PrefixNotFound):
        expand(f"{bucket}/out/bad_text_document")  # --on-error fail leaves no output
    tokenize(config(tmp_path, [f"{bucket}/bad.jsonl"], on_error="skip").replace(output_prefix=f"{bucket}/out/bad"))
    skipped = [json.loads(line) for line in storage.read_bytes(f"{bucket}/out/bad.skipped.jsonl").splitlines()]
    assert skipped == [{"file": f"{bucket}/bad.jsonl", "line": 2, "reason": "key 'text' is a JSON number (3), not a "
                                                                             "string"}]


def test_a_crash_while_uploading_leaves_no_visible_pair_and_resumes(tmp_path, bucket, monkeypatch):
    run = config(tmp_path, [WEB, CODE], json_keys=["text", "title"], on_error="skip").replace(
        output_prefix=f"{bucket}/out/web")
    order, real_upload = [], storage.upload

    def upload(local, url):
        order.append(url.rsplit("_document", 1)[-1])
        if len(order) == 4:  # the second key's .bin
            raise KeyboardInterrupt
        real_upload(local, url)

    with monkeypatch.context() as patch:
        patch.setattr(corpus.indexed.publish.storage, "upload", upload)
        with pytest.raises(KeyboardInterrupt):
            tokenize(run)
    assert order == [".bin", ".meta.json", ".idx", ".bin"]
    assert expand(f"{bucket}/out/web_text_document") and not storage.exists(f"{bucket}/out/web_title_document.idx")
    tokenize(run.replace(resume=True))
    tokenize(config(tmp_path, [WEB, CODE], json_keys=["text", "title"], on_error="skip"))
    assert remote_bytes(f"{bucket}/out/web", ["text", "title"]) == output_bytes(tmp_path / "out", ["text", "title"])


def _command(inputs: list[str], prefix: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "cli.corpus", "tokenize", "--input", *inputs, "--output-prefix", prefix,
            "--json-keys", "text", "title", "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model",
            str(TOKENIZER), "--append-eod", "--on-error", "skip", "--batch-size", "3", "--checkpoint-interval", "0",
            "--quiet", *extra]


def test_kill_9_then_resume_with_an_s3_output_is_byte_identical_to_a_local_run(tmp_path, bucket):
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    tokenize(config(tmp_path, [WEB, CODE], name="local", json_keys=["text", "title"], on_error="skip"))
    for path in (WEB, CODE):
        storage.upload(path, f"{bucket}/in/{path.name}")
    remote_inputs, prefix = [f"{bucket}/in/{path.name}" for path in (WEB, CODE)], f"{bucket}/out/web"
    kill_after_records(_command(remote_inputs, prefix), state_path(storage.staging_prefix(prefix)), 40)
    assert not storage.exists(f"{prefix}_text_document.idx")
    subprocess.run(_command(remote_inputs, prefix, "--resume"), env=environment, check=True, capture_output=True)
    assert remote_bytes(prefix, ["text", "title"]) == output_bytes(tmp_path / "local", ["text", "title"])


@pytest.mark.slow  # a command of its own, through a few dozen faults
def test_tokenize_from_and_to_s3_through_faults_is_byte_identical_to_a_local_run(tmp_path, faults_each_path, bucket):
    faults = faults_each_path
    tokenize(config(tmp_path, [WEB, CODE], name="local", json_keys=["text", "title"], on_error="skip"))
    for path in (WEB, CODE):
        storage.upload(path, f"{bucket}/in/{path.name}")
    prefix = f"{bucket}/out/web"
    faults.fail(TRANSIENT, every=3)
    run_cli("corpus", *_command([f"{bucket}/in/*.jsonl"], prefix, "--workers", "2", "--storage-options",
                                json.dumps(faults.storage_options))[3:])
    assert faults.injected["GET"] >= 1 and faults.injected["PUT"] >= 1 and set(faults.by_fault) == set(TRANSIENT)
    faults.fail(None)
    assert remote_bytes(prefix, ["text", "title"]) == output_bytes(tmp_path / "local", ["text", "title"])
