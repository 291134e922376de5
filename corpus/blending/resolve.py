"""A validated blend bound to its files: sources found and indexed, tokenizer and dtype agreement
checked across sources and against the blend's ``tokenizer``, and the facts the trainer needs
(vocabulary size, tokenizer record, EOD id, a fingerprint of everything that decides the samples).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass

import numpy as np

from corpus import storage
from corpus.blending.index_maps import SPLIT_NAMES
from corpus.blending.map_cache import MapCache, cache_key
from corpus.blending.schema import BlendConfig, fingerprint_fields
from corpus.blending.sources import Source, load_source
from corpus.core.errors import ConfigError, UserError
from corpus.indexed import sidecar
from corpus.tokenizers.base import tokenizer_files
from corpus.tokenizers.config import TokenizerConfig, config_from_record
from corpus.tokenizers.decode import cached_tokenizer
from corpus.tokenizers.match import data_mismatch

log = logging.getLogger(__name__)


@dataclass
class ResolvedBlend:
    """A blend whose sources are open. ``sources[split]`` lists the sources feeding each split."""

    config: BlendConfig
    cache: MapCache
    sources: dict[str, list[Source]]
    keys: dict[str, list[str]]
    """The key path of each source in the blend file (for messages)."""
    dtype: np.dtype
    tokenizer: dict | None
    """The tokenizer record of the sources' ``.meta.json`` (type, path, options, fingerprint)."""
    vocab_size: int | None
    eod_id: int | None
    fingerprint: str
    """sha256 of what decides the samples: sources (their lengths and tokenizer), weights, schedule or mixing, split,
    seq_length, seed, sample options, packing. Stored in loader state to refuse resuming against another blend."""
    pad_id: int = 0
    """The id fed at padding positions (see :class:`~corpus.blending.schema.SampleOptions`)."""

    def all_sources(self) -> list[tuple[str, Source]]:
        """(key, source) for every distinct source, in blend order."""
        seen, result = set(), []
        for split in SPLIT_NAMES:
            for key, source in zip(self.keys.get(split, []), self.sources.get(split, [])):
                if id(source) not in seen:
                    seen.add(id(source))
                    result.append((key, source))
        return result

    def recorded_eod_id(self) -> int | None:
        """The EOD id the sources' ``.meta.json`` record (the first that records one), else None."""
        return next((source.info.eod_id for _, source in self.all_sources() if source.info.eod_id is not None), None)


def resolve_blend(config: BlendConfig, tokenizer_eod: int | None = None) -> ResolvedBlend:
    """Open every source of ``config`` and check them; raises ConfigError naming file, key and fix.
    ``tokenizer_eod`` is the EOD id of the data's tokenizer when a caller knows it from elsewhere (the trainer's
    tokenizer flags): it serves where neither ``samples.eod_id`` nor a sidecar gives one, before the blend's
    ``tokenizer:``."""
    storage.configure(config.storage_options)
    cache = MapCache(config.resolve_path(config.cache_dir) if config.cache_dir else None)
    loaded: dict[str, Source] = {}
    sources: dict[str, list[Source]] = {}
    keys: dict[str, list[str]] = {}
    for split in SPLIT_NAMES:
        for index, source_config in enumerate(config.split_sources(split)):
            key = config.source_key(split, index)
            spec = config.resolve_path(source_config.prefix)
            if spec not in loaded:
                try:
                    loaded[spec] = load_source(source_config.name, spec, cache)
                except ConfigError as error:  # keyed relative to the source
                    raise config.error(error.problem, f"{key}.{error.key}") from None
            sources.setdefault(split, []).append(loaded[spec])
            keys.setdefault(split, []).append(key)
    resolved = ResolvedBlend(config, cache, sources, keys, np.dtype(np.int32), None, None, None, "")
    _check_agreement(resolved)
    _check_expected_tokenizer(resolved)
    _fill_facts(resolved, tokenizer_eod)
    return resolved


def _check_agreement(resolved: ResolvedBlend) -> None:
    """One dtype and one tokenizer across all sources; warn about sources without a sidecar."""
    pairs = resolved.all_sources()
    first_key, first = pairs[0]
    for key, source in pairs[1:]:
        if source.info.dtype != first.info.dtype:
            raise resolved.config.error(
                f"token dtype {source.info.dtype} differs from {first_key} ({first.name}: {first.info.dtype}); "
                "a blend's sources must be tokenized with the same tokenizer", f"{key}.prefix")
    known = [(key, s) for key, s in pairs if s.info.tokenizer_identity is not None]
    for key, source in known[1:]:
        if source.info.tokenizer_identity != known[0][1].info.tokenizer_identity:
            raise resolved.config.error(
                f"tokenized with {source.info.tokenizer_identity[:2]} but {known[0][0]} ({known[0][1].name}) with "
                f"{known[0][1].info.tokenizer_identity[:2]}; re-tokenize one of them with the other's tokenizer",
                f"{key}.prefix")
    for key, source in pairs:
        if source.info.missing_sidecars:
            log.warning("%s (%s): %d of %d shard(s) have no .meta.json (e.g. %s; written by Megatron?): their "
                        "tokenizer cannot be checked", key, source.name, source.info.missing_sidecars,
                        source.info.num_shards, source.info.missing_example)


def _expected_fingerprint(resolved: ResolvedBlend) -> str | None:
    """The fingerprint ``corpus tokenize`` records for the tokenizer the blend's ``tokenizer:`` names (None when it
    names no file); a file that is missing or cannot be read is an error at its key."""
    spec, config = resolved.config.tokenizer, resolved.config
    for name, value in spec.files.items():
        path = config.resolve_path(value)
        if not os.path.exists(path):
            raise config.error(f"{path}: no such tokenizer file; point it at the tokenizer the data was made with",
                               f"tokenizer.{spec.key(name)}")
    if not spec.files:
        return None
    try:
        return sidecar.fingerprint_files(tokenizer_files(spec.config(config.resolve_path)))
    except UserError as error:
        raise config.error(str(error), f"tokenizer.{spec.key(next(iter(spec.files)))}") from None


def _check_expected_tokenizer(resolved: ResolvedBlend) -> None:
    """The blend's ``tokenizer`` against every source's sidecar (type or family, then the files' fingerprint), by
    the one rule of :func:`~corpus.tokenizers.match.data_mismatch`."""
    spec, config = resolved.config.tokenizer, resolved.config
    if spec is None:
        return
    fingerprint = _expected_fingerprint(resolved)
    for key, source in resolved.all_sources():
        record = source.info.tokenizer or {}
        mismatch = data_mismatch(record, spec.name, fingerprint)
        if mismatch is not None and mismatch.aspect == "type":
            where = f"tokenizer.{spec.key('type')}"
            raise config.error(f"{source.name} was tokenized with {mismatch.recorded}, not {spec.name}; fix {where} "
                               "or re-tokenize the source", where)
        if mismatch is not None:
            named = next(iter(spec.files))
            raise config.error(f"{spec.files[named]} is not the tokenizer {source.name} ({key}) was made with (its "
                               f".meta.json records {record.get('model') or record.get('path') or 'another file'}, "
                               f"sha256 {mismatch.recorded[:12]}…, this file is {mismatch.expected[:12]}…)",
                               f"tokenizer.{spec.key(named)}")


def _fill_facts(resolved: ResolvedBlend, tokenizer_eod: int | None) -> None:
    config = resolved.config
    infos = [s.info for _, s in resolved.all_sources()]
    resolved.dtype = infos[0].dtype
    resolved.tokenizer = next((i.tokenizer for i in infos if i.tokenizer), None)
    resolved.vocab_size = next((i.vocab_size for i in infos if i.vocab_size is not None), None)
    resolved.eod_id = next((eod for eod in (config.samples.eod_id, resolved.recorded_eod_id(), tokenizer_eod)
                            if eod is not None), None)
    if resolved.eod_id is None and config.tokenizer is not None:
        resolved.eod_id = _named_eod(resolved)
    if config.samples.needs_eod and resolved.eod_id is None:
        raise config.error("eod_mask_loss/reset_position_ids/reset_attention_mask need the EOD id, and no source's "
                           ".meta.json records one; set samples.eod_id, or name the data's tokenizer (tokenizer: in "
                           "the blend, --tokenizer-type on trainer run)", "samples.eod_id")
    resolved.pad_id = _pad_id(resolved, infos)
    material = {
        "sources": {split: [[s.digest, s.info.tokenizer_identity, c.weight]
                            for s, c in zip(resolved.sources.get(split, []), config.split_sources(split))]
                    for split in SPLIT_NAMES},
        "split": config.effective_split, "seq_length": config.seq_length, "seed": config.seed,
        "samples": {**fingerprint_fields(config.samples, config), "eod_id": resolved.eod_id},
    }
    if config.schedule is not None:
        material["schedule"] = [dataclasses.asdict(phase) for phase in config.schedule]
    if config.mixing is not None:
        material["mixing"] = dataclasses.asdict(config.mixing)
    del material["samples"]["pad_id"]  # NOTE: concat never pads; a blend's fingerprint stays what it was
    if config.packing != "concat":
        material.update(packing=config.packing, packing_window=config.packing_window, pad_id=resolved.pad_id)
    material.update(fingerprint_fields(config, config))
    resolved.fingerprint = cache_key(material)


def _named_eod(resolved: ResolvedBlend) -> int | None:
    """The EOD id of the tokenizer the blend's ``tokenizer:`` names, for data whose sidecars record none (written
    by Megatron), as Megatron's ``pretrain_gpt.py`` takes ``tokenizer.eod``."""
    named = blend_tokenizer(resolved)
    try:
        return cached_tokenizer(named).eod
    except UserError as error:
        raise resolved.config.error(str(error), "tokenizer") from None


def _pad_id(resolved: ResolvedBlend, infos: list) -> int:
    """``samples.pad_id``, else the sidecars' pad id, else the EOD id, else 0; inside the vocabulary."""
    config = resolved.config
    recorded = next((i.pad_id for i in infos if i.pad_id is not None), None)
    pad = next((p for p in (config.samples.pad_id, recorded, resolved.eod_id) if p is not None), 0)
    if resolved.vocab_size is not None and not 0 <= pad < resolved.vocab_size:
        origin = "samples.pad_id" if config.samples.pad_id is not None else "the sources' .meta.json"
        raise config.error(f"pad id {pad} (from {origin}) is outside the vocabulary of {resolved.vocab_size} ids; "
                           f"set samples.pad_id to an id below {resolved.vocab_size}", "samples.pad_id")
    return pad


def blend_tokenizer(resolved: ResolvedBlend) -> TokenizerConfig | None:
    """The tokenizer the blend's data was made with: the one the sources' sidecars record, else the blend's
    ``tokenizer:`` (data written by Megatron has no sidecar); None when neither names one. A named
    tokenizer that cannot be rebuilt is a :class:`UserError` saying why."""
    spec = resolved.config.tokenizer
    if resolved.tokenizer is not None:
        try:
            return config_from_record(resolved.tokenizer)
        except UserError:
            if spec is None:
                raise
    if spec is None:
        return None
    try:
        return spec.config(resolved.config.resolve_path)
    except UserError as error:
        raise resolved.config.error(str(error), "tokenizer") from None
