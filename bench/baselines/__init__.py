"""The GPU baselines the trainer is compared with, at its speed shape (the ``1.3b`` preset: 24 layers, d=2048,
16 heads, FFN 5632, vocabulary 32768, seq 4096, micro-batch 4, fused AdamW, bf16 autocast): a Llama-style GPT in
plain PyTorch (``torch_gpt.py``: eager, ``torch.compile``, ``torch.compile`` + torchao FP8) and the same shape built
from Transformer Engine's ``te.TransformerLayer`` (``te_gpt.py``: bf16, FP8 delayed scaling, FP8 current scaling),
what a Megatron-core + TE user runs. ``bench/train_h200.py --phases baseline`` runs both beside the trainer."""
