"""Checkpoints: Megatron's folder layout, the tracker, retention, and atomicity under kill -9."""

from __future__ import annotations

import multiprocessing
import os
import signal

import pytest
import torch

from corpus.core.disk import OutputError
from tests.trainer.conftest import fork_or_spawn, read_metrics, single_thread, tiny_config, tiny_overrides
from trainer.checkpoint import store as checkpoint
from trainer.config.loading import load_config
from trainer.errors import CheckpointError
from trainer.run.loop import train


def save_dummy(root, iteration, retain=None, value=1.0):
    return checkpoint.save(root, iteration, {"w": torch.full((3,), value)}, {"note": "x"}, retain)


def test_layout_tracker_and_round_trip(tmp_path):
    directory = save_dummy(tmp_path, 100, value=7.0)
    assert directory == tmp_path / "iter_0000100"
    assert (tmp_path / checkpoint.TRACKER).read_text() == "100\n"
    assert checkpoint.find(tmp_path) == directory and checkpoint.find(directory) == directory
    assert checkpoint.read_info(directory) == {"iteration": 100, "note": "x"}
    state = {"w": torch.zeros(3)}
    checkpoint.load(directory, state)
    assert torch.equal(state["w"], torch.full((3,), 7.0))
    assert not [p for p in tmp_path.iterdir() if "partial" in p.name]


def test_retention_keeps_the_newest(tmp_path):
    for iteration in (1, 2, 3, 4):
        save_dummy(tmp_path, iteration, retain=2)
    assert checkpoint.complete_iterations(tmp_path) == [3, 4]


def test_tracker_wins_and_falls_back_to_newest_complete(tmp_path, caplog):
    save_dummy(tmp_path, 1)
    save_dummy(tmp_path, 2)
    (tmp_path / checkpoint.TRACKER).write_text("1\n")  # a user rolling back, as Megatron users do
    assert checkpoint.find(tmp_path) == tmp_path / "iter_0000001"
    (tmp_path / checkpoint.TRACKER).write_text("9\n")
    assert checkpoint.find(tmp_path) == tmp_path / "iter_0000002"
    assert "missing or incomplete" in caplog.text


def test_nothing_to_load_and_incomplete_folders(tmp_path):
    assert checkpoint.find(tmp_path / "absent") is None
    assert checkpoint.find(tmp_path) is None
    broken = tmp_path / "iter_0000005"
    broken.mkdir()
    with pytest.raises(CheckpointError, match="incomplete checkpoint"):
        checkpoint.find(broken)
    assert checkpoint.find(tmp_path) is None  # an incomplete folder is never picked


def test_resaving_an_iteration_replaces_it(tmp_path):
    save_dummy(tmp_path, 3, value=1.0)
    save_dummy(tmp_path, 3, value=2.0)
    state = {"w": torch.zeros(3)}
    checkpoint.load(checkpoint.find(tmp_path), state)
    assert torch.equal(state["w"], torch.full((3,), 2.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iter_0000003", checkpoint.TRACKER]


def test_wrong_model_shape_is_refused(tmp_path):
    save = str(tmp_path / "ckpt")
    train(tiny_config(tmp_path, training={"train_iters": 2}, checkpoint={"save": save}))
    other = tiny_config(tmp_path, model={"hidden_size": 64}, checkpoint={"load": save})
    with pytest.raises(CheckpointError, match="same shape flags"):
        train(other)


def _train_until_killed(target: str, nth: int, overrides: dict) -> None:
    """Train ``overrides``, sending this process SIGKILL at the ``nth`` call of ``target`` (see KILL_POINTS)."""
    from torch.distributed.checkpoint.filesystem import FileSystemWriter

    torch.set_num_threads(1)
    owner, name = {"dcp_write": (FileSystemWriter, "write_data"), "json": (checkpoint, "write_atomically"),
                   "prune": (checkpoint.shutil, "rmtree")}[target]
    original, calls = getattr(owner, name), []

    def wrapped(*args, **kwargs):
        calls.append(1)
        result = original(*args, **kwargs) if target == "dcp_write" else None  # data on disk, no .metadata yet
        if len(calls) == nth:
            os.kill(os.getpid(), signal.SIGKILL)
        return result if target == "dcp_write" else original(*args, **kwargs)

    setattr(owner, name, wrapped)
    train(load_config(None, overrides))


def killed_during_save(target: str, nth: int, overrides: dict) -> int | None:
    """The exit code of a process that trains until :func:`_train_until_killed` kills it: a process of its own for
    kill -9, forked from this one where :func:`~tests.trainer.conftest.fork_or_spawn` allows."""
    context = multiprocessing.get_context(fork_or_spawn())
    child = context.Process(target=_train_until_killed, args=(target, nth, overrides))
    child.start()
    child.join(timeout=300)
    if child.is_alive():
        child.kill()
        child.join()
    return child.exitcode


# (what is patched, which call is killed): the second save (step 4) dies while writing its data, before
# its run.json, after its rename but before the tracker update, and while pruning the older checkpoint.
KILL_POINTS = [("dcp_write", 2), ("json", 3), ("json", 4), ("prune", 1)]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[int, float]:
    """The loss of each step of the 6-step run every kill point's resume must give, trained once."""
    reference = tmp_path_factory.mktemp("reference")
    with single_thread():  # as the resumes in the tests run
        train(tiny_config(reference, training={"train_iters": 6}))
    return {r["step"]: r["loss"] for r in read_metrics(reference / "metrics.jsonl") if "loss" in r}


@pytest.mark.parametrize("target, nth", KILL_POINTS)
def test_kill_during_save_leaves_a_loadable_checkpoint_and_resume_matches(tmp_path, uninterrupted, target, nth):
    save = str(tmp_path / "ckpt")
    overrides = tiny_overrides(tmp_path, training={"train_iters": 6},
                               checkpoint={"save": save, "save_interval": 2,
                                           "save_retain": 1 if target == "prune" else None})
    assert killed_during_save(target, nth, overrides) == -signal.SIGKILL  # its stderr is in the captured output
    found = checkpoint.find(save)
    expected = 4 if target == "prune" else 2  # the tracker is updated last; until then it names step 2
    assert found is not None and checkpoint.read_info(found)["iteration"] == expected
    train(load_config_with_load(tmp_path, save))
    resumed = {r["step"]: r["loss"] for r in read_metrics(tmp_path / "metrics.jsonl") if "loss" in r}
    assert resumed == uninterrupted


def load_config_with_load(tmp_path, save):
    return tiny_config(tmp_path, training={"train_iters": 6}, checkpoint={"save": save, "load": save,
                                                                          "save_interval": 2})


def test_a_save_the_disk_refuses_is_one_line_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    with pytest.raises(OutputError, match=f"{blocker} is a file, not a folder; choose another --save"):
        save_dummy(blocker / "ckpt", 1)
    save_dummy(tmp_path, 1)
    real_open = open

    def full_disk(file, mode="r", *args, **kwargs):  # DCP's shard files and run.json both go through open
        if "w" in mode:
            raise OSError(28, os.strerror(28))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr("pathlib.Path.open", lambda self, mode="r", *a, **k: full_disk(self, mode, *a, **k))
    with pytest.raises(OutputError) as raised:
        save_dummy(tmp_path, 2)
    message = str(raised.value)
    assert "No space left on device" in message and f"resume with --load {tmp_path} (iteration 1 is intact)" in message
    monkeypatch.undo()
    assert checkpoint.complete_iterations(tmp_path) == [1] and checkpoint.find(tmp_path) == tmp_path / "iter_0000001"
    assert not [p for p in tmp_path.iterdir() if "partial" in p.name]


def test_load_and_save_must_be_folders(tmp_path):
    from corpus.core.errors import ConfigError
    from trainer.config.loading import load_config

    a_file = tmp_path / "model.pt"
    a_file.write_text("")
    with pytest.raises(CheckpointError, match="is a file, not a checkpoint folder"):
        checkpoint.find(a_file)
    for section in ({"load": str(a_file)}, {"save": str(a_file)}):
        with pytest.raises(ConfigError, match="is a file, not a checkpoint folder"):
            load_config(None, tiny_overrides(tmp_path, checkpoint=section))
