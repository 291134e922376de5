"""``corpus autotune-workers`` on an ``s3://`` input: the sample is read once from the store, byte for byte what the
same file gives locally."""

from __future__ import annotations

from pathlib import Path

from corpus import storage
from corpus.autotune.sample import write_sample
from tests.corpus.tokenize.support import WEB, config


def test_the_sample_of_an_s3_input_is_the_local_sample(tmp_path, bucket):
    storage.upload(WEB, f"{bucket}/web.jsonl")
    local = write_sample(config(tmp_path, [WEB]), 25, tmp_path / "local.jsonl")
    remote = write_sample(config(tmp_path, [f"{bucket}/web.jsonl"]), 25, tmp_path / "remote.jsonl")
    assert Path(remote.path).read_bytes() == Path(local.path).read_bytes() and remote.documents == 25
