"""The S3 client gives what s3fs gives, on the real S3 server: the same objects for every kind of input spec,
with the same identities (so caches keyed by identity serve either), the same answers for what is not there, and
the same objects written; a multipart upload that fails leaves nothing behind."""

from __future__ import annotations

import pytest

from corpus import storage
from corpus.storage.s3_client import s3_client
from tests.s3_server import S3FS_ONLY

KEYS = ["data/a.jsonl", "data/b.jsonl", "data/x.parquet", "data/deeper/c.jsonl", "data/deeper/more/d.jsonl.zst",
        "other/e.jsonl", "top.jsonl"]
SPECS = ["data", "data/", "data/a.jsonl", "data/*.jsonl", "data/**/*.jsonl", "data/**", "data/deeper/*",
         "*/a.jsonl", "**/*.zst", "data/[ab].jsonl", "data/?.jsonl", "*.jsonl"]


def _outcome(function, *args):
    """What ``function(*args)`` returns, or the type of the StorageError it raises."""
    try:
        return function(*args)
    except storage.StorageError as error:
        return type(error)


def _both(url: str, function, *args) -> tuple:
    """The outcome of ``function(*args)`` through the S3 client of ``url``'s store, then through s3fs."""
    assert s3_client(url) is not None
    direct = _outcome(function, *args)
    storage.configure(S3FS_ONLY)
    try:
        assert s3_client(url) is None
        return direct, _outcome(function, *args)
    finally:
        storage.configure({})


def test_listings_and_identities_match_s3fs(bucket):
    for number, key in enumerate(KEYS):
        storage.write_bytes(f"{bucket}/{key}", b"x" * number)
    for spec in SPECS:
        url = f"{bucket}/{spec}"
        direct, through_s3fs = _both(url, storage.list_objects, url)
        assert direct == through_s3fs and isinstance(direct, list) and direct, spec
        if storage.has_magic(spec):
            direct, through_s3fs = _both(url, storage.glob, url)
            assert sorted(direct) == sorted(through_s3fs) and direct, spec
    for url in (f"{bucket}/data/a.jsonl", f"{bucket}/data", f"{bucket}/data/deeper", bucket):
        direct, through_s3fs = _both(url, storage.info, url)
        assert direct == through_s3fs and isinstance(direct, storage.ObjectInfo), url
    paths = [f"{bucket}/{key}" for key in KEYS]
    direct, through_s3fs = _both(bucket, storage.identities, paths)
    assert direct == through_s3fs and direct[1] == [1, storage.info(paths[1]).version]
    assert _both(bucket, storage.read_bytes, paths[3]) == (b"xxx", b"xxx")


def test_absent_objects_prefixes_and_buckets_read_the_same(bucket):
    storage.write_bytes(f"{bucket}/data/a.jsonl", b"x")
    for url in (f"{bucket}/none", f"{bucket}/none/", f"{bucket}/none/*.jsonl", "s3://no-such-bucket-here/x"):
        for function in (storage.list_objects, storage.info, storage.exists, storage.isdir, storage.read_bytes):
            direct, through_s3fs = _both(url, function, url)
            assert direct == through_s3fs, (url, function.__name__)
    assert _both(bucket, storage.list_objects, f"{bucket}/none")[0] is storage.ObjectNotFound
    with pytest.raises(storage.StorageError, match="bucket 'no-such-bucket-here' does not exist"):
        storage.info("s3://no-such-bucket-here/x")


def test_uploads_downloads_and_deletes_match_s3fs(bucket, tmp_path, monkeypatch):
    monkeypatch.setattr(storage.objects, "UPLOAD_PART_BYTES", 5 << 20)
    data = bytes(range(256)) * (45_000)  # 11.5 MB: three parts
    (tmp_path / "big").write_bytes(data)
    url = f"{bucket}/big"

    def round_trip(name: str):
        storage.upload(tmp_path / "big", f"{url}-{name}")
        storage.download(f"{url}-{name}", tmp_path / f"back-{name}")
        storage.delete(f"{url}-{name}")
        return (tmp_path / f"back-{name}").read_bytes(), storage.exists(f"{url}-{name}")

    assert _both(bucket, round_trip, "direct") == ((data, False), (data, False))
    storage.upload(tmp_path / "big", url)
    assert storage.info(url).version.endswith("-3")  # a multipart ETag: md5 of the parts, "-3"
    with pytest.raises(storage.ObjectNotFound):  # s3fs deletes nothing without a word
        storage.delete(f"{url}-none", missing_ok=False)


def test_a_failed_multipart_upload_is_aborted(faults, bucket, tmp_path, monkeypatch, s3):
    monkeypatch.setattr(storage.objects, "UPLOAD_PART_BYTES", 5 << 20)
    (tmp_path / "big").write_bytes(b"x" * (11 << 20))
    faults.fail("denied", every=1, methods=("PUT",))  # every part refused; the upload's start and abort pass
    with pytest.raises(storage.StorageError, match="access denied"):
        storage.upload(tmp_path / "big", f"{bucket}/big")
    faults.fail(None)
    assert not storage.exists(f"{bucket}/big")
    assert not s3.client().list_multipart_uploads(Bucket=bucket.split("://")[1]).get("Uploads")


def test_a_multipart_upload_whose_answers_are_lost_still_completes(faults, bucket, tmp_path, monkeypatch):
    """The store starts the upload, and later joins its parts, but both answers are lost on the way back: the start
    is made again, and the join's retry, told the upload is gone, finds the object whole (its ETag is the parts')."""
    monkeypatch.setattr(storage.objects, "UPLOAD_PART_BYTES", 5 << 20)
    data = bytes(range(256)) * 45_000  # three parts
    (tmp_path / "big").write_bytes(data)
    faults.fail("lost", every=2, methods=("POST",))  # the 1st and 3rd POSTs: a start, then the first join
    storage.upload(tmp_path / "big", f"{bucket}/big")
    lost, retried = faults.injected["POST"], len(faults.retries)
    faults.fail(None)
    storage.download(f"{bucket}/big", tmp_path / "back")
    assert (tmp_path / "back").read_bytes() == data
    assert lost == 2 and retried == 2  # the whole upload once (its start), the join once


def test_a_join_retried_after_its_answer_was_lost_finds_the_object_whole(bucket, tmp_path, monkeypatch):
    """Stores such as MinIO answer a join repeated after it succeeded with NoSuchUpload (this test server, like
    AWS, answers it again): the object standing with the ETag its parts make is the success the lost answer was."""
    from botocore.exceptions import ClientError, ConnectionClosedError

    monkeypatch.setattr(storage.objects, "UPLOAD_PART_BYTES", 5 << 20)
    monkeypatch.setattr(storage.filesystems, "BACKOFF_S", 0.005)
    data = bytes(range(256)) * 45_000
    (tmp_path / "big").write_bytes(data)
    url = f"{bucket}/big"
    client = s3_client(url)._client
    join, joins = client.complete_multipart_upload, []

    def join_then_forget(**request):
        joins.append(request["UploadId"])
        if len(joins) == 1:
            join(**request)
            raise ConnectionClosedError(endpoint_url=client.meta.endpoint_url)  # joined; the answer lost
        raise ClientError({"Error": {"Code": "NoSuchUpload", "Message": "The specified upload does not exist."},
                           "ResponseMetadata": {"HTTPStatusCode": 404}}, "CompleteMultipartUpload")

    monkeypatch.setattr(client, "complete_multipart_upload", join_then_forget)
    storage.upload(tmp_path / "big", url)
    storage.download(url, tmp_path / "back")
    assert len(joins) == 2 and (tmp_path / "back").read_bytes() == data


def test_an_upload_the_store_forgot_before_its_join_is_an_error_in_words(bucket, tmp_path, monkeypatch):
    """Aborted meanwhile (by a lifecycle rule, another client), the upload cannot be joined and no object stands in
    for it: that is the error, said as such, not "no such object"."""
    monkeypatch.setattr(storage.objects, "UPLOAD_PART_BYTES", 5 << 20)
    (tmp_path / "big").write_bytes(b"x" * (11 << 20))
    url = f"{bucket}/big"
    client = s3_client(url)._client
    join = client.complete_multipart_upload

    def abort_first(**request):
        client.abort_multipart_upload(Bucket=request["Bucket"], Key=request["Key"], UploadId=request["UploadId"])
        return join(**request)

    monkeypatch.setattr(client, "complete_multipart_upload", abort_first)
    with pytest.raises(storage.StorageError, match="no longer knows the multipart upload under way"):
        storage.upload(tmp_path / "big", url)
    assert not storage.exists(url)


def test_a_client_pickles_as_its_options_and_an_array_reads_through_it_after(bucket, tmp_path):
    import pickle

    import numpy as np

    tokens = np.arange(100_000, dtype=np.uint16)
    storage.write_bytes(f"{bucket}/t.bin", tokens.tobytes())
    array = storage.ChunkedArray(storage.info(f"{bucket}/t.bin"), np.uint16, chunk_bytes=64 << 10)
    client = s3_client(bucket)
    assert pickle.loads(pickle.dumps(client)) is client  # the same process: its one client for these options
    storage.configure({"endpoint_url": "http://127.0.0.1:9"})  # options in force now differ; the array's do not
    try:
        assert np.array_equal(np.asarray(pickle.loads(pickle.dumps(array))), tokens)
    finally:
        storage.configure({})
