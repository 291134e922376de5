"""Files mapped side by side: one array equal to their concatenation, read-only, undone when the array goes."""

from __future__ import annotations

import gc
import mmap
import sys
from pathlib import Path

import numpy as np
import pytest

from corpus.storage.side_by_side import map_side_by_side

pytestmark = pytest.mark.skipif(sys.platform not in ("linux", "darwin"), reason="POSIX mmap with MAP_FIXED")

PIECE = 4 * mmap.PAGESIZE


def _pieces(tmp_path: Path, sizes: list[int]) -> tuple[list[Path], bytes]:
    data = np.random.default_rng(7).integers(0, 256, sum(sizes), dtype=np.uint8).tobytes()
    paths, at = [], 0
    for index, size in enumerate(sizes):
        paths.append(tmp_path / f"{index:08d}.chunk")
        paths[-1].write_bytes(data[at : at + size])
        at += size
    return paths, data


@pytest.mark.parametrize("sizes", [[PIECE], [PIECE, PIECE, 123], [PIECE, 1], [PIECE] * 5])
def test_the_array_is_the_files_one_after_the_other(tmp_path, sizes):
    paths, data = _pieces(tmp_path, sizes)
    whole = map_side_by_side(paths, PIECE, len(data))
    assert whole is not None and whole.dtype == np.uint8 and whole.tobytes() == data
    assert np.array_equal(whole[PIECE - 5 : PIECE + 5], np.frombuffer(data[PIECE - 5 : PIECE + 5], np.uint8))
    assert not whole.flags.writeable


def test_a_file_deleted_while_mapped_stays_readable(tmp_path):
    paths, data = _pieces(tmp_path, [PIECE, PIECE])
    whole = map_side_by_side(paths, PIECE, len(data))
    for path in paths:
        path.unlink()
    assert whole.tobytes() == data


def test_what_cannot_be_placed_is_refused(tmp_path):
    paths, data = _pieces(tmp_path, [PIECE, 100])
    assert map_side_by_side(paths, PIECE, len(data) + 1) is None  # the last file is shorter than its place
    assert map_side_by_side(paths[:1], PIECE, len(data)) is None  # a file too few
    assert map_side_by_side(paths, PIECE + 1, len(data)) is None  # pieces not whole pages
    assert map_side_by_side([paths[0], tmp_path / "gone"], PIECE, len(data)) is None
    assert map_side_by_side([], PIECE, 0) is None


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc/self/maps")
def test_the_mapping_goes_with_the_last_view(tmp_path):
    paths, data = _pieces(tmp_path, [PIECE, PIECE, 10])

    def mapped() -> int:
        return Path("/proc/self/maps").read_text().count(str(tmp_path))

    whole = map_side_by_side(paths, PIECE, len(data))
    view = whole[10:20].view(np.uint16)
    del whole
    gc.collect()
    assert mapped() == 3 and view.tobytes() == data[10:20]
    del view
    gc.collect()
    assert mapped() == 0
