"""Tensor, sequence, pipeline and data parallelism of the trainer (DESIGN §5); see trainer/README.md."""
