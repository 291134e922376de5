"""FP8 training: backends (Transformer Engine, torchao.float8, our own ``torch._scaled_mm`` linear) behind
the local-GEMM registry of :mod:`trainer.model.layers`, chosen once at start-up by :func:`select_fp8`. The casting
kernels they use (the SwiGLU and RoPE backwards writing FP8, the FP8 transposes) are in :mod:`trainer.kernels`.

| module | job |
|---|---|
| `spec.py` | what a backend is: its registry entry (`FP8Backend`) and what it builds for a run (`BackendParts`) |
| `scaling.py` | FP8 formats, dynamic per-tensor/per-row scaling (quantize, dequantize), the GEMM eligibility rule |
| `scaled_mm.py` | our FP8 linear: custom autograd functions on `torch._scaled_mm` (the `scaled_mm` backend) |
| `delayed.py` | delayed scaling for it: per-linear scales and amaxes, the once-a-step history update, calibration |
| `torchao_gemm.py` | the `torchao` backend: torchao.float8's autograd function behind our GEMM contract |
| `te_gemm.py` | the `te` backend: one `te.Linear` per weight sharing it, `te.autocast` around the forward pass |
| `backends.py` | `BACKENDS` (each module's `BACKEND`), `auto`/`torch` resolution, the hardware check, `select_fp8` |
"""

from trainer.fp8.backends import BACKENDS, FP8Engine, select_fp8

__all__ = ["BACKENDS", "FP8Engine", "select_fp8"]
