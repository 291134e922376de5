"""The tree checksum and the threaded appender, across block boundaries (the block made small so that a few KB
cross many)."""

from __future__ import annotations

import hashlib
import os
import time

import pytest

from corpus.indexed import append
from corpus.indexed.append import Appender, BlockDigest, file_tree_digest

BLOCK = 4096


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(append, "BLOCK_BYTES", BLOCK)
    monkeypatch.setattr(append, "_STEP", 1000)  # reads that end inside blocks


def tree_of(data: bytes) -> str:
    """The definition, written out: sha256 over the sha256 of each block in order."""
    blocks = [hashlib.sha256(data[start:start + BLOCK]).digest() for start in range(0, len(data), BLOCK)]
    return hashlib.sha256(b"".join(blocks)).hexdigest()


def test_the_digest_of_bytes_given_in_pieces_is_the_tree_of_the_whole():
    data = os.urandom(5 * BLOCK + 123)
    digest = BlockDigest()
    for start in range(0, len(data), 777):
        digest.update(data[start:start + 777])
    assert digest.hexdigest() == tree_of(data)


def test_appended_files_end_as_one_file_whose_tree_checksum_covers_every_block(tmp_path, monkeypatch):
    copy, started = append._copy, []

    def slow_copy(*args) -> None:  # later copies end later: a block hashed before its bytes are in reads a hole
        started.append(args)
        time.sleep(0.03 * len(started))
        copy(*args)

    monkeypatch.setattr(append, "_copy", slow_copy)
    monkeypatch.setattr(append, "available_cores", lambda: 16)  # hashes run beside copies, as on a large node
    head = os.urandom(BLOCK + 10)  # the target does not start on a block boundary
    pieces = [os.urandom(size) for size in (1, BLOCK - 1, 3 * BLOCK + 5, 17, 2 * BLOCK, 999)]
    target = tmp_path / "target.bin"
    target.write_bytes(head)
    digest = BlockDigest()
    digest.update(head)
    with open(target, "r+b") as handle:
        appender = Appender(handle.fileno(), len(head), digest)
        for index, piece in enumerate(pieces):
            source = tmp_path / f"piece{index}"
            source.write_bytes(b"x" * 3 + piece)
            appender.append(source, len(piece), offset=3)
        appender.finish()
    whole = head + b"".join(pieces)
    assert target.read_bytes() == whole
    assert digest.hexdigest() == tree_of(whole) == file_tree_digest(target)


def test_a_copy_that_fails_is_raised_when_the_appends_are_waited_for(tmp_path):
    target = tmp_path / "target.bin"
    target.write_bytes(b"")
    source = tmp_path / "short"
    source.write_bytes(b"abc")
    with open(target, "r+b") as handle:
        appender = Appender(handle.fileno(), 0, BlockDigest())
        appender.append(source, 2 * BLOCK)  # the file ends early
        with pytest.raises(OSError, match="ended"):
            appender.finish()
