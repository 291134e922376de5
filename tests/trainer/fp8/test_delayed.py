"""Delayed FP8 scaling on CPU (torch._scaled_mm runs here): the linear casts with the scales it is given and
records the amaxes it sees (forward and backward, eager and compiled), the once-a-step update turns the
history into scales as Transformer Engine's recipe does, and a run trains with it through train()."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
import torch.nn.functional as F

from tests.trainer.conftest import read_metrics, tiny_config
from tests.trainer.kernels.triton_support import ON_CUDA
from trainer.fp8.delayed import WEIGHT, Calibration, DelayedScales, DelayedScalingUpdate
from trainer.fp8.scaled_mm import DelayedScaledGemm, ScaledMMRecipe, make_scaled_mm_gemm
from trainer.fp8.scaling import E4M3, E5M2, Eligibility, fp8_max
from trainer.kernels.fp8_cast import amax_of, cast_with_scale
from trainer.kernels.swiglu import reference_backward, swiglu_backward_cast
from trainer.model.layers import ColumnParallelLinear
from trainer.model.swiglu import swiglu
from trainer.optim.adamw import LowPrecisionAdamW
from trainer.parallel.state import ParallelState
from trainer.run import loop
from trainer.run.loop import train

RECIPE = ScaledMMRecipe(E4M3, E5M2, rowwise=False)
GEMM = DelayedScaledGemm(RECIPE, Eligibility(16), Calibration(active=False))  # past its first step


def cast_round_trip(t: torch.Tensor, scale: float, dtype: torch.dtype) -> torch.Tensor:
    """``t`` cast to ``dtype`` with a fixed ``scale`` (saturating) and back, in float64."""
    limit = fp8_max(dtype)
    return (t.detach().double() * scale).clamp(-limit, limit).to(dtype).double() / scale


def scales(x: float, w: float, g: float) -> DelayedScales:
    """A linear's state with these scales (and their inverses), as the update leaves it."""
    state = DelayedScales()
    state.scale.copy_(torch.tensor([x, w, g]))
    for inverse, value in zip(state.inverses(), (x, w, g)):
        inverse.fill_(1 / value)
    return state


def assert_close_but_for_fp8_steps(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    """Results of two FP8 paths whose gradients before the cast agree to fp32 rounding: in fp32, close; in bf16,
    within 5% in norm (measured: up to ~2%; a wrong layout: ~100%) — a gradient element one bf16 step apart (a
    compiled kernel rounds once where eager code rounds each op) may cast to the neighbouring FP8 value, and
    e5m2's are 25% apart."""
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    else:
        error = (got.float() - want.float()).norm() / want.float().norm()
        assert error < 5e-2, (error, got.shape)


def test_the_gemm_casts_with_the_given_scales_and_records_the_amaxes():
    x = torch.randn(2, 32, 64, requires_grad=True)
    w = (torch.randn(48, 64) * 0.05).requires_grad_()
    grad = torch.randn(2, 32, 48) * 1e-3
    state = scales(16.0, 2048.0, 2.0 ** 20)
    y = GEMM(x, w, state)
    y.backward(grad)
    xq, wq = cast_round_trip(x.reshape(-1, 64), 16.0, E4M3), cast_round_trip(w, 2048.0, E4M3)
    gq = cast_round_trip(grad.reshape(-1, 48), 2.0 ** 20, E5M2)
    for got, want in ((y.reshape(-1, 48), xq @ wq.T), (x.grad.reshape(-1, 64), gq @ wq), (w.grad, gq.T @ xq)):
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    torch.testing.assert_close(state.amax_input, x.abs().max().reshape(1).detach())
    torch.testing.assert_close(state.amax_grad, grad.abs().max().reshape(1))
    assert torch.equal(state.scale, torch.tensor([16.0, 2048.0, 2.0 ** 20]))  # only the update changes scales


def test_a_scale_too_large_saturates_instead_of_overflowing():
    x, w = torch.randn(32, 64) * 100, torch.randn(48, 64)
    y = GEMM(x, w, scales(1e6, 1.0, 1.0))
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y.double(), torch.sign(x.double()) * 448 / 1e6 @ cast_round_trip(w, 1.0, E4M3).T)


def test_amaxes_keep_the_largest_over_micro_batches():
    state, w = scales(1.0, 1.0, 1.0), torch.randn(48, 64, requires_grad=True)
    for magnitude in (3.0, 5.0, 2.0):
        x = torch.full((32, 64), magnitude)
        GEMM(x, w, state).backward(torch.full((32, 48), magnitude / 100))
    assert state.amax_input[0] == 5.0 and state.amax_grad[0] == pytest.approx(0.05)


def test_ineligible_shapes_run_the_plain_linear_and_record_nothing():
    state, x, w = scales(1.0, 1.0, 1.0), torch.randn(32, 40), torch.randn(48, 40)
    assert torch.equal(GEMM(x, w, state), F.linear(x, w)) and not state.amax_input.any()


@pytest.mark.slow  # compiles FP8 blocks on the CPU
def test_compiled_blocks_record_the_same_amaxes_and_gradients_as_eager_ones():
    """The gradient's amax is written inside the backward graph (a buffer mutation AOTAutograd must keep)."""
    torch.manual_seed(0)
    parallel = ParallelState(torch.device("cpu"))
    layers = [torch.nn.ModuleList([ColumnParallelLinear(64, 64, parallel, 0.05, GEMM) for _ in range(2)])
              for _ in range(3)]
    with torch.no_grad():
        for linear in (linear for layer in layers for linear in layer):
            linear.reset_parameters()
            linear.fp8_scales = scales(64.0, 2048.0, 2.0 ** 16)

    def block(layer, h):
        return layer[1](torch.relu(layer[0](h)))

    compiled = copy.deepcopy(layers)
    x = torch.randn(32, 64)
    for stack, run in ((layers, block), (compiled, torch.compile(block))):
        h = x
        for layer in stack:
            h = run(layer, h)
        h.square().sum().backward()
    for eager_layer, compiled_layer in zip(layers, compiled):
        for eager, other in zip(eager_layer, compiled_layer):
            assert eager.fp8_scales.amax_grad > 0 and eager.fp8_scales.amax_input > 0
            torch.testing.assert_close(other.fp8_scales.amax_input, eager.fp8_scales.amax_input)
            torch.testing.assert_close(other.fp8_scales.amax_grad, eager.fp8_scales.amax_grad)
            torch.testing.assert_close(other.weight.grad, eager.weight.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float8_e5m2, torch.float8_e4m3fn])
def test_the_cast_gradient_is_delayed_scalings_cast_of_the_rounded_one(dtype):
    """What the FP8 GEMMs after it get: exactly trainer.fp8.delayed's cast (saturating) of the gradient the
    plain op returns, and that gradient's amax."""
    fused = (torch.randn(6, 2 * 40) * 4).bfloat16()
    grad = torch.randn(6, 40).bfloat16()
    grad[0, 0] = 1e4  # saturates at this scale
    scale = torch.tensor(2.0 ** 6)
    got, amax = swiglu_backward_cast(fused, grad, scale, dtype)
    rounded = reference_backward(fused, grad)
    assert got.dtype == dtype and got.shape == fused.shape
    assert torch.equal(got.view(torch.uint8), cast_with_scale(rounded, scale, dtype).view(torch.uint8))
    assert torch.equal(amax, amax_of(rounded)) and got.float().abs().max() == torch.finfo(dtype).max


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_swiglu_linear_equals_swiglu_of_the_linear_eager_and_compiled(dtype):
    """``fc1.swiglu`` (the backward's FP8 gradient straight from the SwiGLU kernel) against ``swiglu(fc1(x))``
    (the bf16 gradient, then the cast): the same outputs, gradients and amaxes."""
    torch.manual_seed(0)
    fused = ColumnParallelLinear(64, 2 * 48, ParallelState(torch.device("cpu")), 0.05, GEMM, stacked=2)
    with torch.no_grad():
        fused.reset_parameters()
    fused.weight = torch.nn.Parameter(fused.weight.detach().to(dtype))  # the scales stay fp32
    fused.fp8_scales = scales(64.0, 2048.0, 2.0 ** 16)
    x = torch.randn(2, 16, 64, dtype=dtype)
    grad = torch.randn(2, 16, 48, dtype=dtype) * 1e-2
    results = []
    for block in (lambda linear, h: linear.swiglu(h), lambda linear, h: swiglu(linear(h))):
        for run in (block, torch.compile(block)):
            linear, h = copy.deepcopy(fused), x.clone().requires_grad_()
            out = run(linear, h)
            out.backward(grad)
            results.append((out, h.grad, linear.weight.grad, linear.fp8_scales.amax_input,
                            linear.fp8_scales.amax_grad))
    assert results[0][0].shape == (2, 16, 48) and results[0][4] > 0
    for other in results[1:]:
        for got, want in zip(other, results[0]):
            assert_close_but_for_fp8_steps(got, want, dtype)
    eager_fused, eager_plain = results[0], results[2]  # the same arithmetic: bit for bit
    assert all(torch.equal(got, want) for got, want in zip(eager_fused, eager_plain))


def test_a_calibrating_step_runs_current_scaling_and_measures_the_amaxes():
    calibrating = DelayedScaledGemm(RECIPE, Eligibility(16), Calibration())
    current = make_scaled_mm_gemm(RECIPE, Eligibility(16))
    x = torch.randn(32, 64, requires_grad=True)
    w = (torch.randn(48, 64) * 0.05).requires_grad_()
    grad = torch.randn(32, 48) * 1e-3
    state = DelayedScales()
    y = calibrating(x, w, state)  # scales of 1 would flush these gradients to zero in e5m2
    y.backward(grad)
    got = (y.detach(), x.grad.clone(), w.grad.clone())
    x.grad = w.grad = None
    current(x, w).backward(grad)
    assert torch.equal(got[0], current(x, w).detach()) and torch.equal(got[1], x.grad) and torch.equal(got[2], w.grad)
    torch.testing.assert_close(state.amax_input, x.abs().max().reshape(1).detach())
    torch.testing.assert_close(state.amax_grad, grad.abs().max().reshape(1))


def test_calibration_runs_compiled_code_eagerly_and_ends_with_the_first_update():
    calibration = Calibration()
    calls = []
    compiled = torch.compile(lambda t: calls.append(torch.compiler.is_compiling()) or t + 1, backend="eager")
    with calibration.step_context([]):
        compiled(torch.ones(2))
    linears = fp8_linears(1)
    DelayedScalingUpdate(4, "max", E4M3, E5M2, calibration)([linears])
    with calibration.step_context([]):
        compiled(torch.ones(2))
    assert calls == [False, True] and not calibration.active


def test_the_calibrating_step_recomputes_every_block_and_puts_the_setting_back():
    """The eager step keeps no block's activations (it would set the run's memory peak); later steps run as
    configured."""
    calibration = Calibration()
    chunks = [torch.nn.Module(), torch.nn.Module(), torch.nn.Linear(2, 2)]  # the last has no recompute flag
    chunks[0].recompute, chunks[1].recompute = False, True
    with calibration.step_context(chunks):
        assert [chunk.recompute for chunk in chunks[:2]] == [True, True] and not hasattr(chunks[2], "recompute")
    assert [chunk.recompute for chunk in chunks[:2]] == [False, True]
    calibration.active = False
    with calibration.step_context(chunks):
        assert chunks[0].recompute is False


def test_a_pipeline_stage_without_fp8_linears_still_ends_its_calibration():
    calibration = Calibration()
    DelayedScalingUpdate(4, "max", E4M3, E5M2, calibration)([torch.nn.ModuleList([torch.nn.LayerNorm(8)])])
    assert not calibration.active


def fp8_linears(count: int) -> torch.nn.ModuleList:
    """``count`` delayed-scaling linears (64 → 64), initialised."""
    linears = torch.nn.ModuleList(ColumnParallelLinear(64, 64, ParallelState(torch.device("cpu")), 0.05, GEMM)
                                  for _ in range(count))
    with torch.no_grad():
        for linear in linears:
            linear.reset_parameters()
            linear.fp8_scales.reset_parameters()
    return linears


def _seen(linears: torch.nn.ModuleList, amax: float) -> None:
    """As if a step saw inputs of amax ``amax``, weights of ``amax / 10`` and gradients of ``amax / 1000``."""
    with torch.no_grad():
        for linear in linears:
            linear.fp8_scales.amax_input.fill_(amax)
            linear.fp8_scales.amax_grad.fill_(amax / 1000)
            linear.weight.fill_(-amax / 10)


@pytest.mark.parametrize("algo", ["max", "most_recent"])
def test_the_update_sets_scales_from_the_history_window(algo):
    linears = fp8_linears(3)
    update = DelayedScalingUpdate(history_len=2, compute_algo=algo, forward_dtype=E4M3, grad_dtype=E5M2,
                                  calibration=Calibration())
    for amax, window in ((4.0, 4.0), (2.0, 4.0), (1.0, 2.0)):  # the max over the last two steps
        _seen(linears, amax)
        update([linears])
        expected = window if algo == "max" else amax
        want = torch.tensor([448 / expected, 448 / (expected / 10), 57344 / (expected / 1000)])
        for state in (linear.fp8_scales for linear in linears):
            torch.testing.assert_close(state.scale, want)
            torch.testing.assert_close(torch.stack(state.inverses()), 1 / want)
            assert not state.amax_input.any() and not state.amax_grad.any()  # cleared for the next step


def test_an_operand_not_seen_keeps_its_scale():
    linears = fp8_linears(1)
    state = linears[0].fp8_scales = scales(3.0, 5.0, 7.0)
    with torch.no_grad():
        linears[0].weight.zero_()
    state.amax_input[0] = 2.0
    DelayedScalingUpdate(4, "max", E4M3, E5M2, Calibration())([linears])
    assert state.scale.tolist() == [224.0, 5.0, 7.0] and state.inverse_input == 1 / 224 and state.inverse_grad == 1 / 7


def test_the_weight_amaxes_come_from_the_optimizer_that_wrote_the_weights():
    """The first update takes the weights' amaxes from a pass over them and hands the optimizer the tensor to
    record them in; from then on the history gets what the optimizer's update recorded, the same values. An
    optimizer that does not step every FP8 weight (ZeRO-1) is not asked."""
    linears = fp8_linears(2)
    for linear in linears:
        linear.weight = torch.nn.Parameter(linear.weight.detach().bfloat16())
    weights = [linear.weight for linear in linears]
    for stepped, asked in ((weights, True), (weights[:1], False)):
        optimizer = LowPrecisionAdamW(stepped, 0.5, (0.9, 0.95), 1e-8, 0.0, torch.bfloat16, torch.bfloat16)
        update = DelayedScalingUpdate(4, "most_recent", E4M3, E5M2, Calibration())
        update.take_weight_amaxes_from(optimizer)
        _seen(linears, 4.0)
        for step in range(3):
            update([linears])
            assert bool(optimizer.weight_amaxes) == asked
            expected = torch.stack([linear.weight.abs().max().float() for linear in linears])
            torch.testing.assert_close(update._history[step, :, WEIGHT], expected, rtol=0, atol=0)
            for weight in stepped:
                weight.grad = torch.randn_like(weight)
            optimizer.step()  # moves the weights: the next update must see the new amaxes


@pytest.mark.slow  # compiled blocks and two FP8 runs on torch's slow CPU _scaled_mm
def test_a_run_with_delayed_scaling_trains_and_updates_its_scales(fp8_capable, tmp_path, monkeypatch):
    """The tiny model trains through train() with delayed scaling and bf16 weights (the configuration of the
    H200 speed runs), its blocks compiled: the first step calibrates (the same loss as current scaling, and
    the compile cache waits for the second), the
    losses stay close to the plain run's without equalling them, the scales are updated once a step, kept in
    fp32, and every FP8 linear's moved away from its starting 1."""
    updates, cache_saves = [], []
    update = DelayedScalingUpdate.__call__
    monkeypatch.setattr(DelayedScalingUpdate, "__call__", lambda self, chunks: (update(self, chunks),
                                                                                updates.append(self)))
    monkeypatch.setattr(loop, "save_compiled", lambda path: cache_saves.append(len(updates)))
    model = {"hidden_size": 64, "ffn_hidden_size": 128, "num_attention_heads": 4}
    common = {"data": {"mock_data": True, "seq_length": 32}, "training": {"precision": "bf16"},
              "optim": {"main_params_dtype": "bf16", "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}}
    fp8 = {"fp8_format": "hybrid", "fp8_min_dim": 16}
    runs = {"plain": {"model": model},
            "tensorwise": {"model": model, "fp8": {**fp8, "fp8_recipe": "tensorwise"}},
            "delayed": {"model": {**model, "compile": "blocks", "compile_cache": str(tmp_path / "compiled.bin")},
                        "fp8": {**fp8, "fp8_recipe": "delayed", "fp8_amax_history_len": 4,
                                "fp8_amax_compute_algo": "max"}}}
    for name, sections in runs.items():
        assert train(tiny_config(tmp_path / name, **common, **sections)).iteration == 8
    plain, tensorwise, delayed = ([r["loss"] for r in read_metrics(tmp_path / name / "metrics.jsonl") if "loss" in r]
                                  for name in runs)
    assert delayed[0] == tensorwise[0] and delayed != tensorwise
    assert delayed != plain and max(abs(a - b) / a for a, b in zip(plain, delayed)) < 0.02
    linears = updates[-1]._linears
    assert len(updates) == 8 and len(linears) == 2 * 4  # two layers: qkv, proj, fc1, fc2
    assert cache_saves == [2, 8]  # after the first compiled step (the first one calibrates eagerly), at the end
    assert all(linear.weight.dtype == torch.bfloat16 and linear.fp8_scales.scale.dtype == torch.float32
               and (linear.fp8_scales.scale != 1).all() for linear in linears)


@pytest.mark.slow  # two FP8 runs on torch's slow CPU _scaled_mm
def test_a_run_takes_the_weight_amaxes_from_its_optimizer_and_trains_as_with_a_pass_over_the_weights(
        fp8_capable, tmp_path, monkeypatch):
    """Through train() with bf16 weights (our AdamW): the run hands its optimizer to delayed scaling, and its
    losses equal, bit for bit, those of a run taking every weight amax from a pass over the weights."""
    attached = []
    monkeypatch.setattr(DelayedScalingUpdate, "take_weight_amaxes_from",
                        lambda self, optimizer: (attached.append(optimizer), setattr(self, "_optimizer", optimizer)))
    # NOTE: sequences of 16 (2 × 16 FP8 rows a micro-batch): torch's CPU _scaled_mm takes time in proportion to
    # the tokens, and bit-equal losses need no more of them
    sections = {"model": {"hidden_size": 64, "ffn_hidden_size": 128, "num_attention_heads": 4},
                "data": {"mock_data": True, "seq_length": 16}, "training": {"precision": "bf16"},
                "optim": {"main_params_dtype": "bf16", "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"},
                "fp8": {"fp8_format": "hybrid", "fp8_recipe": "delayed", "fp8_min_dim": 16}}
    assert train(tiny_config(tmp_path / "recorded", **sections)).iteration == 8
    assert len(attached) == 1 and attached[0].weight_amaxes  # every FP8 weight's amax recorded by the optimizer
    monkeypatch.setattr(DelayedScalingUpdate, "take_weight_amaxes_from", lambda self, optimizer: None)
    assert train(tiny_config(tmp_path / "passes", **sections)).iteration == 8
    losses = [[r["loss"] for r in read_metrics(tmp_path / name / "metrics.jsonl") if "loss" in r]
              for name in ("recorded", "passes")]
    assert losses[0] == losses[1] and len(losses[0]) == 8


@pytest.mark.slow  # three FP8 runs (whole, killed, resumed) on torch's slow CPU _scaled_mm
def test_a_resumed_run_calibrates_again_and_continues_the_same_curve(fp8_capable, tmp_path, monkeypatch):
    """Scales are not in checkpoints: the first step after a resume calibrates like a fresh run's, and the
    resumed losses equal an uninterrupted run's (the same current-scaling step, then delayed ones)."""
    calibrating = []
    original = DelayedScaledGemm._calibrating
    monkeypatch.setattr(DelayedScaledGemm, "_calibrating",
                        lambda self, *args: (calibrating.append(1), original(self, *args))[1])
    # NOTE: sequences of 16 (2 × 16 FP8 rows a micro-batch): torch's CPU _scaled_mm takes time in proportion to
    # the tokens, and counting calibrations and comparing curves needs no more of them
    sections = {"model": {"hidden_size": 64, "ffn_hidden_size": 128, "num_attention_heads": 4},
                "data": {"mock_data": True, "seq_length": 16},
                "fp8": {"fp8_format": "hybrid", "fp8_recipe": "delayed", "fp8_min_dim": 16}}
    save = str(tmp_path / "checkpoints")
    train(tiny_config(tmp_path / "resumed", training={"train_iters": 8, "exit_interval": 4}, checkpoint={"save": save},
                      **sections))
    # step 1 only: the 8 FP8 linears of two layers, for each of 2 micro-batches, twice (the backward pass
    # recomputes the blocks while calibrating)
    assert len(calibrating) == 32
    train(tiny_config(tmp_path / "resumed", training={"train_iters": 8}, checkpoint={"save": save, "load": save},
                      **sections))
    assert len(calibrating) == 64  # step 5, the first after the resume, calibrated again
    train(tiny_config(tmp_path / "straight", training={"train_iters": 8}, **sections))
    resumed, straight = ([r["loss"] for r in read_metrics(tmp_path / name / "metrics.jsonl") if "loss" in r]
                         for name in ("resumed", "straight"))
    assert resumed[:4] == straight[:4] and resumed[4:] != straight[4:]  # after the resume: a calibrating step 5
    assert max(abs(a - b) / a for a, b in zip(resumed, straight)) < 0.01


@pytest.mark.parametrize("device", [pytest.param("cpu", marks=pytest.mark.slow),  # compiled FP8 blocks on the CPU
                                    pytest.param("cuda", marks=ON_CUDA)])
def test_gradient_transposes_written_by_their_producers_change_no_bit(device):
    """``--fp8-transpose producers``: the weight gradients of the fc1 (SwiGLU) and QKV (RoPE) linears from the
    transposed gradient copies their backward kernels write equal, bit for bit, those from the transposing
    kernel's copies, eager and compiled (on CUDA: the Triton kernels, launched by Inductor when compiled)."""
    from tests.trainer.kernels.test_rotary import tables

    torch.manual_seed(0)
    kernel = dataclasses.replace(RECIPE, transpose_kernel=True)
    gemms = [DelayedScaledGemm(recipe, Eligibility(16), Calibration(active=False))
             for recipe in (kernel, dataclasses.replace(kernel, producer_transposes=True))]
    parallel, rotary, shape = ParallelState(torch.device(device)), tables(2, 32, 16, torch.bfloat16, device), (2, 2, 16)
    blocks = {"swiglu": (2 * 48, 2, lambda linear, h: linear.swiglu(h).square().sum()),
              "rotary": (2 * 4 * 16, 1, lambda linear, h: sum(t.square().sum()
                                                              for t in linear.rotary_heads(h, rotary, shape)))}
    for width, stacked, block in blocks.values():
        base = ColumnParallelLinear(64, width, parallel, 0.05, gemms[0], stacked=stacked).to(device)
        with torch.no_grad():
            base.reset_parameters()
        base.weight = torch.nn.Parameter(base.weight.detach().bfloat16())
        base.fp8_scales = scales(64.0, 2048.0, 2.0 ** 12).to(device)
        x = torch.randn(2, 32, 64, dtype=torch.bfloat16, device=device)
        for run in (block, torch.compile(block)):
            grads = []
            for gemm in gemms:
                linear, h = copy.deepcopy(base), x.clone().requires_grad_()
                linear.gemm = gemm
                run(linear, h).backward()
                grads.append((h.grad, linear.weight.grad, linear.fp8_scales.amax_grad))
            assert grads[0][1].abs().sum() > 0
            assert all(torch.equal(got, want) for got, want in zip(*grads))
