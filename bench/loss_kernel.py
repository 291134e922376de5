"""The fused loss's per-chunk step: the one-pass Triton kernel (``trainer/loss_kernel.py``) beside Inductor's compile of
the same formula (``trainer.cross_entropy.chunk_loss_and_grad``, what ``--compile`` ran before) and a device copy of
the logits (one read and one write of them: the least this step can move).

    python3 bench/loss_kernel.py                   # one H200: the default launch and a sweep of warps

One chunk of the ``1.3b`` preset's fused loss: 4,096 tokens × 32,768 bf16 logits (256 MiB), a quarter of a
micro-batch of 4 × 4,096 tokens. Printed: milliseconds per chunk (back-to-back calls), TB/s over the logits read and
the gradient written, and the compiled formula's time over ours, measured side by side in this one run, with both
results' differences from an fp64 reference. ``$OUT/loss_kernel.json`` gets every number.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.adamw_kernel import median_ms, per_call_microseconds, warm_up, write_results  # noqa: E402
from trainer import loss_kernel  # noqa: E402
from trainer.cross_entropy import chunk_loss_and_grad, chunk_rows  # noqa: E402


def reference(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Loss sum and gradient in fp64."""
    wide = logits.double()
    lse = torch.logsumexp(wide, dim=-1)
    loss = ((lse - wide.gather(1, labels[:, None]).squeeze(1)) * mask).sum()
    grad = torch.softmax(wide, dim=-1)
    grad[torch.arange(len(labels)), labels] -= 1
    return loss, grad * mask[:, None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--warps", default="8,16", help="warps per program to time besides the default")
    args = parser.parse_args()
    warm_up()
    tokens = chunk_rows(args.vocab_size)
    logits = (torch.randn(tokens, args.vocab_size, device="cuda") * 3).bfloat16()
    labels = torch.randint(0, args.vocab_size, (tokens,), device="cuda")
    mask = (torch.rand(tokens, device="cuda") > 0.1).float()
    moved = 2 * logits.numel() * logits.element_size()
    want_loss, want_grad = reference(logits, labels, mask)

    def difference(loss: torch.Tensor, grad: torch.Tensor) -> str:
        return f"loss {abs(float(loss) / float(want_loss) - 1):.1e}, grad {float((grad - want_grad).abs().max()):.1e}"

    compiled = torch.compile(chunk_loss_and_grad, dynamic=False)
    candidates = {f"ours, {loss_kernel.NUM_WARPS} warps (default)": loss_kernel.NUM_WARPS}
    candidates.update({f"ours, {w} warps": int(w) for w in args.warps.split(",") if w})
    results: dict[str, float] = {}
    errors: dict[str, str] = {}
    for label, warps in candidates.items():
        loss, grad = loss_kernel.one_pass_chunk_loss(logits.clone(), labels, mask, True, num_warps=warps)
        errors[label] = difference(loss, grad)
        scratch = logits.clone()  # NOTE: overwritten with gradients call after call: the timing does not care
        results[label] = per_call_microseconds(
            lambda: loss_kernel.one_pass_chunk_loss(scratch, labels, mask, True, num_warps=warps)) / 1000
    loss, grad = compiled(logits, labels, mask, True)
    errors["compiled formula"] = difference(loss, grad)
    results["compiled formula"] = per_call_microseconds(lambda: compiled(logits, labels, mask, True)) / 1000
    target = torch.empty_like(logits)
    results["device copy of the logits"] = median_ms(lambda: target.copy_(logits), 20)

    default_label = next(iter(results))
    print(f"one chunk: {tokens} tokens x {args.vocab_size} bf16 logits ({logits.numel() * 2 / 2**20:.0f} MiB)")
    for label, ms in results.items():
        error = f"  vs fp64: {errors[label]}" if label in errors else ""
        print(f"  {label:32s} {ms:7.3f} ms  {moved / ms / 1e9:5.2f} TB/s (logits in + out){error}")
    best = min((label for label in results if label.startswith("ours")), key=results.get)
    print(f"compiled formula / ours default: {results['compiled formula'] / results[default_label]:.2f}x; best launch "
          f"{best!r}: {results['compiled formula'] / results[best]:.2f}x")
    write_results("loss_kernel", results)


if __name__ == "__main__":
    main()
