"""Benchmarks (scripts that print ratios measured side by side and a short table last)."""
