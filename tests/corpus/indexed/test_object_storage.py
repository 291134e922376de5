"""Pairs on a real S3 server: merge from and to ``s3://`` (a multipart upload for a large ``.bin``) equals the local
merge, inspect reads remote pairs as local ones (``--check`` included), both commands through every fault a store gives
give what they give locally, a missing remote pair is one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from corpus import storage
from corpus.indexed import IndexedReader, IndexedWriter
from corpus.indexed.merge import merge
from tests.conftest import run_cli
from tests.corpus.indexed.test_merge import assert_same_pair, make_shards
from tests.s3_server import TRANSIENT


def upload_pairs(folder: Path, url: str) -> None:
    for path in sorted(folder.iterdir()):
        storage.upload(path, f"{url}/{path.name}")


def test_merge_from_and_to_s3_equals_the_local_merge(tmp_path, bucket):
    shards = tmp_path / "shards"
    shards.mkdir()
    make_shards(shards, 5)
    upload_pairs(shards, f"{bucket}/shards")
    local = merge([str(shards / "part-*_text_document")], str(tmp_path / "local"))
    remote = merge([f"{bucket}/shards/part-*_text_document"], f"{bucket}/merged/all")
    assert (remote.num_documents, remote.num_tokens) == (local.num_documents, local.num_tokens)
    assert remote.inputs == [f"{bucket}/shards/part-{i:03d}_text_document" for i in range(5)]
    for suffix in (".bin", ".idx"):
        assert storage.read_bytes(f"{bucket}/merged/all{suffix}") == (tmp_path / f"local{suffix}").read_bytes()
    assert json.loads(storage.read_bytes(f"{bucket}/merged/all.meta.json"))["merged_from"] == remote.inputs


def test_a_large_bin_goes_up_in_parts_and_reads_back_exactly(tmp_path, bucket, monkeypatch):
    monkeypatch.setattr(storage.objects, "UPLOAD_PART_BYTES", 5 << 20)
    tokens = np.random.default_rng(3).integers(0, 60_000, 6_000_000, dtype=np.uint16)  # 12 MB: three parts
    with IndexedWriter(tmp_path / "big", np.uint16) as writer:
        writer.add_documents(tokens, np.full(600, 10_000))
        writer.finalize({})
    merge([str(tmp_path / "big")], f"{bucket}/big")
    assert storage.info(f"{bucket}/big.bin").version.endswith("-3")  # a multipart ETag: md5 of the parts, "-3"
    with IndexedReader(f"{bucket}/big") as reader:
        assert reader.num_sequences == 600 and np.array_equal(reader.get(599), tokens[-10_000:])
        assert np.array_equal(reader.get(250, 17, 5000), tokens[2_500_017:2_505_017])
    merge([f"{bucket}/big"], str(tmp_path / "back"))
    assert_same_pair(tmp_path / "big", tmp_path / "back")


def test_inspect_reads_a_remote_pair_as_a_local_one(tmp_path, bucket):
    make_shards(tmp_path, 1)
    upload_pairs(tmp_path, f"{bucket}/data")
    local = json.loads(run_cli("corpus", "inspect", str(tmp_path / "part-000_text_document"), "--check",
                               "--json").stdout)
    remote = json.loads(run_cli("corpus", "inspect", f"{bucket}/data/part-000_text_document", "--check",
                                "--json").stdout)
    assert remote["problems"] == [] == local["problems"]
    for report in (local, remote):
        for key in ("prefix", "idx_file", "bin_file"):
            report.pop(key)
    assert remote == local


def test_a_missing_remote_pair_is_one_line(bucket):
    result = run_cli("corpus", "inspect", f"{bucket}/nothing_text_document", check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [f"Error: {bucket}/nothing_text_document.idx: no such file (give a "
                                                  "prefix, an .idx/.bin path, a glob or a directory)"]


def _without_paths(report: dict) -> dict:
    """An inspect report without what names where the pair and its inputs are."""
    meta = {key: value for key, value in report["meta"].items() if key != "merged_from"}
    return {**{key: value for key, value in report.items() if key not in ("prefix", "idx_file", "bin_file")},
            "meta": meta}


@pytest.mark.slow  # two commands of their own, through faults
def test_merge_and_inspect_through_faults_give_the_local_results(tmp_path, faults_each_path, bucket):
    faults = faults_each_path
    shards = tmp_path / "shards"
    shards.mkdir()
    make_shards(shards, 5)
    upload_pairs(shards, f"{bucket}/shards")
    merge([str(shards / "part-*_text_document")], str(tmp_path / "local"))
    options = ("--storage-options", json.dumps(faults.storage_options))
    faults.fail(TRANSIENT, every=2)
    run_cli("corpus", "merge", "--input", f"{bucket}/shards/part-*_text_document", "--output-prefix",
            f"{bucket}/merged/all", *options)
    assert faults.injected["GET"] >= 1 and faults.injected["PUT"] >= 1 and set(faults.by_fault) == set(TRANSIENT)
    faults.fail(TRANSIENT, every=2)
    remote = json.loads(run_cli("corpus", "inspect", f"{bucket}/merged/all", "--check", "--json", *options).stdout)
    assert faults.injected["GET"] >= 1
    faults.fail(None)
    for suffix in (".bin", ".idx"):
        assert storage.read_bytes(f"{bucket}/merged/all{suffix}") == (tmp_path / f"local{suffix}").read_bytes()
    plain = json.loads(run_cli("corpus", "inspect", str(tmp_path / "local"), "--check", "--json").stdout)
    assert remote["problems"] == [] and _without_paths(remote) == _without_paths(plain)


def test_a_merge_called_from_python_uses_the_storage_options_it_is_given(tmp_path, bucket, s3):
    shards = tmp_path / "shards"
    shards.mkdir()
    make_shards(shards, 2)
    upload_pairs(shards, f"{bucket}/shards")
    storage.configure({"endpoint_url": "http://127.0.0.1:9"})  # what an earlier call left in force: nothing there
    merge([f"{bucket}/shards/part-*_text_document"], str(tmp_path / "merged"),
          storage_options={"endpoint_url": s3.endpoint})
    merge([str(shards / "part-*_text_document")], str(tmp_path / "local"))
    assert_same_pair(tmp_path / "merged", tmp_path / "local")
