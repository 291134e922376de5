"""Every hand-written GPU kernel of the trainer, each a torch op with its formula in tensor code beside it.

Contract: an op computes what its formula computes (tests hold the kernel to it, under Triton's interpreter on the
CPU and compiled on CUDA); off CUDA, or where Triton does not import, the formula runs. The Triton code lives in
``triton_kernels/``, imported on first use (``ops.triton_kernels``); ``ops`` is the one place that decides which
runs. Modules: ``swiglu``, ``rotary`` (the SwiGLU and RoPE backwards, plain or cast to FP8), ``fp8_transpose``,
``fp8_cast`` (the cast and amax formulas), ``adamw`` (the optimizer's update), ``grad_norm``.
"""
