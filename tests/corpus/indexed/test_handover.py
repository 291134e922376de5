"""The crc32 of a part's files as a writer hands them over: read in steps of 24 bytes here, so a small file takes
many, and a writer resumed at a checkpoint continues the checksum of what it kept."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest

from corpus.indexed import IndexedWriter, handover, partial_files


@pytest.fixture(autouse=True)
def small_steps(monkeypatch) -> None:
    monkeypatch.setattr(partial_files, "_READ_STEP", 24)


@pytest.mark.parametrize("size", [0, 1, 23, 24, 25, 100])
def test_a_file_and_its_bytes_streamed_have_the_crc32_of_its_bytes(tmp_path: Path, size: int) -> None:
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    path = tmp_path / "file"
    path.write_bytes(data)
    assert handover.file_crc32(path) == f"{zlib.crc32(data):08x}"
    streamed = handover.Crc32()
    for at in range(0, size, 7):
        streamed.update(data[at : at + 7])
    assert streamed.hexdigest() == f"{zlib.crc32(data):08x}"


def _documents(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 9, 12)
    return rng.integers(0, 60000, int(lengths.sum())).astype(np.uint16), lengths


def test_a_handed_over_writer_records_the_crc32_of_each_file_even_across_a_resume(tmp_path: Path) -> None:
    whole = IndexedWriter(tmp_path / "whole", np.uint16, handed_over=True)
    for seed in range(3):
        whole.add_documents(*_documents(seed))
    expected = whole.written()
    for name in ("bin", "lengths", "docs"):
        data = Path(f"{tmp_path / 'whole'}.{name}.partial").read_bytes()
        assert expected["crc32"][name] == f"{zlib.crc32(data):08x}"

    stopped = IndexedWriter(tmp_path / "stopped", np.uint16, handed_over=True)
    stopped.add_documents(*_documents(0))
    resume = stopped.checkpoint()
    stopped.add_documents(*_documents(7))  # written after the checkpoint: dropped when resumed
    stopped.close()
    resumed = IndexedWriter(tmp_path / "stopped", np.uint16, resume=resume, handed_over=True)
    for seed in (1, 2):
        resumed.add_documents(*_documents(seed))
    assert resumed.written() == expected


def test_a_handed_over_writer_is_never_finalized_with_a_crc32_for_its_sha256(tmp_path: Path) -> None:
    writer = IndexedWriter(tmp_path / "part", np.uint16, handed_over=True)
    writer.add_documents(*_documents(0))
    with pytest.raises(RuntimeError, match="no tree checksum to record"):
        writer.finalize({})
