"""--compile blocks: compiled blocks train like eager ones, keep their state-dict keys, the first step says it
compiles, and the choice rule;
--compile-cache: a fresh process on an empty Inductor cache gets every graph from the file; the cache keys
carry a digest of our Triton ops' sources."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import torch

from corpus.core.errors import ConfigError
from tests.conftest import run_cli
from tests.trainer.conftest import read_metrics, tiny_config
from trainer.parallelize.compile import cache_file, kernel_fingerprint, kernel_sources, should_compile, tag_caches
from trainer.run.loop import train


def test_the_choice_rule():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert not should_compile("auto", cpu, None) and should_compile("auto", cuda, None)
    assert not should_compile("auto", cuda, "a reason") and not should_compile("off", cuda, None)
    assert should_compile("blocks", cpu, None)
    with pytest.raises(ConfigError, match="--compile blocks: the te FP8 backend cannot be traced"):
        should_compile("blocks", cuda, "the te FP8 backend cannot be traced")


def test_compiled_blocks_train_like_eager_and_checkpoints_load_into_eager_runs(tmp_path, caplog):
    save = str(tmp_path / "ckpt")
    compiled = tiny_config(tmp_path / "compiled", model={"compile": "blocks"}, checkpoint={"save": save},
                           training={"train_iters": 4})
    with caplog.at_level(logging.INFO):
        train(compiled)
    said = [record.getMessage() for record in caplog.records]
    # the first step says it compiles before it runs, and what it did once it has: a long silence is not a hang
    started = said.index("step 1: compiling the transformer blocks (torch.compile; minutes on a GPU when Inductor's "
                         "cache is cold; --compile-cache FILE keeps the result for the next run)")
    ended = [i for i, line in enumerate(said) if re.fullmatch(r"step 1: compiled and ran in [0-9.]+ s \(\d+ graphs "
                                                               r"compiled, \d+ from a cache\); later steps run the "
                                                               r"compiled blocks", line)]
    assert ended and started < ended[0] and not any(line.startswith("step 2: compil") for line in said)
    train(tiny_config(tmp_path / "eager", training={"train_iters": 4}))
    losses = [[r["loss"] for r in read_metrics(path / "metrics.jsonl") if "loss" in r]
              for path in (tmp_path / "compiled", tmp_path / "eager")]
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-4, atol=0)
    resumed = train(tiny_config(tmp_path / "resumed", model={"compile": "off"}, training={"train_iters": 6},
                                checkpoint={"load": save}))
    assert resumed.iteration == 6


@pytest.mark.slow  # three fresh processes, the first two compiling the blocks on an empty Inductor cache
def test_a_compile_cache_file_serves_a_fresh_process_every_graph(tmp_path):
    cache = tmp_path / "blocks.compiled"
    flags = ["run", "--mock-data", "--vocab-size", "256", "--seq-length", "64", "--preset", "tiny",
             "--train-iters", "2", "--micro-batch-size", "2", "--eval-iters", "0", "--compile", "blocks",
             "--compile-cache", str(cache)]
    logs = []
    for run in ("first", "second"):  # each with an empty Inductor cache of its own
        result = run_cli("trainer", *flags, env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"inductor_{run}")})
        logs.append(result.stdout + result.stderr)
        assert cache.stat().st_size > 0 and not list(tmp_path.glob("*.partial"))
    counts = r"graphs so far: (\d+) from a cache, (\d+) compiled"
    graphs = [[tuple(map(int, found)) for found in re.findall(counts, log)]
              for log in logs]  # (from the cache, compiled) after the first step, then at the end
    assert "not there yet" in logs[0] and graphs[0][-1][0] == 0 and graphs[0][-1][1] > 0
    # a block's forward and backward and the final norm's: every block runs one graph (the first one's zero
    # branch needs a gradient as the others' does, or Dynamo compiles the whole block a second time)
    assert graphs[0][-1] == (0, 4)
    assert "loaded" in logs[1] and graphs[1][-1] == (graphs[0][-1][1], 0)
    first_step = r"step 1: compiled and ran in [0-9.]+ s \((\d+) graphs compiled, (\d+) from a cache\)"
    assert [tuple(map(int, found)) for found in re.findall(first_step, logs[0])] == [(4, 0)]
    assert [tuple(map(int, found)) for found in re.findall(first_step, logs[1])] == [(0, 4)]
    assert f"a warm Inductor cache or --compile-cache {cache} (when it holds this model) makes it seconds" in logs[1]
    cache.write_bytes(b"not a cache")  # a damaged file costs the compilation it would have saved, nothing more
    # NOTE: on the first run's Inductor cache: what is checked is that the file is refused and the run goes on,
    # and that cache spares it compiling every graph (and its C++ kernels) cold a third time
    result = run_cli("trainer", *flags, env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor_first")})
    assert "could not be loaded" in result.stdout + result.stderr


def test_each_process_of_a_parallel_run_has_its_own_cache_file():
    assert str(cache_file("c.bin", 0, 1)) == "c.bin" and str(cache_file("c.bin", 3, 8)) == "c.bin.rank3"


def test_every_module_defining_a_kernel_op_or_a_triton_kernel_is_in_the_cache_fingerprint():
    trainer = Path(__file__).resolve().parents[3] / "trainer"
    defining = {path for path in trainer.rglob("*.py")
                if "@kernel_op(" in path.read_text() or "@triton.jit" in path.read_text()}
    assert defining and defining <= set(kernel_sources())


def test_an_edit_to_any_kernel_source_changes_the_fingerprint(tmp_path):
    """Every file of the package, edited alone, and bytes moved from one file to the next: a new fingerprint."""
    copies = []
    for number, path in enumerate(kernel_sources()):
        copies.append(tmp_path / f"{number}.py")
        copies[-1].write_bytes(path.read_bytes())
    fingerprints = {kernel_fingerprint(copies): "the sources as they are"}
    assert kernel_fingerprint(copies) == kernel_fingerprint()
    for copy in copies:
        original = copy.read_bytes()
        copy.write_bytes(original + b"\n")
        found = kernel_fingerprint(copies)
        assert found not in fingerprints, f"editing {copy.name} kept the fingerprint of {fingerprints.get(found)}"
        fingerprints[found] = f"editing {copy.name}"
        copy.write_bytes(original)
    first, second = copies[0].read_bytes(), copies[1].read_bytes()
    copies[0].write_bytes(first[:-1])
    copies[1].write_bytes(first[-1:] + second)
    assert kernel_fingerprint(copies) not in fingerprints, "a byte moved between two files kept the fingerprint"


def test_the_fingerprint_is_a_digest_of_the_sources_and_the_tag_keeps_the_users():
    swiglu = Path(__file__).resolve().parents[3] / "trainer" / "kernels" / "triton_kernels" / "swiglu.py"
    transpose = swiglu.with_name("fp8_transpose.py")
    assert kernel_fingerprint([swiglu]) != kernel_fingerprint([transpose])
    # NOTE: the config's own patch(), not monkeypatch: monkeypatch's undo left the option undefined for later tests
    with torch.compiler.config.patch(cache_key_tag="mine"):
        tag_caches()
        tag_caches()  # once only
        assert torch.compiler.config.cache_key_tag == f"mine+blendforge-ops-{kernel_fingerprint()}"
