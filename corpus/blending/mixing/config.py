"""``mixing:`` in a blend file: the train weights moved during the run by a rule fed with per-source losses.

::

    sources:
      - {name: web,  prefix: data/web_text_document,  weight: 0.7}   # the weights are the prior: the mix
      - {name: code, prefix: "data/code/*_text_document", weight: 0.3} # until the first update
    mixing:
      kind: online
      rule: odm                 # Online Data Mixing's EXP3 bandit (see corpus.blending.mixing.rules.RULES)
      update_interval: 10       # steps between updates
      floor: 0.02               # no source's weight goes below this
      loss_decimals: 3          # losses are rounded to this many decimals before the rule sees them
      options: {smoothing: 0.9} # the rule's own settings
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corpus.blending.mixing.rules import RULES, MixingRule
from corpus.core.errors import ConfigError
from corpus.core.typed_config import build

#: ``mixing.kind`` values: what moves the weights.
KINDS = ("online",)


@dataclass(frozen=True)
class MixingConfig:
    """How the train weights change during the run (``mixing:`` of a blend)."""

    kind: str
    """``online``: a rule updates the weights from the per-source training losses every ``update_interval`` steps."""
    rule: str = "odm"
    """The rule (:data:`~corpus.blending.mixing.rules.RULES`): ``odm`` (Online Data Mixing's EXP3 bandit) or
    ``excess_loss`` (DoReMi-style, against a reference run's per-source losses)."""
    update_interval: int = 10
    """Steps between updates; each update reads the losses of the steps since the previous one."""
    floor: float = 0.01
    """The least weight any source keeps (the rule's weights ``p`` become ``floor + (1 − S·floor)·p``)."""
    loss_decimals: int = 3
    """Decimals the per-source mean losses are rounded to before the rule sees them: every parallel layout sums
    the losses in another order, and the rounding makes the weights the same whatever the layout."""
    options: dict[str, Any] = field(default_factory=dict)
    """The rule's own settings (its ``Options`` dataclass)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"unknown mixing kind {self.kind!r}; use one of {', '.join(KINDS)} (or leave mixing out "
                              "for fixed weights, schedule: for weights that follow a plan)", "kind")
        if self.rule not in RULES:
            raise ConfigError(f"unknown mixing rule {self.rule!r}; use one of {', '.join(RULES)}", "rule")
        if self.update_interval < 1:
            raise ConfigError(f"update_interval {self.update_interval} must be at least 1 (steps between updates)",
                              "update_interval")
        if not 0 <= self.floor < 1:
            raise ConfigError(f"floor {self.floor} must be in [0, 1) (the least weight of a source)", "floor")
        if not 0 <= self.loss_decimals <= 12:
            raise ConfigError(f"loss_decimals {self.loss_decimals} must be in 0..12", "loss_decimals")
        self.rule_options()

    @property
    def rule_class(self) -> type[MixingRule]:
        """The rule ``rule`` names."""
        return RULES[self.rule]

    def rule_options(self) -> object:
        """``options`` as the rule's ``Options`` dataclass (a :class:`ConfigError` keyed ``options.…`` if wrong)."""
        return build(self.rule_class.Options, self.options, ("options",))

    def check_sources(self, names: tuple[str, ...]) -> None:
        """Refuse a floor that S sources cannot all have, or rule options that do not fit the sources ``names``."""
        if self.floor * len(names) >= 1:
            raise ConfigError(f"floor {self.floor} for {len(names)} sources leaves no weight to move (S·floor must be "
                              f"< 1); lower it below {1 / len(names):.3g}", "floor")
        try:
            self.rule_class.check(self.rule_options(), names)
        except ConfigError as failure:
            raise ConfigError(failure.problem, f"options.{failure.key}") from None
