"""The Triton kernels of :mod:`trainer.kernels`, one module per op family, each with its ``launch``; imported only
where a kernel runs (CUDA, or Triton's interpreter in the tests): CPU builds of torch come without Triton."""
