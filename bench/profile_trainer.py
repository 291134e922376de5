"""Where a training step's GPU time goes: profile ``trainer run`` at ``bench/train_h200.py``'s speed shape
and sum the kernels of the traced steps by family (GEMM, attention, Triton, optimizer, …).

    python3 bench/profile_trainer.py bf16,fp8:scaled_mm:tensorwise      # on the H200, data as train_h200's
    python3 bench/profile_trainer.py --trace some_trace.json            # summarise a Chrome trace

Each run entry is a ``train_h200.py --speed-runs`` entry. Steps 7-8 are traced (after compilation;
``--trace-steps 4-13`` for more); the summary gives the traced window, the GPU's busy time within it,
per-family totals, the longest idle gaps with the kernels around them, whether the host keeps ahead of the
compiled forward passes, and the top kernels; ``$OUT``
gets each run's log and gzipped trace. Profiled steps run a little slower than unprofiled ones: compare
families and busy time between runs, take tokens/s from ``train_h200.py``. The first ~2 ms of the window are
the GPU waiting for the host's first launches (copies, embedding, first block): tracing starts on a drained GPU
(a loop that kept the GPU fed across steps shows the same gap).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run by path: the repository's packages first
from bench.timing import results_folder  # noqa: E402
from bench.train_h200 import SPEED_SHAPE, parse_run, train, write_blend  # noqa: E402

#: Substrings of kernel names → family, first match wins (FP8 GEMMs: cuBLAS's ``nvjet_…_q…`` kernels; our
#: hand-written Triton kernels by their names: RoPE's backward, casting or not, ``rotary_backward_kernel``, is
#: ``triton``; the gradient norm's ``sum_of_squares_kernel`` is ``optimizer``, as torch's ``multi_tensor`` norms).
FAMILIES = (("attention", ("cudnn", "fmha", "flash", "sdpa")),
            ("optimizer", ("multi_tensor", "adam", "sum_of_squares")),
            ("gemm", ("nvjet", "gemm", "xmma", "cutlass", "cublas")),
            ("fp8 casts (triton)", ("scaled_mm",)), ("fp8 transposes", ("fp8_transpose",)),
            ("triton", ("triton", "swiglu", "rotary")), ("reduce", ("reduce",)))


def family(name: str) -> str:
    """The family of a kernel name (``other`` when no rule matches)."""
    lowered = name.lower()
    return next((label for label, keys in FAMILIES if any(key in lowered for key in keys)), "other")


def busy_time(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` intervals."""
    total, current_start, current_end = 0.0, None, None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            total += 0.0 if current_end is None else current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    return total + (0.0 if current_end is None else current_end - current_start)


def idle_gaps(gpu: list[dict], top: int) -> list[str]:
    """The ``top`` longest stretches with no GPU work, each named by the kernels around it (what the GPU
    waited for: Python, a host read, a launch), after the total idle time."""
    gaps, end, last, origin = [], None, None, min(e["ts"] for e in gpu)
    for event in sorted(gpu, key=lambda e: e["ts"]):
        if end is not None and event["ts"] > end:
            gaps.append((event["ts"] - end, end, last["name"][:60], event["name"][:60]))
        if end is None or event["ts"] + event["dur"] > end:
            end, last = event["ts"] + event["dur"], event
    lines = [f"  idle {sum(g[0] for g in gaps) / 1e3:.1f} ms in {len(gaps)} gaps; longest:"]
    return lines + [f"    {length / 1e3:6.2f} ms at +{(at - origin) / 1e3:7.1f} ms after {before!r} before {after!r}"
                    for length, at, before, after in sorted(gaps, reverse=True)[:top]]


def host_pace(events: list[dict]) -> str:
    """Whether the host keeps ahead of the GPU in the compiled forward passes: the median time between the
    starts of consecutive ``Torch-Compiled Region`` calls on the host (Dynamo's guards, AOTAutograd's wrappers,
    the launches) against the median GPU time of the kernels each call launched. Host time above GPU time
    means the GPU waits for Python."""
    regions = sorted((e for e in events if e.get("cat") == "cpu_op" and e["name"].startswith("Torch-Compiled Region")),
                     key=lambda e: e["ts"])
    if len(regions) < 2:
        return "  compiled regions: none traced"
    launches = {e["args"]["correlation"]: e["ts"] for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    kernels = [(launches[e["args"]["correlation"]], e["dur"]) for e in events
               if e.get("cat") == "kernel" and e.get("args", {}).get("correlation") in launches]
    apart = [b["ts"] - a["ts"] for a, b in zip(regions, regions[1:]) if b["ts"] - a["ts"] < 10_000]  # same pass
    gpu = [sum(dur for at, dur in kernels if r["ts"] <= at <= r["ts"] + r["dur"]) for r in regions]
    host, device = statistics.median(apart or [0.0]), statistics.median(gpu)
    verdict = "host-bound: the GPU waits for Python" if host > device else "the GPU is the bottleneck"
    return (f"  compiled regions: {len(regions)} calls, {host / 1e3:.2f} ms apart on the host (median), "
            f"{device / 1e3:.2f} ms of GPU kernels each: {verdict}")


def summarise(trace: Path, top: int = 25) -> str:
    """Busy time, per-family totals and the ``top`` kernels of a torch.profiler Chrome trace (ms)."""
    events = json.loads(trace.read_text())["traceEvents"]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e]
    start, end = min(e["ts"] for e in gpu), max(e["ts"] + e["dur"] for e in gpu)
    busy = busy_time([(e["ts"], e["ts"] + e["dur"]) for e in gpu])
    families, kernels = collections.Counter(), collections.defaultdict(lambda: [0, 0.0])
    for event in gpu:
        label = family(event["name"]) if event["cat"] == "kernel" else event["cat"]
        families[label] += event["dur"]
        kernels[(label, event["name"][:110])][0] += 1
        kernels[(label, event["name"][:110])][1] += event["dur"]
    lines = [f"{trace.name}: window {(end - start) / 1e3:.1f} ms, GPU busy {busy / 1e3:.1f} ms "
             f"({100 * busy / (end - start):.1f}%), {len(gpu)} kernels"]
    lines += [f"  {label:20} {total / 1e3:9.1f} ms" for label, total in families.most_common()]
    lines += idle_gaps(gpu, top // 3)
    lines.append(host_pace(events))
    lines += [f"    {total / 1e3:8.2f} ms {count:5d}x {label:20} {name}"
              for (label, name), (count, total) in sorted(kernels.items(), key=lambda kv: -kv[1][1])[:top]]
    return "\n".join(lines)


def profile(runs: str, out: Path, first: int, last: int) -> None:
    """Train and trace each run entry (steps ``first``–``last`` of ``last + 1``), print its summary, keep its
    trace in ``out``."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        write_blend(folder)
        for spec in runs.split(","):
            tag, flags = parse_run(spec)
            traces = folder / f"profile_{tag}"
            common = [*SPEED_SHAPE, "--train-iters", str(last + 1), "--eval-iters", "0", "--lr", "1e-4", "--bf16",
                      "--profile", "--use-pytorch-profiler", "--profile-step-start", str(first),
                      "--profile-step-end", str(last + 1), "--profile-dir", str(traces)]
            result = train(tag, [*common, *flags], folder, 3, 300)
            print(tag, {key: value for key, value in result.items() if key != "evals"}, flush=True)
            for trace in sorted(traces.glob("*.json")):
                print(summarise(trace), flush=True)
                with trace.open("rb") as source, gzip.open(out / f"{tag}.trace.json.gz", "wb") as target:
                    shutil.copyfileobj(source, target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="?", default="bf16,fp8:scaled_mm:tensorwise", help="train_h200 run entries")
    parser.add_argument("--trace", type=Path, help="only summarise this Chrome trace (.json)")
    parser.add_argument("--trace-steps", default="7-8", help="first-last step traced (after compilation: from 3)")
    args = parser.parse_args()
    first, _, last = args.trace_steps.partition("-")
    if not (first.isdigit() and last.isdigit() and 3 <= int(first) <= int(last)):
        parser.error(f"--trace-steps {args.trace_steps!r}: give FIRST-LAST with 3 <= FIRST <= LAST, e.g. 4-13")
    if args.trace:
        print(summarise(args.trace))
        return
    profile(args.runs, results_folder(), int(first), int(last))


if __name__ == "__main__":
    main()
