"""Shared fixtures. megatron-core is the conformance reference: import it once per test process
(it costs seconds and warns about missing GPU extras)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import traceback
import warnings
from pathlib import Path

import pytest

from corpus.core.cache import CACHE_FOLDERS

REPO = Path(__file__).resolve().parents[1]

# Real tokenizer files (tokenizer_files), megatron-core's tokenizers (megatron_tokenizer), and a real S3 server
# on localhost with a fault-injecting proxy (s3, bucket, faults).
pytest_plugins = ["tests.tokenizer_files", "tests.s3_server", "tests.skip_policy"]


@pytest.fixture(scope="session")
def megatron_indexed():
    """megatron.core.datasets.indexed_dataset, imported once."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets import indexed_dataset
    return indexed_dataset


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the selected tests' Triton-interpreter checks in one background process as soon as they are known:
    the tests of this session run one at a time and leave the second core mostly idle
    (``tests/trainer/kernels/triton_support.py``)."""
    support = sys.modules.get("tests.trainer.kernels.triton_support")
    if support is not None and not session.config.option.collectonly:
        support.start_interpreter_checks({item.module.__name__ for item in session.items
                                          if getattr(item, "module", None) is not None})


def pytest_sessionfinish(session: pytest.Session) -> None:
    """End the interpreter checks no test waited for (a session stopped early)."""
    support = sys.modules.get("tests.trainer.kernels.triton_support")
    if support is not None:
        support.stop_interpreter_checks()


def run_cli(program: str, *args: str, cwd: Path | None = None, check: bool = True, env: dict | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``corpus``/``trainer`` exactly as a user would, in a fresh process."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    result = subprocess.run(
        [sys.executable, "-m", f"cli.{program}", *args],
        cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{program} {' '.join(args)} exited {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result


def invoke_cli(program: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``corpus``/``trainer`` in this process with click's ``CliRunner``, through the command group (its
    handler in ``cli/app.py`` turns user errors into one line), for cases that need no interpreter of their own:
    errors in what was typed, help texts. An exception escaping the group is written to stderr with its
    traceback, as the real command's interpreter would write it."""
    from click.testing import CliRunner

    group = importlib.import_module(f"cli.{program}").main
    result = CliRunner().invoke(group, list(args), env=env, prog_name=program)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess([program, *args], result.exit_code, result.stdout, stderr)


def assert_exited(result, *codes: int) -> None:
    """A ``CliRunner`` result ended through the command's own exit, with one of ``codes``. Neither the exit code
    nor the output tells that apart from an exception escaping the command: click's runner gives an escaped
    exception exit code 1 and leaves its traceback out of the output; ``result.exception`` holds it."""
    escaped = result.exception
    if escaped is not None and not isinstance(escaped, SystemExit):
        raise AssertionError("an exception escaped the command:\n" + "".join(traceback.format_exception(escaped)))
    assert result.exit_code in codes, f"exit code {result.exit_code}, not one of {codes}\n{result.output}"


@pytest.fixture(scope="session")
def megatron_rank_generator():
    """megatron.core.parallel_state.RankGenerator (Megatron's rank layout), imported once."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.parallel_state import RankGenerator
    return RankGenerator


@pytest.fixture(scope="module")
def megatron_datasets(tmp_path_factory):
    """megatron-core's dataset builder (``BlendedMegatronDatasetBuilder``, ``GPTDataset``,
    ``GPTDatasetConfig``, ``BlendedDataset``), imported once (Python keeps the modules), with the one-process
    gloo group its ``BlendedDataset`` needs (it asks torch.distributed for the rank even in one process), for
    each test module that uses it: a group left running would be inherited, without the threads serving it, by
    the processes the trainer tests fork."""
    import logging
    import types

    import torch.distributed as dist

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets.blended_dataset import BlendedDataset
        from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
        from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    logging.getLogger("megatron").setLevel(logging.WARNING)
    started = not dist.is_initialized()
    if started:
        store = tmp_path_factory.mktemp("gloo") / "store"
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield types.SimpleNamespace(BlendedMegatronDatasetBuilder=BlendedMegatronDatasetBuilder, GPTDataset=GPTDataset,
                                GPTDatasetConfig=GPTDatasetConfig, BlendedDataset=BlendedDataset)
    if started:
        dist.destroy_process_group()


@pytest.fixture(scope="session", autouse=True)
def index_map_cache(tmp_path_factory):
    """Keep what tests build out of the user's caches (~/.cache/blendforge/…): every process the tests start
    inherits these folders for index maps ($BLENDFORGE_CACHE_DIR, yielded), compiled kernels and tokenizer checks."""
    with pytest.MonkeyPatch.context() as patch:
        for name in ("compiled_kernels", "tokenizer_checks", "index_maps"):
            folder = tmp_path_factory.mktemp(name)
            patch.setenv(CACHE_FOLDERS[name], str(folder))
        yield folder


@pytest.fixture
def small_disk(tmp_path):
    """A real file system of 1 MB (tmpfs) at a fresh folder, unmounted after the test: writes fail with ENOSPC as a
    full disk makes them fail, at whatever layer writes (numpy, torch's zip writer, the kernel). Skipped where this
    process may not mount (only root may)."""
    folder = tmp_path / "small_disk"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small file system here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)
