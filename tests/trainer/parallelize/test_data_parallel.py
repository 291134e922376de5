"""Gradient buffers of ``trainer.parallelize.data_parallel`` in one process: fp32 accumulation of bf16 gradients
(``--accumulate-allreduce-grads-in-fp32``) and what the optimizer steps with. The reduction over DP ranks is
covered by test_parallel_layouts (gloo, 2 ranks)."""

from __future__ import annotations

import torch
from torch import nn

from trainer.config.schema import ParallelConfig
from trainer.optim.adamw import LowPrecisionAdamW
from trainer.parallel.state import ParallelState
from trainer.parallelize.data_parallel import GradReducer

MICRO_BATCHES = 8


def _bf16_linear() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(48, 32).to(torch.bfloat16)


def _backward_micro_batches(layer: nn.Linear) -> list[dict[str, torch.Tensor]]:
    """Run :data:`MICRO_BATCHES` backward passes into ``layer``; returns each one's own bf16 gradients."""
    each = []
    for index in range(MICRO_BATCHES):
        x = torch.randn(16, 48, generator=torch.Generator().manual_seed(index)).to(torch.bfloat16)
        loss = (layer(x).float() ** 2).mean()
        each.append(dict(zip(("weight", "bias"), torch.autograd.grad(loss, (layer.weight, layer.bias),
                                                                     retain_graph=True))))
        loss.backward()
    return each


def _reducer(layer: nn.Linear, fp32: bool) -> GradReducer:
    config = ParallelConfig(accumulate_allreduce_grads_in_fp32=fp32)
    return GradReducer([(layer.weight, False), (layer.bias, False)], ParallelState(torch.device("cpu")), config,
                       MICRO_BATCHES)


def test_fp32_main_grads_hold_the_exact_fp32_sum_of_each_micro_batch():
    """Each micro-batch's bf16 gradient is added into an fp32 ``main_grad`` and dropped: the sum rounds in
    fp32, not in bf16 after every micro-batch as autograd's own accumulation does."""
    layer = _bf16_linear()
    reducer = _reducer(layer, fp32=True)
    each = _backward_micro_batches(layer)
    for name, param in (("weight", layer.weight), ("bias", layer.bias)):
        assert param.grad is None and param.main_grad.dtype == torch.float32
        expected = torch.zeros_like(param, dtype=torch.float32)
        for grads in each:
            expected += grads[name]
        assert torch.equal(param.main_grad, expected)
    expected_norm = torch.linalg.vector_norm(torch.cat([layer.weight.main_grad.flatten(), layer.bias.main_grad]))
    torch.testing.assert_close(reducer.global_norm(), expected_norm)

    reducer.start_step()  # the next step starts from zero again
    assert not layer.weight.main_grad.any() and layer.weight.grad is None


def test_bf16_accumulation_rounds_where_fp32_main_grads_do_not():
    """Without the flag the gradients stay autograd's bf16 ones, summed in bf16 (what the flag is for)."""
    layer = _bf16_linear()
    _reducer(layer, fp32=False)
    each = _backward_micro_batches(layer)
    assert layer.weight.grad.dtype == torch.bfloat16 and not hasattr(layer.weight, "main_grad")
    exact = sum(grads["weight"].float() for grads in each)
    assert not torch.equal(layer.weight.grad.float(), exact)
    torch.testing.assert_close(layer.weight.grad.float(), exact, rtol=0.05, atol=1e-3)


def test_the_optimizer_steps_with_main_grad():
    """A parameter with an fp32 ``main_grad`` (and no ``.grad``) is updated as if that were its gradient."""
    values = torch.randn(32, 48).to(torch.bfloat16)  # representable in bf16, so both runs see equal gradients
    steps = []
    for as_main_grad in (True, False):
        layer = _bf16_linear()
        if as_main_grad:
            layer.weight.main_grad, layer.weight.grad = values.float(), None
        else:
            layer.weight.grad = values.clone()
        optimizer = LowPrecisionAdamW([layer.weight], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                                      exp_avg_dtype=torch.bfloat16, exp_avg_sq_dtype=torch.bfloat16)
        optimizer.step()
        steps.append(layer.weight.detach().clone())
    assert not torch.equal(steps[0], _bf16_linear().weight.detach())
    assert torch.equal(steps[0], steps[1])
