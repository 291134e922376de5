"""A source table's cache key: each way a shard's ``.idx`` or sidecar can be rewritten changes it, so a table
indexed from the old files is never served for the new ones (the maps' own keys follow the lengths' digest)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from corpus.blending.sources import find_shards, table_key
from tests.corpus.blending.blend_data import write_random


def _key(prefix: Path) -> str:
    return table_key(*find_shards(str(prefix)))


def _same_size_and_time(path: Path, rewrite) -> None:
    """Rewrite ``path`` with ``rewrite(path)`` and give it back its old modification time."""
    before = path.stat()
    rewrite(path)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def _new_inode(path: Path) -> None:
    """The same bytes under a new inode, as a copy renamed into place leaves them."""
    copy = path.with_name(path.name + ".copy")
    shutil.copy2(path, copy)
    os.replace(copy, path)


def test_every_rewrite_of_an_idx_or_its_sidecar_changes_the_table_key(tmp_path: Path) -> None:
    prefix = write_random(tmp_path / "web", 50, seed=1)
    idx, meta = prefix.with_suffix(".idx"), prefix.with_name("web.meta.json")
    shutil.copytree(tmp_path, tmp_path.parent / "moved")
    keys = {_key(prefix): "the files as written", _key(tmp_path.parent / "moved" / "web"): "another path"}

    def changes(what: str, rewrite) -> None:
        rewrite()
        key = _key(prefix)
        assert key not in keys, f"{what} kept the key of {keys.get(key)}"
        keys[key] = what

    later = idx.stat().st_mtime_ns + 10**9
    changes(".idx touched", lambda: os.utime(idx, ns=(later, later)))
    changes(".idx grown, same time", lambda: _same_size_and_time(idx, lambda p: p.write_bytes(p.read_bytes() + b"\0")))
    changes(".idx copied over itself", lambda: _same_size_and_time(idx, _new_inode))
    changes("sidecar touched", lambda: os.utime(meta, ns=(later, later)))
    changes("sidecar grown, same time", lambda: _same_size_and_time(meta, lambda p: p.write_text(p.read_text() + " ")))
    changes("sidecar copied over itself", lambda: _same_size_and_time(meta, _new_inode))
    changes("sidecar removed", meta.unlink)
    assert _key(prefix) == _key(prefix)
