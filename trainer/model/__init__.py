"""The Llama-style GPT (``gpt``) and its parts: tensor-parallel linears, embedding and norms (``layers``), attention
kernels behind one signature (``attention``), RoPE on the fused QKV output (``rotary``), SwiGLU (``swiglu``) and the
fused chunked output layer + loss (``fused_loss``). Layers hold their TP shard; the local GEMM is a registry entry
(``layers.GEMMS``), so an FP8 backend replaces it without touching the model."""
