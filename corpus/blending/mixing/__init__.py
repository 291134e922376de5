"""Online mixing: train weights that follow the per-source losses during the run (``mixing:`` in a blend).

``config`` is the blend's ``mixing:`` key; ``rules`` the registry of update rules (Online Data Mixing's EXP3
bandit, a DoReMi-style excess-loss rule); ``mixer`` turns each step's per-source losses into weights every
``update_interval`` steps; ``draw`` decides each blended sample's source with the weights in force, by Megatron's
rule, as the run reads it. None of it imports torch: a training loop of one's own uses it as the trainer does
(docs/blends.md).
"""
