"""Sharding for many machines: which contiguous slice of the input one process tokenizes.

With at least as many files as shards, each shard takes whole consecutive files, balanced by size.
With fewer files, the concatenated input is cut into equal byte ranges and a record belongs to the
range holding its position (a line's start, see :mod:`corpus.readers`), so ranges are line-aligned.
Either way the shards, in index order, are consecutive runs of the unsharded record stream: their
outputs concatenated (``corpus merge``) are byte for byte the unsharded output.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from corpus.core.errors import ConfigError
from corpus.readers import InputFile, Slice

#: Environment variables that name a process's rank and the world size, first match wins.
LAUNCHER_VARIABLES = (("SLURM_PROCID", "SLURM_NTASKS"), ("RANK", "WORLD_SIZE"))


@dataclass(frozen=True)
class Shard:
    """This process's shard and where the numbers came from (logged at start-up)."""

    index: int
    count: int
    source: str

    def prefix(self, output_prefix: str) -> str:
        """``P`` for an unsharded run, else ``P-{i:05d}-of-{n:05d}``."""
        return output_prefix if self.count == 1 else f"{output_prefix}-{self.index:05d}-of-{self.count:05d}"


def resolve_shard(index: int | None, count: int | None, environ: Mapping[str, str] = os.environ) -> Shard:
    """Explicit options win; else the first launcher pair set (Slurm, then torchrun); else 0 of 1."""
    source = "--shard-index/--num-shards"
    if index is None and count is None:
        for rank_name, size_name in LAUNCHER_VARIABLES:
            if rank_name in environ and size_name in environ:
                try:
                    index, count = int(environ[rank_name]), int(environ[size_name])
                except ValueError:
                    raise ConfigError(f"{rank_name}={environ[rank_name]!r}/{size_name}={environ[size_name]!r} are not "
                                      "integers") from None
                source = f"{rank_name}/{size_name}"
                break
        else:
            return Shard(0, 1, "default")
    if count is None:
        raise ConfigError("--shard-index needs --num-shards")
    index = 0 if index is None else index
    if count < 1 or not 0 <= index < count:
        raise ConfigError(f"shard index {index} of {count} is impossible (from {source}): need 0 <= index < count")
    return Shard(index, count, source)


def _file_groups(files: list[InputFile], count: int) -> list[list[int]]:
    """Cut the file list into ``count`` non-empty consecutive groups of about equal total size."""
    total = sum(f.size for f in files)
    cuts, before, start = [], 0, 0
    for shard in range(1, count):
        target = total * shard / count
        end = start + 1
        before += files[start].size
        left_for_rest = len(files) - (count - shard)
        while end < left_for_rest and abs(before + files[end].size - target) <= abs(before - target):
            before += files[end].size
            end += 1
        cuts.append(end)
        start = end
    bounds = [0, *cuts, len(files)]
    return [list(range(bounds[i], bounds[i + 1])) for i in range(count)]


def _byte_ranges(files: list[InputFile], shard: Shard) -> list[Slice]:
    """The slices of the files covering global bytes ``[i*T/n, (i+1)*T/n)`` of the concatenated input."""
    total = sum(f.size for f in files)
    low, high = shard.index * total // shard.count, (shard.index + 1) * total // shard.count
    slices, offset = [], 0
    for file in files:
        start, end = max(low - offset, 0), min(high - offset, file.size)
        if start < end:
            slices.append(Slice(file, start, end))
        offset += file.size
    return slices


def plan_slices(files: list[InputFile], shard: Shard) -> list[Slice]:
    """The slices this shard reads, in input order."""
    if shard.count == 1:
        return [Slice(f, 0, f.size) for f in files]
    if len(files) >= shard.count:
        return [Slice(files[i], 0, files[i].size) for i in _file_groups(files, shard.count)[shard.index]]
    return _byte_ranges(files, shard)
