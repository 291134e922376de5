"""The ``torchao`` FP8 backend: torchao.float8's autograd function behind our local-GEMM contract.

torchao converts ``nn.Linear`` modules; our linears call a local GEMM instead, so this calls the same
function its ``Float8Linear.forward`` calls (``matmul_with_hp_or_float8_args``) with the config built the
way ``Float8Linear`` builds it. Dynamic scaling only: tensorwise (the format's gradient dtype) or
torchao's ``rowwise`` recipe (e4m3 everywhere, power-of-two scales) for ``--fp8-recipe blockwise``.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from trainer.config.schema import FP8Config
from trainer.fp8.scaling import FORMATS, Eligibility
from trainer.fp8.spec import BackendParts, FP8Backend


def torchao_config(forward_dtype: torch.dtype, grad_dtype: torch.dtype, rowwise: bool):
    """``(Float8LinearConfig, LinearMMConfig)`` for one recipe."""
    from torchao.float8.config import CastConfig, Float8LinearConfig
    from torchao.float8.float8_training_tensor import LinearMMConfig, ScaledMMConfig

    if rowwise:
        config = Float8LinearConfig.from_recipe_name("rowwise")
    else:
        config = Float8LinearConfig(cast_config_input=CastConfig(target_dtype=forward_dtype),
                                    cast_config_weight=CastConfig(target_dtype=forward_dtype),
                                    cast_config_grad_output=CastConfig(target_dtype=grad_dtype))
    gemms = (config.gemm_config_output, config.gemm_config_grad_input, config.gemm_config_grad_weight)
    mm_config = LinearMMConfig(*(ScaledMMConfig(config.emulate, gemm.use_fast_accum, False, config.pad_inner_dim)
                                 for gemm in gemms))
    return config, mm_config


def torchao_linear(x: torch.Tensor, weight: torch.Tensor, *, configs: tuple, eligible: Eligibility) -> torch.Tensor:
    """``x @ weight.T`` through torchao.float8 where the shape is eligible, else ``F.linear``."""
    from torchao.float8.float8_linear import matmul_with_hp_or_float8_args

    out_features, in_features = weight.shape
    if not eligible(x.numel() // in_features, in_features, out_features):
        return F.linear(x, weight)
    kind = x.device.type
    if torch.is_autocast_enabled(kind):  # as Float8Linear.forward: the output takes the autocast dtype
        x = x.to(torch.get_autocast_dtype(kind))
    config, mm_config = configs
    return matmul_with_hp_or_float8_args.apply(x, weight.t(), mm_config, config)


def make_torchao_gemm(forward_dtype: torch.dtype, grad_dtype: torch.dtype, rowwise: bool, eligible: Eligibility):
    """The local GEMM of the torchao backend."""
    return functools.partial(torchao_linear, configs=torchao_config(forward_dtype, grad_dtype, rowwise),
                             eligible=eligible)


def build_parts(config: FP8Config, recipe: str, eligible: Eligibility) -> BackendParts:
    """The ``torchao`` backend's parts: its GEMM for the format and recipe (row-wise for ``blockwise``)."""
    forward_dtype, grad_dtype = FORMATS[config.fp8_format]
    return BackendParts(make_torchao_gemm(forward_dtype, grad_dtype, recipe == "blockwise", eligible))


BACKEND = FP8Backend("torchao", "torchao.float8", ("tensorwise", "blockwise"), build_parts, compilable=True,
                     summary="torchao.float8")
