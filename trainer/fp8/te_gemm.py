"""The ``te`` FP8 backend: Transformer Engine's ``te.Linear`` behind our local-GEMM contract.

TE keeps FP8 scaling state (amax histories, scales) per GEMM inside its modules, so each of our weights
gets one ``te.Linear`` that shares the weight parameter (it owns no copy) and holds that state; the
forward pass runs inside ``te.autocast`` with the recipe (:meth:`TEGemm.autocast`), as Megatron-core's
TE layers do. Recipes: ``delayed`` → ``DelayedScaling`` (amax history length and algorithm from the
flags), ``tensorwise`` → ``Float8CurrentScaling``, ``blockwise`` → ``Float8BlockScaling``.

NOTE: the TE modules are not submodules of the model, so a checkpoint does not carry the delayed-scaling
amax history: a resumed run rebuilds it over its first ``--fp8-amax-history-len`` steps.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from trainer.config.schema import FP8Config
from trainer.fp8.scaling import Eligibility
from trainer.fp8.spec import BackendParts, FP8Backend


def te_recipe(recipe: str, fp8_format: str, history_len: int, compute_algo: str):
    """The ``transformer_engine.common.recipe`` object for our flags."""
    from transformer_engine.common import recipe as te_recipes

    form = te_recipes.Format.HYBRID if fp8_format == "hybrid" else te_recipes.Format.E4M3
    if recipe == "delayed":
        return te_recipes.DelayedScaling(fp8_format=form, amax_history_len=history_len, amax_compute_algo=compute_algo)
    if recipe == "tensorwise":
        return te_recipes.Float8CurrentScaling(fp8_format=form)
    return te_recipes.Float8BlockScaling(fp8_format=form)


class TEGemm:
    """A local GEMM running eligible shapes through one ``te.Linear`` per weight (created on first use)."""

    def __init__(self, recipe, eligible: Eligibility) -> None:
        self.recipe, self.eligible = recipe, eligible
        # NOTE: keyed by id(): a tensor cannot be a dict key (its == is elementwise); each te.Linear holds
        # its weight as a parameter, so the weight lives, and its id stays its own, as long as the entry.
        self._linears: dict[int, torch.nn.Module] = {}

    def _linear_for(self, weight: torch.nn.Parameter) -> torch.nn.Module:
        linear = self._linears.get(id(weight))
        if linear is None:
            import transformer_engine.pytorch as te

            out_features, in_features = weight.shape
            linear = te.Linear(in_features, out_features, bias=False, params_dtype=weight.dtype, device=weight.device)
            linear.register_parameter("weight", weight)  # share ours; TE's own initial weight is dropped
            self._linears[id(weight)] = linear
        return linear

    def __call__(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        out_features, in_features = weight.shape
        if not self.eligible(x.numel() // in_features, in_features, out_features):
            return F.linear(x, weight)
        return self._linear_for(weight)(x)

    def autocast(self) -> contextlib.AbstractContextManager:
        """The FP8 region the forward pass runs in (TE reduces delayed-scaling amaxes when it exits)."""
        import transformer_engine.pytorch as te

        if hasattr(te, "autocast"):  # TE 2.8 on; fp8_autocast is its deprecated older name
            return te.autocast(enabled=True, recipe=self.recipe)
        return te.fp8_autocast(enabled=True, fp8_recipe=self.recipe)


def build_parts(config: FP8Config, recipe: str, eligible: Eligibility) -> BackendParts:
    """The ``te`` backend's parts: a :class:`TEGemm` for the recipe, its ``te.autocast`` around the forward."""
    gemm = TEGemm(te_recipe(recipe, config.fp8_format, config.fp8_amax_history_len, config.fp8_amax_compute_algo),
                  eligible)
    return BackendParts(gemm, gemm.autocast)


BACKEND = FP8Backend("te", "transformer_engine.pytorch", ("delayed", "tensorwise", "blockwise"), build_parts,
                     compilable=False, summary="Transformer Engine te.Linear", rowwise_blocks=False)
