"""The ``.bin`` tree checksum across block boundaries: blocks shrunk to 64 bytes (and reads to 24), so a small
file spans many of them. Whether the bytes are hashed as they are written, copied and hashed block by block in
threads (merge, the parts of a tokenize run) or read back whole (``inspect --check --deep``), the root is the
documented one: the sha256 of each block's sha256, in order."""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import time
from pathlib import Path

import numpy as np
import pytest

from corpus.indexed import append, partial_files, sidecar
from corpus.indexed.merge import merge
from corpus.inspect.checks import CheckOptions, check_prefix
from tests.corpus.blending.blend_data import write_random

BLOCK = 64


def documented_root(data: bytes) -> str:
    """sha256 over the sha256 of each ``BLOCK``-byte block (the last one partial), as append.py's docstring says."""
    blocks = [hashlib.sha256(data[at : at + BLOCK]).digest() for at in range(0, len(data), BLOCK)]
    return hashlib.sha256(b"".join(blocks)).hexdigest()


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch) -> None:
    monkeypatch.setattr(append, "BLOCK_BYTES", BLOCK)
    monkeypatch.setattr(partial_files, "_READ_STEP", 24)  # not a divisor of a block: a block's last read is short


@pytest.mark.parametrize("size", [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK, 3 * BLOCK + 5])
def test_streamed_and_whole_file_digests_are_the_documented_root(tmp_path: Path, size: int) -> None:
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    path = tmp_path / "file"
    path.write_bytes(data)
    assert append.file_tree_digest(path) == documented_root(data)
    streamed, at = append.BlockDigest(), 0
    for piece in (1, 17, BLOCK, 2 * BLOCK + 3, len(data)):  # pieces ending before, on and after block ends
        streamed.update(data[at : at + piece])
        at += piece
    assert streamed.hexdigest() == documented_root(data)


@pytest.mark.parametrize("written", [0, 5, BLOCK, BLOCK + 63])
def test_files_appended_after_streamed_bytes_give_the_documented_root(tmp_path: Path, written: int) -> None:
    """``written`` bytes hashed as they were written, then files copied in threads from there: the block that
    holds the start is hashed again from the file, and the root covers every byte, whatever the last block holds."""
    rng = np.random.default_rng(written)
    head = rng.integers(0, 256, written, dtype=np.uint8).tobytes()
    parts = [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for size in (1, 63, BLOCK, 2 * BLOCK + 7, 5)]
    tail = (BLOCK + 1 - (written + sum(map(len, parts))) % BLOCK) % BLOCK  # the last block holds one byte
    parts.append(rng.integers(0, 256, tail, dtype=np.uint8).tobytes())
    for number, part in enumerate(parts):
        (tmp_path / f"part{number}").write_bytes(part)
    with open(tmp_path / "target", "wb+") as target:
        target.write(head)
        target.flush()
        digest = append.BlockDigest()
        digest.update(head)
        appender = append.Appender(target.fileno(), written, digest)
        for number, part in enumerate(parts):
            appender.append(tmp_path / f"part{number}", len(part))
        appender.finish()
    data = head + b"".join(parts)
    assert (tmp_path / "target").read_bytes() == data and len(data) % BLOCK == 1
    assert digest.hexdigest() == documented_root(data)


def test_written_and_merged_pairs_record_the_root_of_their_bin(tmp_path: Path) -> None:
    """Shards of odd sizes: each merged one starts mid-block, so the block it lands in is hashed again."""
    shards = [write_random(tmp_path / f"shard{n}", 20 + 7 * n, seed=n, max_len=30) for n in range(4)]
    for prefix in shards:
        data = Path(f"{prefix}.bin").read_bytes()
        assert len(data) > 4 * BLOCK and len(data) % BLOCK
        assert sidecar.read(prefix)["checksums"]["bin_sha256_tree"] == documented_root(data)
    merge([str(prefix) for prefix in shards], str(tmp_path / "merged"))
    merged = Path(tmp_path / "merged.bin").read_bytes()
    assert merged == b"".join(Path(f"{prefix}.bin").read_bytes() for prefix in shards)
    assert sidecar.read(tmp_path / "merged")["checksums"]["bin_sha256_tree"] == documented_root(merged)
    assert check_prefix(str(tmp_path / "merged"), CheckOptions(deep=True)) == []


def test_a_block_is_hashed_only_once_every_copy_under_it_has_ended(tmp_path: Path, monkeypatch, caplog) -> None:
    """Copies that end out of order, beside hashes on many threads (as on a large node): a block hashed before its
    bytes are in would read a hole. A copy's end starts the hashing of what is complete with no error (an error in
    that callback is only logged, by concurrent.futures, and the hashing left to the end)."""
    copy, started = append._copy, []

    def slow_copy(*args) -> None:  # later copies end later
        started.append(args)
        time.sleep(0.03 * len(started))
        copy(*args)

    monkeypatch.setattr(append, "_copy", slow_copy)
    monkeypatch.setattr(append, "available_cores", lambda: 16)
    parts = [os.urandom(size) for size in (1, BLOCK - 1, 3 * BLOCK + 5, 17, 2 * BLOCK, 99)]
    digest = append.BlockDigest()
    with open(tmp_path / "target", "wb+") as target:
        appender = append.Appender(target.fileno(), 0, digest)
        for number, part in enumerate(parts):
            (tmp_path / f"part{number}").write_bytes(b"xyz" + part)
            appender.append(tmp_path / f"part{number}", len(part), offset=3)
        appender.finish()
    data = b"".join(parts)
    assert (tmp_path / "target").read_bytes() == data and digest.hexdigest() == documented_root(data)
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR] == []


def test_a_copy_that_fails_is_raised_when_the_appends_are_waited_for(tmp_path: Path) -> None:
    (tmp_path / "short").write_bytes(b"abc")
    with open(tmp_path / "target", "wb+") as target:
        appender = append.Appender(target.fileno(), 0, append.BlockDigest())
        appender.append(tmp_path / "short", 2 * BLOCK)  # the file ends early
        with pytest.raises(OSError) as raised:
            appender.finish()
    assert (raised.value.errno, raised.value.strerror) == (errno.EIO, f"the source ended {2 * BLOCK - 3} bytes early")


#: At most this many bytes moved by one call of ``copy_file_range`` or ``sendfile`` (the kernel may move fewer than
#: asked): a range then takes several calls, each going on from where the last one stopped.
SHORT_MOVE = 7
#: The real calls, kept here: the tests patch ``os``'s.
COPY_FILE_RANGE, SENDFILE = os.copy_file_range, os.sendfile


def short_copy_file_range(source: int, target: int, count: int, *offsets: int) -> int:
    return COPY_FILE_RANGE(source, target, min(count, SHORT_MOVE), *offsets)


def short_sendfile(target: int, source: int, offset: int, count: int) -> int:
    return SENDFILE(target, source, offset, min(count, SHORT_MOVE))


def appended_in_the_middle_of_files(tmp_path: Path) -> None:
    """Ranges of files that hold other bytes before and after them, appended after 5 bytes written: the target is
    those bytes and the ranges, and its root the documented one."""
    parts = [os.urandom(size) for size in (BLOCK + 9, 3, 2 * BLOCK)]
    head = os.urandom(5)
    with open(tmp_path / "target", "wb+") as target:
        target.write(head)
        target.flush()
        digest = append.BlockDigest()
        digest.update(head)
        appender = append.Appender(target.fileno(), len(head), digest)
        for number, part in enumerate(parts):
            (tmp_path / f"part{number}").write_bytes(b"before" + part + b"after")
            appender.append(tmp_path / f"part{number}", len(part), offset=len(b"before"))
        appender.finish()
    data = head + b"".join(parts)
    assert (tmp_path / "target").read_bytes() == data and digest.hexdigest() == documented_root(data)


def test_copies_the_kernel_makes_in_short_moves_land_in_place(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(os, "copy_file_range", short_copy_file_range)
    appended_in_the_middle_of_files(tmp_path)


@pytest.mark.parametrize("refusal", [errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF])
def test_a_copy_the_kernel_refuses_is_sent_instead(tmp_path: Path, monkeypatch, refusal: int) -> None:
    """``copy_file_range`` refused (across file systems, an old kernel, a file system without it): every byte still
    lands at its place through ``sendfile`` (in short moves too), and the root is the same."""
    def refused(*args) -> int:
        raise OSError(refusal, os.strerror(refusal))

    monkeypatch.setattr(os, "copy_file_range", refused)
    monkeypatch.setattr(os, "sendfile", short_sendfile)
    appended_in_the_middle_of_files(tmp_path)


def test_any_other_copy_error_is_raised(tmp_path: Path, monkeypatch) -> None:
    def failing(*args) -> int:
        raise OSError(errno.EIO, "the disk failed")

    monkeypatch.setattr(os, "copy_file_range", failing)
    (tmp_path / "part").write_bytes(b"abc")
    with open(tmp_path / "target", "wb+") as target:
        appender = append.Appender(target.fileno(), 0, append.BlockDigest())
        appender.append(tmp_path / "part", 3)
        with pytest.raises(OSError, match="the disk failed"):
            appender.finish()


def test_a_range_hashed_past_the_end_of_its_file_is_an_error(tmp_path: Path) -> None:
    """A file shorter than its index says (truncated under the reader) is an error, not the hash of fewer bytes."""
    (tmp_path / "file").write_bytes(bytes(2 * BLOCK))
    with open(tmp_path / "file", "rb") as handle:
        assert append.hash_range(handle.fileno(), 5, 2 * BLOCK) == hashlib.sha256(bytes(2 * BLOCK - 5)).digest()
        with pytest.raises(OSError) as raised:
            append.hash_range(handle.fileno(), BLOCK, 3 * BLOCK)
    assert (raised.value.errno, raised.value.strerror) == (errno.EIO, "the file is shorter than expected")


def test_the_digest_of_a_file_s_first_bytes_leaves_the_rest_out(tmp_path: Path) -> None:
    """What a resumed write hashes again: the bytes it kept, whatever follows them in the file."""
    data = os.urandom(3 * BLOCK + 10)
    (tmp_path / "file").write_bytes(data)
    with open(tmp_path / "file", "rb") as handle:
        for size in (0, BLOCK, 2 * BLOCK + 5):
            assert append.digest_of(handle.fileno(), size).hexdigest() == documented_root(data[:size])
