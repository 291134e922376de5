"""Loader throughput at seq 4096 in one process: our BlendLoader vs megatron-core's BlendedDataset
through a torch DataLoader (num_workers=0, no dense attention mask), same blend, same sample flags.

    PYTHONPATH=. python bench/loader.py [--samples 20000] [--micro-batch 8] [--workdir /tmp/blendforge-bench-loader]

Maps are built before timing. Target: >= 10 million tokens/s (the loader must never slow a GPU).
Prints a table last.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run by path: the repository's packages first

import torch  # noqa: E402

from bench._blend_fixtures import MegatronTokenizer, init_gloo, write_source  # noqa: E402
from corpus.blending.datasets import SampleCounts  # noqa: E402
from corpus.blending.loader import BlendLoader, build_datasets  # noqa: E402
from corpus.blending.schema import blend_from_dict  # noqa: E402

SEQ = 4096
FLAGS_OFF = {"eod_mask_loss": False, "reset_position_ids": False, "reset_attention_mask": False}
DOCUMENT_FLAGS = {"eod_mask_loss": True, "reset_position_ids": True, "reset_attention_mask": True}


def _ours(work: Path, samples: int, micro_batch: int, samples_options: dict) -> float:
    blend = {"seq_length": SEQ, "seed": 1234, "split": "100,0,0", "cache_dir": "ours-cache",
             "samples": samples_options, "sources": [{"name": "web", "prefix": "web", "weight": 0.7},
                                                     {"name": "code", "prefix": "code", "weight": 0.3}]}
    train, _, _, info = build_datasets(blend_from_dict(blend, base_dir=work), SampleCounts(samples))
    loader = BlendLoader(train, micro_batch, blend_fingerprint=info.fingerprint)
    start = time.perf_counter()
    tokens = sum(batch["tokens"].numel() for batch in loader)
    return tokens / (time.perf_counter() - start)


def _megatron(work: Path, samples: int, micro_batch: int, document_options: dict) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
        from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    init_gloo(work)
    config = GPTDatasetConfig(random_seed=1234, sequence_length=SEQ,
                              blend=([str(work / "web"), str(work / "code")], [0.7, 0.3]), split="100,0,0",
                              tokenizer=MegatronTokenizer(), create_attention_mask=False,
                              path_to_cache=str(work / "megatron-cache"), **{**FLAGS_OFF, **document_options})
    train = BlendedMegatronDatasetBuilder(GPTDataset, [samples, 0, 0], lambda: True, config).build()[0]
    loader = torch.utils.data.DataLoader(train, batch_size=micro_batch, num_workers=0, drop_last=True)
    start = time.perf_counter()
    tokens = sum(batch["tokens"].numel() for batch in loader)
    return tokens / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/blendforge-bench-loader"))
    args = parser.parse_args()
    write_source(args.workdir / "web", 60_000, 900, seed=1)
    write_source(args.workdir / "code", 30_000, 700, seed=2)
    run = (args.workdir, args.samples, args.micro_batch)
    rows = [("plain samples", _ours(*run, {}), _megatron(*run, {})),
            ("+ EOD loss mask, position reset, document boundaries", _ours(*run, DOCUMENT_FLAGS),
             _megatron(*run, DOCUMENT_FLAGS))]
    print(f"\nseq {SEQ}, micro-batch {args.micro_batch}, {args.samples:,} samples, one process, cpus {os.cpu_count()}, "
          f"load {os.getloadavg()[0]:.1f}, torch {torch.__version__}; Mtokens/s")
    print(f"{'samples':<54} {'BlendLoader':>12} {'mcore+DataLoader':>17} {'ratio':>7}")
    for name, ours, theirs in rows:
        print(f"{name:<54} {ours / 1e6:>12.1f} {theirs / 1e6:>17.1f} {ours / theirs:>6.1f}x")


if __name__ == "__main__":
    main()
