"""Kernel benchmarks: each of the trainer's hand-written GPU kernels beside what it replaces and a device copy of the
same bytes, at the ``1.3b`` preset's shapes, with a sweep of its launch shapes (one H200)."""
