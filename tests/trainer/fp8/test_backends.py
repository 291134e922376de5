"""FP8 backend selection: refusal without FP8 hardware, the aliases for every recipe and set of installed backends,
a named backend obeyed or refused (never a changed recipe), the start-up line, registration, a run."""

from __future__ import annotations

import importlib.util
import logging
import math

import pytest
import torch

from corpus.core.errors import ConfigError
from tests.conftest import invoke_cli, run_cli
from tests.trainer.conftest import read_metrics, tiny_config
from trainer.config.schema import FP8Config
from trainer.fp8 import backends
from trainer.fp8.backends import check_hardware, resolve_backend, select_fp8
from trainer.fp8.delayed import DelayedScalingUpdate
from trainer.model.layers import GEMMS
from trainer.run.loop import train

HAS_TE = importlib.util.find_spec("transformer_engine") is not None
HAS_TORCHAO = importlib.util.find_spec("torchao") is not None


def test_without_fp8_format_the_plain_gemm_is_kept():
    engine = select_fp8(FP8Config(), torch.device("cpu"), "plain")
    assert engine.gemm_name == "plain" and engine.compilable


def test_fp8_on_cpu_is_refused_with_the_fix(tmp_path):
    with pytest.raises(ConfigError, match="compute capability 8.9.*Drop --fp8-format"):
        select_fp8(FP8Config(fp8_format="hybrid"), torch.device("cpu"), "plain")
    done = invoke_cli("trainer", "run", "--mock-data", "--seq-length", "16", "--train-iters", "1", "--fp8-format",
                      "hybrid", "--fp8-recipe", "delayed", "--fp8-amax-history-len", "1024", "--fp8-amax-compute-algo",
                      "max")
    assert done.returncode == 1 and "--fp8-format needs a CUDA GPU" in done.stderr and "Traceback" not in done.stderr


def test_gpus_older_than_ada_are_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100")
    with pytest.raises(ConfigError, match="NVIDIA A100 has 8.0"):
        check_hardware(torch.device("cuda", 0))


RECIPES = ("delayed", "tensorwise", "blockwise")
#: Every set of optional FP8 packages a machine may have.
INSTALLS = [frozenset(), frozenset({"te"}), frozenset({"torchao"}), frozenset({"te", "torchao"})]
MODULES = {"transformer_engine.pytorch": "te", "torchao.float8": "torchao"}


def names(present: frozenset) -> str:
    return "+".join(sorted(present)) or "neither"


@pytest.fixture
def installed(monkeypatch):
    """``installed(names)``: pretend exactly the backends ``names`` (of te, torchao) import here."""
    def pretend(present: frozenset) -> None:
        monkeypatch.setattr(backends, "missing", lambda module: None if MODULES[module] in present else
                            f"{module.split('.')[0]} does not import (ModuleNotFoundError: stubbed)")
    return pretend


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("present", INSTALLS, ids=names)
@pytest.mark.parametrize("alias", ["auto", "torch"])
def test_an_alias_takes_the_fastest_measured_backend_whatever_else_is_installed(installed, alias, present, recipe):
    """bench/RESULTS.md: scaled_mm is the fastest for delayed and tensorwise (blockwise unmeasured, same order)."""
    installed(present)
    backend, why = resolve_backend(alias, recipe)
    assert backend.name == "scaled_mm"
    assert why == f"--fp8-backend {alias}: the fastest for the {recipe} recipe (bench/RESULTS.md)"


# Were TE measured fastest, auto would walk down the list: each recipe to the first backend that imports and runs it.
TE_FIRST = {frozenset(): ("scaled_mm",) * 3, frozenset({"te"}): ("te",) * 3,
            frozenset({"torchao"}): ("scaled_mm", "torchao", "torchao"), frozenset({"te", "torchao"}): ("te",) * 3}


@pytest.mark.parametrize("present", INSTALLS, ids=names)
def test_auto_passes_over_what_does_not_import_or_cannot_run_the_recipe(installed, monkeypatch, present):
    installed(present)
    monkeypatch.setitem(backends.ALIASES, "auto", ("te", "torchao", "scaled_mm"))
    taken = {recipe: resolve_backend("auto", recipe) for recipe in RECIPES}
    assert tuple(taken[recipe][0].name for recipe in RECIPES) == TE_FIRST[present]
    if not present:
        assert "passed over: transformer_engine does not import" in taken["delayed"][1]
        assert "torchao has no delayed recipe" in taken["delayed"][1]


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("name", ["te", "torchao", "scaled_mm"])
def test_a_named_backend_is_obeyed_or_refused_never_swapped(installed, name, recipe):
    installed(frozenset({"te", "torchao"}))
    if recipe == "delayed" and name == "torchao":
        with pytest.raises(ConfigError, match="--fp8-backend torchao cannot run --fp8-recipe delayed; backends that "
                                              r"can: scaled_mm, te\. .* or another --fp8-recipe \(tensorwise, "
                                              r"blockwise\)"):
            resolve_backend(name, recipe)
    else:
        assert resolve_backend(name, recipe) == (backends.BACKENDS[name], f"--fp8-backend {name}")


def test_a_refusal_marks_the_backends_that_can_but_are_not_installed(installed):
    installed(frozenset())
    with pytest.raises(ConfigError, match=r"backends that can: scaled_mm, te \(not installed here\)"):
        resolve_backend("torchao", "delayed")
    with pytest.raises(ConfigError, match="--fp8-backend te: transformer_engine does not import.*--fp8-backend auto"):
        resolve_backend("te", "delayed")
    with pytest.raises(ConfigError, match="unknown; choose one of auto, torch, te, torchao, scaled_mm"):
        resolve_backend("fp4", "delayed")


def test_an_alias_with_no_backend_for_the_recipe_names_those_that_could(installed, monkeypatch):
    installed(frozenset())
    monkeypatch.setitem(backends.ALIASES, "torch", ("torchao",))
    with pytest.raises(ConfigError, match=r"--fp8-backend torch --fp8-recipe delayed: no backend here runs it "
                                          r"\(torchao has no delayed recipe\); backends that can: scaled_mm, te"):
        resolve_backend("torch", "delayed")


def test_the_default_fp8_command_logs_what_it_took_and_why(fp8_capable, caplog):
    with caplog.at_level(logging.INFO, logger="trainer.fp8.backends"):
        engine = select_fp8(FP8Config(fp8_format="hybrid"), torch.device("cpu"), "plain")
    line, = [record.getMessage() for record in caplog.records]
    assert line == f"precision: {engine.description}" and engine.gemm_name == "fp8_scaled_mm"
    assert "recipe delayed: delayed scaling" in line
    assert ("backend scaled_mm (own torch._scaled_mm linear; --fp8-backend auto: the fastest for the delayed recipe "
            "(bench/RESULTS.md))") in line


def test_a_recipe_the_named_backend_cannot_run_stops_the_cli_before_anything_else():
    done = invoke_cli("trainer", "run", "--mock-data", "--seq-length", "16", "--train-iters", "1", "--fp8-format",
                      "hybrid", "--fp8-backend", "torchao", "--fp8-recipe", "delayed")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "--fp8-backend torchao cannot run --fp8-recipe delayed; backends that can: scaled_mm" in done.stderr


def test_delayed_scaling_on_scaled_mm_is_delayed(fp8_capable, caplog):
    with caplog.at_level(logging.INFO, logger="trainer.fp8.backends"):
        engine = select_fp8(FP8Config(fp8_format="hybrid", fp8_backend="scaled_mm", fp8_amax_history_len=1024,
                                      fp8_amax_compute_algo="max"), torch.device("cpu"), "plain")
    assert engine.gemm_name == "fp8_scaled_mm" and engine.gemm_name in GEMMS and engine.compilable
    assert "recipe delayed: delayed scaling (amax history 1024 steps, max)" in engine.description
    assert "e5m2 gradients" in engine.description and "instead" not in caplog.text
    assert isinstance(engine.parts.after_backward, DelayedScalingUpdate) and hasattr(GEMMS["fp8_scaled_mm"],
                                                                                     "new_scales")


def test_fp8_transpose_producers_has_the_gradient_kernels_write_their_transposes(fp8_capable):
    config = FP8Config(fp8_format="hybrid", fp8_backend="scaled_mm", fp8_transpose="producers")
    engine = select_fp8(config, torch.device("cpu"), "plain")
    recipe = GEMMS[engine.gemm_name].recipe
    assert recipe.producer_transposes and recipe.transpose_kernel
    assert "transposed FP8 copies: producers (--fp8-transpose)" in engine.description


def test_rowwise_takes_e4m3_gradients_and_says_its_scales_are_per_row(fp8_capable):
    config = FP8Config(fp8_format="hybrid", fp8_recipe="blockwise", fp8_backend="scaled_mm")
    description = select_fp8(config, torch.device("cpu"), "plain").description
    assert "float8_e4m3fn gradients" in description and "recipe blockwise: row-wise scales" in description


@pytest.mark.slow  # two training runs, one on torch's slow CPU _scaled_mm
def test_fp8_training_tracks_the_plain_run(fp8_capable, tmp_path):
    """The tiny model (widths 64 and 128, min-dim lowered) trains with FP8 GEMMs through train(); its losses
    stay close to the fp32 run's and differ from them (FP8 really ran)."""
    model = {"hidden_size": 64, "ffn_hidden_size": 128, "num_attention_heads": 4}
    # NOTE: sequences of 16 (2 × 16 FP8 rows a micro-batch): torch's CPU _scaled_mm takes time in proportion to
    # the tokens, and tracking the plain run needs no more of them
    plain = train(tiny_config(tmp_path / "plain", model=model, data={"mock_data": True, "seq_length": 16}))
    fp8 = train(tiny_config(tmp_path / "fp8", model=model, data={"mock_data": True, "seq_length": 16},
                            fp8={"fp8_format": "hybrid", "fp8_recipe": "tensorwise", "fp8_min_dim": 16}))
    losses = [[r["loss"] for r in read_metrics(path / "metrics.jsonl") if "loss" in r] for path in
              (tmp_path / "plain", tmp_path / "fp8")]
    assert plain.iteration == fp8.iteration == 8
    assert losses[0] != losses[1]
    assert max(abs(a - b) / a for a, b in zip(*losses)) < 0.02


@pytest.mark.skipif(not (HAS_TE and torch.cuda.is_available()), reason="needs Transformer Engine and a CUDA GPU")
def test_te_backend_matches_bf16_within_fp8_error():
    engine = select_fp8(FP8Config(fp8_format="hybrid", fp8_backend="te"), torch.device("cuda"), "plain")
    x = torch.randn(4096, 1024, device="cuda", requires_grad=True)
    w = torch.nn.Parameter(torch.randn(2048, 1024, device="cuda") * 0.02)
    with torch.autocast("cuda", dtype=torch.bfloat16), engine.parts.autocast():
        y = GEMMS[engine.gemm_name](x, w)
    y.float().sum().backward()
    exact = torch.nn.functional.linear(x.detach(), w.detach())
    assert ((y.float() - exact).norm() / exact.norm()) < 0.1 and w.grad is not None


@pytest.mark.skipif(not HAS_TORCHAO, reason="torchao is not installed")
def test_torchao_backend_matches_the_exact_product(fp8_capable):
    config = FP8Config(fp8_format="hybrid", fp8_recipe="tensorwise", fp8_backend="torchao", fp8_min_dim=16)
    engine = select_fp8(config, torch.device("cpu"), "plain")
    x, w = torch.randn(64, 128, requires_grad=True), torch.randn(96, 128, requires_grad=True)
    y = GEMMS[engine.gemm_name](x, w)
    y.sum().backward()
    exact = torch.nn.functional.linear(x.detach(), w.detach())
    assert ((y.detach() - exact).norm() / exact.norm()) < 0.08 and w.grad is not None


FP8_GPU = torch.cuda.is_available() and torch.cuda.get_device_capability() >= backends.MIN_CAPABILITY


@pytest.mark.gpu
@pytest.mark.skipif(not FP8_GPU, reason="needs CUDA: a GPU with FP8 tensor cores")
def test_the_default_fp8_command_trains_on_scaled_mm_with_delayed_scaling(tmp_path):
    """What a GPU user's first ``--fp8-format hybrid`` run gets, whatever else is installed: the fastest backend."""
    done = run_cli("trainer", "run", "--mock-data", "--preset", "tiny", "--seq-length", "64", "--train-iters", "4",
                   "--eval-iters", "0", "--fp8-format", "hybrid", "--fp8-min-dim", "16", "--metrics-jsonl",
                   str(tmp_path / "metrics.jsonl"))
    assert "recipe delayed: delayed scaling" in done.stderr + done.stdout
    assert "backend scaled_mm (own torch._scaled_mm linear; --fp8-backend auto" in done.stderr + done.stdout
    losses = [r["loss"] for r in read_metrics(tmp_path / "metrics.jsonl") if "loss" in r]
    assert losses and all(math.isfinite(loss) for loss in losses)
