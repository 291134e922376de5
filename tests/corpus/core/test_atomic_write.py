"""The one atomic-write helper, driven through the failures it exists for: a write that raises midway, a real full
disk, two processes writing the same file at once; and the steps that make it durable."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corpus.core import atomic_write
from corpus.core.atomic_write import atomic_file, atomic_path, write_atomically
from corpus.core.disk import OutputError, guard

REPO = Path(__file__).resolve().parents[3]


def _entries(folder: Path) -> list[str]:
    return sorted(entry.name for entry in folder.iterdir())


@pytest.mark.parametrize("interruption", [RuntimeError("the encoder failed"), KeyboardInterrupt()])
def test_a_write_that_raises_midway_keeps_the_old_file_and_leaves_nothing(tmp_path, interruption):
    target = tmp_path / "state.json"
    target.write_text("old")
    with pytest.raises(type(interruption)):
        with atomic_file(target, "w") as handle:
            handle.write("half of the new")
            raise interruption
    assert target.read_text() == "old"
    assert _entries(tmp_path) == ["state.json"]


def test_a_writer_given_a_path_that_fails_midway_leaves_nothing(tmp_path):
    target = tmp_path / "figure.png"
    with pytest.raises(ValueError):
        with atomic_path(target) as temporary:
            temporary.write_bytes(b"half an image")
            raise ValueError("matplotlib gave up")
    assert _entries(tmp_path) == []


def test_a_complete_write_replaces_the_file(tmp_path):
    target = tmp_path / "state.json"
    target.write_text("old")
    write_atomically(target, "new")
    with atomic_path(tmp_path / "array.bin") as temporary:
        temporary.write_bytes(b"\x01\x02")
    assert target.read_text() == "new" and (tmp_path / "array.bin").read_bytes() == b"\x01\x02"
    assert _entries(tmp_path) == ["array.bin", "state.json"]


def test_a_full_disk_keeps_the_old_file_leaves_nothing_and_names_the_target(small_disk):
    target = small_disk / "run.meta.json"
    target.write_text("old")
    with pytest.raises(OSError) as raised:
        write_atomically(target, b"x" * (2 << 20))  # twice the file system's size
    assert raised.value.errno in (errno.ENOSPC, errno.EDQUOT)
    assert ".partial" not in str(raised.value)  # never the temporary name
    assert target.read_text() == "old"
    assert _entries(small_disk) == ["run.meta.json"]
    with pytest.raises(OutputError, match=rf"cannot write {target}: No space left on device"):
        with guard(target):
            write_atomically(target, b"x" * (2 << 20))
    # the space is free again: the temporary file was removed, not left to fill the disk
    write_atomically(target, b"y" * (512 << 10))
    assert target.stat().st_size == 512 << 10


def test_a_missing_folder_names_the_target(tmp_path):
    target = tmp_path / "no-such-folder" / "stats.json"
    with pytest.raises(FileNotFoundError) as raised:
        write_atomically(target, "{}")
    assert raised.value.filename == str(target)


_WRITER = """
import sys
from corpus.core.atomic_write import write_atomically
target, letter = sys.argv[1], sys.argv[2].encode()
for _ in range(150):
    write_atomically(target, letter * (256 << 10))
"""


def test_two_processes_writing_the_same_file_never_collide_nor_show_half_a_file(tmp_path):
    target = tmp_path / "verdict.json"
    write_atomically(target, b"a" * (256 << 10))
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(target), letter], env=environment,
                                stderr=subprocess.PIPE, text=True) for letter in "ab"]
    seen = set()
    while any(writer.poll() is None for writer in writers):
        content = target.read_bytes()  # whichever version is there: whole, one writer's
        assert len(content) == 256 << 10 and len(set(content)) == 1, "a reader saw a mixed or partial file"
        seen.add(content[:1])
    for writer in writers:
        assert writer.wait() == 0, writer.stderr.read()
    assert _entries(tmp_path) == ["verdict.json"]
    assert seen


_KILLED_MIDWAY = """
import os, signal, sys
from corpus.core.atomic_write import atomic_file
with atomic_file(sys.argv[1]) as handle:
    handle.write(b"half of the new state")
    handle.flush()
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_what_a_killed_writer_left_is_removed_by_the_next_write_and_a_running_writers_file_is_kept(tmp_path):
    target = tmp_path / "out.tokenize-state.json"
    write_atomically(target, "old")
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    for _ in range(3):  # a run killed again and again mid-checkpoint
        killed = subprocess.run([sys.executable, "-c", _KILLED_MIDWAY, str(target)], env=environment)
        assert killed.returncode == -9
    assert len(_entries(tmp_path)) == 4 and target.read_text() == "old"
    running = atomic_write.temporary_name(target)  # this process's: as if another thread were writing it now
    running.write_text("being written")
    write_atomically(target, "new")
    assert _entries(tmp_path) == sorted([running.name, target.name]) and target.read_text() == "new"


def test_the_file_gets_the_umask_mode_like_any_new_file(tmp_path):
    mask = os.umask(0o027)
    try:
        write_atomically(tmp_path / "written", "x")
        (tmp_path / "opened").write_text("x")
    finally:
        os.umask(mask)
    assert (tmp_path / "written").stat().st_mode == (tmp_path / "opened").stat().st_mode


def test_the_data_is_synced_before_the_rename_and_the_rename_after(tmp_path, monkeypatch):
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(atomic_write.os, "fsync",
                        lambda fd: events.append("folder" if os.path.isdir(f"/proc/self/fd/{fd}") else "data")
                        or real_fsync(fd))
    monkeypatch.setattr(atomic_write.os, "replace", lambda a, b: events.append("rename") or real_replace(a, b))
    write_atomically(tmp_path / "a", "x")
    with atomic_path(tmp_path / "b") as temporary:
        temporary.write_text("y")
    assert events == ["data", "rename", "folder"] * 2
    events.clear()
    write_atomically(tmp_path / "c", "z", durable=False)  # a record its reader may find missing after a power loss
    assert events == ["rename"] and (tmp_path / "c").read_text() == "z"
