"""What sits below the model for tensor, pipeline and data parallelism: where this process sits in the TP × PP × DP
grid and its process groups (``state``), the autograd-correct TP/SP collectives the layers call (``collectives``)
and the cross-entropy over vocabulary-parallel logits (``vocab_cross_entropy``). Nothing here knows the model."""
