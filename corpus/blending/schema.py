"""Blend files: the one declaration of what the trainer reads, as typed, validated config.

::

    seq_length: 512
    seed: 1234
    split: "99,1,0"                       # shares of *sequences*, Megatron's rounding
    tokenizer: {type: huggingface, model: ../examples/tokenizer.json}
    cache_dir: /scratch/index_maps        # optional; default: corpus.core.cache.default_cache_dir()
    max_epochs: null                      # optional cap on passes over any source (1 = never repeat)
    packing: concat                       # optional: concat (Megatron's samples) or best_fit (whole documents)
    samples: {eod_mask_loss: false}       # optional, see SampleOptions
    sources:
      - {name: web,  prefix: data/web_text_document, weight: 0.7}
      - {name: code, prefix: "data/code/*_text_document", weight: 0.3, max_epochs: 4}

Instead of a weight per source, ``schedule:`` may give the train mix in phases (see
:mod:`corpus.blending.schedule`); the valid and test splits keep its first phase's mix. Or ``mixing:`` moves the
train weights during the run from the per-source losses, starting from the sources' weights
(:mod:`corpus.blending.mixing`); the valid and test splits keep the sources' weights.

``sources`` may instead map split names to their own lists (``{train: [...], valid: [...]}``,
Megatron's per-split blends; no ``split`` then). A source list without ``split`` is split as Megatron splits
``--data-path`` by default (:data:`DEFAULT_SPLIT`). Paths are relative to the YAML file's folder.
Weights are normalised; omitted everywhere = Megatron's rule (one epoch of each source).
This module checks the *shape* of a blend; :mod:`corpus.blending.sources` checks the files it names.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from corpus import storage
from corpus.blending.index_maps import SPLIT_NAMES
from corpus.blending.mixing.config import MixingConfig
from corpus.blending.schedule import PhaseConfig, check_schedule
from corpus.core.atomic_write import write_atomically
from corpus.core.disk import guard
from corpus.core.errors import ConfigError, parse_key
from corpus.core.typed_config import build, coerce, knob, read_yaml, yaml_fields
from corpus.tokenizers.config import TokenizerConfig, config_from_kind, tokenizer_knob
from corpus.tokenizers.registry import families, family_of, types_named

#: Megatron's ``--split`` default, used for a source list that gives no ``split`` (and for ``--data-path``).
DEFAULT_SPLIT = "969,30,1"

#: Field metadata of a path relative to the blend's folder: made absolute when the blend is saved.
PATH = {"path": True}
#: Field metadata of a key a saved blend leaves out while it holds its default.
OMITTED_AT_DEFAULT = {"omitted_at_default": True}
#: Field metadata of a key that changes the samples a blend gives: set to anything but its default, it enters the
#: blend's fingerprint (so a run resumed with another value is refused), and at its default it leaves the
#: fingerprint as it was (adding a key invalidates no run).
CHANGES_SAMPLES = {"changes_samples": True}

_SPLIT_PATTERN = re.compile(r"^\s*\d*\.?\d+(\s*,\s*\d*\.?\d+){0,2}\s*$")


def _naming_a_file(documented: dataclasses.Field) -> Any:
    """``documented`` (a :func:`knob` field) marked as naming a file relative to the blend's folder (:data:`PATH`)."""
    return field(default=documented.default, metadata={**documented.metadata, **PATH})


#: The keys of a tokenizer block that name files.
FILE_FIELDS = ("model", "vocab_file", "merge_file")
#: The older spelling of a tokenizer key, still accepted: ``{kind, path}``.
TOKENIZER_ALIASES = {"kind": "type", "path": "model"}


@dataclass(frozen=True)
class TokenizerSpec:
    """The tokenizer every source must have been written with (checked against ``.meta.json``): the keys of
    :class:`~corpus.tokenizers.config.TokenizerConfig` that name it, paths relative to the blend's folder.
    ``kind``/``path`` are the older spellings of ``type``/``model``."""

    type: str | None = tokenizer_knob(
        "type", "A --tokenizer-type name, or a family (huggingface, sentencepiece, tiktoken, gpt2, null): then the "
        "sources may have been written by any type of it.")
    model: str | None = _naming_a_file(tokenizer_knob("model"))
    vocab_file: str | None = _naming_a_file(tokenizer_knob("vocab_file"))
    merge_file: str | None = _naming_a_file(tokenizer_knob("merge_file"))
    vocab_size: int | None = tokenizer_knob("vocab_size")
    kind: str | None = knob(None, "The older spelling of type.")
    path: str | None = _naming_a_file(knob(None, "The older spelling of model."))

    def __post_init__(self) -> None:
        for old, new in TOKENIZER_ALIASES.items():
            if getattr(self, old) is not None and getattr(self, new) is not None:
                raise ConfigError(f"give {new} or {old} (its older spelling), not both", old)
        if self.name is None:
            raise ConfigError("missing required key 'type' (a --tokenizer-type name or a family)", "type")
        if family_of(self.name) is None:
            raise ConfigError(f"unknown tokenizer kind {self.name!r}; use one of {', '.join(families())} (or a "
                             "--tokenizer-type name)", self.key("type"))
        if not self.files and any(name in FILE_FIELDS for name in types_named(self.name)[0].needs):
            raise ConfigError("a tokenizer needs a path (the tokenizer file the data was made with)", self.key("model"))

    @property
    def name(self) -> str | None:
        """The type or family named, whichever spelling gave it."""
        return self.type or self.kind

    @property
    def files(self) -> dict[str, str]:
        """The tokenizer's files as given (``model``, ``vocab_file``, ``merge_file``), relative to the blend."""
        named = {"model": self.model or self.path, "vocab_file": self.vocab_file, "merge_file": self.merge_file}
        return {name: value for name, value in named.items() if value is not None}

    def key(self, name: str) -> str:
        """The key ``name`` (``type``, ``model``) as this block spells it (a block in the older spelling has its
        missing keys named in that spelling too), for messages."""
        old = next((old for old, new in TOKENIZER_ALIASES.items() if new == name), None)
        older = any(getattr(self, alias) is not None for alias in TOKENIZER_ALIASES)
        return old if old is not None and (getattr(self, old) is not None or older and getattr(self, name) is None) \
            else name

    def config(self, resolve_path: Callable[[str], str]) -> TokenizerConfig:
        """The tokenizer this block names, its files resolved with ``resolve_path`` (:func:`config_from_kind`)."""
        files = {name: resolve_path(value) for name, value in self.files.items()}
        return config_from_kind(self.name, **files, vocab_size=self.vocab_size)


@dataclass(frozen=True)
class SourceConfig:
    """One source: a dataset prefix, or a glob of shard prefixes acting as one concatenated file."""

    name: str
    """Shown in dry runs and sample dumps; unique within a list."""
    prefix: str = field(metadata=PATH)
    """``data/web_text_document`` or ``"data/code/*_text_document"`` (relative to the blend's folder)."""
    weight: float | None = None
    """Relative weight (> 0, normalised). Omit on every source for Megatron's one-epoch rule."""
    max_epochs: int | None = None
    """Refuse plans that pass over this source more often than this (1 = never repeat data)."""

    def __post_init__(self) -> None:
        if not self.name.strip():
            raise ConfigError("empty source name; give each source a short name", "name")
        if not self.prefix.strip():
            raise ConfigError("empty prefix; give the path of a .bin/.idx pair without extension, or a glob", "prefix")
        if self.weight is not None and not (self.weight > 0 and math.isfinite(self.weight)):
            raise ConfigError(f"{self.weight} is not a positive number; give a weight > 0 (weights are normalised)",
                              "weight")
        if self.max_epochs is not None and self.max_epochs < 1:
            raise ConfigError(f"max_epochs {self.max_epochs} must be >= 1", "max_epochs")


@dataclass(frozen=True)
class SampleOptions:
    """What each sample carries besides its tokens (Megatron's GPTDatasetConfig names)."""

    add_extra_token_to_sequence: bool = True
    """Draw S + 1 tokens so inputs and labels are both S long (Megatron's default). False: S tokens,
    the last label is masked."""
    eod_mask_loss: bool = False
    """Zero the loss where the input token is the EOD token."""
    reset_position_ids: bool = False
    """Restart position ids after every EOD token (document-wise positions)."""
    reset_attention_mask: bool = False
    """Emit ``cu_seqlens`` (document boundaries after each EOD) for document-masked attention."""
    eod_id: int | None = None
    """The EOD id; default: the one recorded in the sources' ``.meta.json``."""
    pad_id: int | None = None
    """The id fed at padding positions (``packing: best_fit``; never a target); default: the sidecars'
    ``pad_id``, else the EOD id, else 0. Must lie inside the vocabulary."""

    def __post_init__(self) -> None:
        if self.pad_id is not None and self.pad_id < 0:
            raise ConfigError(f"pad_id {self.pad_id} is negative; give a token id of the vocabulary (or omit it: "
                              "the EOD id is used)", "pad_id")

    @property
    def extra_token(self) -> int:
        """1 when samples carry the extra label token, else 0 (Megatron's integer use of the flag)."""
        return int(self.add_extra_token_to_sequence)

    @property
    def needs_eod(self) -> bool:
        """Whether any option needs the EOD id."""
        return self.eod_mask_loss or self.reset_position_ids or self.reset_attention_mask


#: ``packing`` values: how a source's documents become samples (see docs/packing.md).
PACKINGS = ("concat", "best_fit")
#: Documents best-fit packing sorts and places together: large enough that the bins left part-filled at the
#: end of a window are a small share of the window's samples (bench/RESULTS.md), small enough to stay in cache.
DEFAULT_PACKING_WINDOW = 20_000

Sources = typing.Union[tuple[SourceConfig, ...], dict[str, tuple[SourceConfig, ...]]]


@dataclass(frozen=True)
class BlendConfig:
    """A whole blend. Every YAML key maps onto a field; ``origin``/``base_dir`` are set by the loader."""

    seq_length: int
    """Tokens per sample (inputs); the trainer's ``--seq-length`` overrides it."""
    sources: Sources
    """A list of sources split by ``split``, or ``{train: [...], valid: [...], test: [...]}``."""
    split: str | None = None
    """Train/valid/test shares of each source's sequences, e.g. ``"99,1,0"`` (list form only; default
    :data:`DEFAULT_SPLIT`, see :attr:`effective_split`)."""
    seed: int = 1234
    """Seed of every shuffle (Megatron's ``--seed``)."""
    tokenizer: TokenizerSpec | None = None
    """The expected tokenizer; every source's ``.meta.json`` must agree with it."""
    cache_dir: str | None = field(default=None, metadata=PATH)
    """Where index maps are cached (relative to the blend's folder, or a URL shared by every node); the default is
    in docs/blends.md."""
    storage_options: dict[str, Any] | None = None
    """Options of the filesystem behind ``s3://`` (and other URL) prefixes and ``cache_dir``, e.g.
    ``{endpoint_url: …}``; endpoint, credentials and region otherwise come from the standard AWS variables."""
    max_epochs: int | None = None
    """Default ``max_epochs`` for sources that set none."""
    samples: SampleOptions = field(default_factory=SampleOptions)
    """Sample contents (loss mask, positions, document boundaries)."""
    packing: str = field(default="concat", metadata=OMITTED_AT_DEFAULT)
    """``concat``: documents back to back, cut every S + 1 tokens (Megatron's GPTDataset, bit for bit);
    ``best_fit``: whole documents placed into samples by best-fit decreasing, the rest padded, every sample
    carrying its document boundaries."""
    packing_window: int = field(default=DEFAULT_PACKING_WINDOW, metadata=OMITTED_AT_DEFAULT)
    """``best_fit``: how many documents (in shuffled order) are sorted and packed together."""
    schedule: tuple[PhaseConfig, ...] | None = None
    """The train mix in phases, instead of a weight per source (:mod:`corpus.blending.schedule`); the valid and
    test splits of a source list keep its first phase's mix."""
    mixing: MixingConfig | None = None
    """Train weights moved during the run by a rule fed with the per-source losses, from the sources' weights
    (:mod:`corpus.blending.mixing`)."""
    origin: str | None = field(default=None, metadata={"yaml": False}, compare=False)
    """The file this came from (for messages)."""
    base_dir: str = field(default=".", metadata={"yaml": False})
    """Folder relative paths are resolved against."""

    def __post_init__(self) -> None:
        if self.seq_length < 2:
            raise ConfigError(f"seq_length {self.seq_length} must be at least 2", "seq_length")
        if not 0 <= self.seed < 2**32:
            raise ConfigError(f"seed {self.seed} must be in [0, 2**32) (numpy's RandomState)", "seed")
        if self.max_epochs is not None and self.max_epochs < 1:
            raise ConfigError(f"max_epochs {self.max_epochs} must be >= 1", "max_epochs")
        if self.packing not in PACKINGS:
            raise ConfigError(f"{self.packing!r} is not a packing; write packing: concat (Megatron's samples) or "
                              "packing: best_fit (whole documents, padded)", "packing")
        if self.packing_window < 1:
            raise ConfigError(f"packing_window {self.packing_window} must be at least 1 (documents packed together; "
                              f"default {DEFAULT_PACKING_WINDOW})", "packing_window")
        if isinstance(self.sources, dict):
            self._check_per_split()
        else:
            if self.split is not None:
                self._check_split_string()
            _check_source_list(self.sources, "sources")
        if self.schedule is not None:
            self._check_schedule()
        if self.mixing is not None:
            self._check_mixing()

    @property
    def effective_split(self) -> str | None:
        """The shares in effect: ``split``, else :data:`DEFAULT_SPLIT` for a source list (None for per-split
        lists, which are used whole)."""
        if isinstance(self.sources, dict):
            return None
        return self.split if self.split is not None else DEFAULT_SPLIT

    def _check_split_string(self) -> None:
        if not _SPLIT_PATTERN.match(self.split) or not sum(float(x) for x in self.split.split(",")) > 0:
            raise ConfigError(f"{self.split!r} is not a split; write up to three shares like \"99,1,0\" "
                              "(train, valid, test; at least one > 0)", "split")

    def _check_per_split(self) -> None:
        if self.split is not None:
            raise ConfigError("'split' cannot be used with per-split source lists; remove it (each list is "
                              "used whole for its split)", "split")
        for name, sources in self.sources.items():
            if name not in SPLIT_NAMES:
                raise ConfigError(f"unknown split {name!r}; per-split lists are named {', '.join(SPLIT_NAMES)}",
                                  f"sources.{name}")
            _check_source_list(sources, f"sources.{name}")

    def _check_schedule(self) -> None:
        train = self.split_sources("train")
        key = "sources.train" if isinstance(self.sources, dict) else "sources"
        if not train:
            raise ConfigError("a schedule mixes the train sources, and there are none; add a 'train' list or remove "
                              "the schedule", key)
        for index, source in enumerate(train):
            if source.weight is not None:
                raise ConfigError("the schedule gives the train weights; remove this weight (or the schedule)",
                                  f"{key}[{index}].weight")
        check_schedule(self.schedule, tuple(source.name for source in train))

    def _check_mixing(self) -> None:
        if self.schedule is not None:
            raise ConfigError("a blend has a schedule or online mixing, not both; remove one of them", "mixing")
        train = self.split_sources("train")
        key = "sources.train" if isinstance(self.sources, dict) else "sources"
        if not train:
            raise ConfigError("online mixing mixes the train sources, and there are none; add a 'train' list or "
                              "remove mixing", key)
        if len(train) < 2:
            raise ConfigError("online mixing needs at least two train sources to move weights between; add one or "
                              "remove mixing", key)
        if train[0].weight is None:
            raise ConfigError("online mixing starts from the sources' weights (its prior); give every train source a "
                              "weight", f"{key}[0].weight")
        try:
            self.mixing.check_sources(tuple(source.name for source in train))
        except ConfigError as failure:
            raise ConfigError(failure.problem, f"mixing.{failure.key}") from None

    def mixed_online(self, split: str) -> bool:
        """Whether ``split``'s weights move during the run (the train split of a blend with ``mixing``)."""
        return self.mixing is not None and split == "train"

    def scheduled(self, split: str) -> bool:
        """Whether ``split`` is mixed by the schedule (the train split of a blend that has one)."""
        return self.schedule is not None and split == "train"

    def weights_of(self, split: str) -> tuple[float, ...] | None:
        """The weight asked of each of ``split``'s sources (not normalised), None when they have none: the
        sources' ``weight``, or, where a schedule mixes the sources, its first phase's."""
        sources = self.split_sources(split)
        if not sources:
            return None
        if self.schedule is not None and sources[0].weight is None and (split == "train" or not isinstance(
                self.sources, dict)):
            return tuple(self.schedule[0].weights[source.name] for source in sources)
        return tuple(source.weight for source in sources) if sources[0].weight is not None else None

    def split_sources(self, split: str) -> tuple[SourceConfig, ...]:
        """The sources that feed ``split`` (all of them in the list form)."""
        if isinstance(self.sources, dict):
            return self.sources.get(split, ())
        return self.sources

    def source_names(self) -> tuple[str, ...]:
        """Every source's name once, in blend order (a name in several per-split lists is one source): the
        table a sample's source id indexes."""
        names: dict[str, None] = {}
        for split in SPLIT_NAMES:
            names.update(dict.fromkeys(source.name for source in self.split_sources(split)))
        return tuple(names)

    def source_key(self, split: str, index: int) -> str:
        """The key path of a source, for messages (``sources[1]`` or ``sources.valid[0]``)."""
        return f"sources.{split}[{index}]" if isinstance(self.sources, dict) else f"sources[{index}]"

    def resolve_path(self, path: str) -> str:
        """``path`` made absolute against the blend's folder (``~`` expanded); a URL as it is."""
        if storage.is_remote(path):
            return path
        expanded = os.path.expanduser(path)
        return expanded if os.path.isabs(expanded) else os.path.normpath(os.path.join(self.base_dir, expanded))

    def error(self, problem: str, key: str) -> ConfigError:
        """A :class:`ConfigError` located at ``key`` of this blend's file."""
        source = read_yaml(self.origin) if self.origin and os.path.isfile(self.origin) else None
        if source is None:
            return ConfigError(problem, key, self.origin)
        return ConfigError(problem).located(parse_key(key), source.file, source.line)


def _check_source_list(sources: tuple[SourceConfig, ...], key: str) -> None:
    if not sources:
        raise ConfigError("no sources; list at least one {name, prefix, weight}", key)
    names = [s.name for s in sources]
    for index, name in enumerate(names):
        if name in names[:index]:
            raise ConfigError(f"duplicate source name {name!r}; names must be unique", f"{key}[{index}].name")
    weighted = [s.weight is not None for s in sources]
    if any(weighted) and not all(weighted):
        index = weighted.index(False)
        raise ConfigError("weight missing here but given on other sources; give every source a weight, or none "
                          "(one epoch of each source)", f"{key}[{index}].weight")


def blend_from_dict(data: object, origin: str | None = None, base_dir: str | os.PathLike = ".") -> BlendConfig:
    """A :class:`BlendConfig` from an already-parsed mapping (paths relative to ``base_dir``)."""
    return build(BlendConfig, data, extra={"origin": origin, "base_dir": str(base_dir)})


def load_blend(path: str | os.PathLike, **overrides: object) -> BlendConfig:
    """Read and validate a blend file. ``overrides`` replace top-level keys (``seq_length=1024``,
    ``seed=…``, ``cache_dir=…``) or sample options (``eod_mask_loss=True``), validated the same way."""
    source = read_yaml(path)
    config = build(BlendConfig, source.data, (), source,
                   extra={"origin": str(path), "base_dir": str(Path(path).resolve().parent)})
    return apply_overrides(config, **overrides)


def apply_overrides(config: BlendConfig, **overrides: object) -> BlendConfig:
    """``config`` with top-level fields or sample options replaced (None values are ignored). A
    ``cache_dir`` given here is relative to the working directory, not to the blend's folder."""
    top = typing.get_type_hints(type(config))
    sample_hints = typing.get_type_hints(SampleOptions)
    changes, sample_changes = {}, {}
    for name, value in overrides.items():
        if value is None:
            continue
        if name in sample_hints:
            sample_changes[name] = coerce(value, sample_hints[name], ("samples", name))
        elif name in top and name not in ("sources", "origin", "base_dir", "samples"):
            changes[name] = coerce(value, top[name], (name,))
            if name == "cache_dir":  # given on a command line: relative to where it was typed
                changes[name] = storage.absolute(os.path.expanduser(changes[name]))
        else:
            raise ConfigError(f"cannot override {name!r}; overridable: "
                              f"{', '.join(n for n in top if n not in ('sources', 'origin', 'base_dir', 'samples'))}, "
                              f"{', '.join(sample_hints)}")
    if sample_changes:
        changes["samples"] = dataclasses.replace(config.samples, **sample_changes)
    try:
        return dataclasses.replace(config, **changes) if changes else config
    except ConfigError as failure:
        raise ConfigError(failure.problem, failure.key, config.origin) from None


def blend_from_data_path(data_path: list[str], split: str | None, seq_length: int, seed: int = 1234,
                         cache_dir: str | None = None) -> BlendConfig:
    """Megatron's ``--data-path [W1] P1 [W2] P2 …`` as a blend (the trainer's Megatron spelling); ``split`` None
    is Megatron's default, :data:`DEFAULT_SPLIT`."""
    paired = len(data_path) % 2 == 0 and all(_is_number(w) for w in data_path[::2])
    pairs = [(float(w), p) for w, p in zip(data_path[::2], data_path[1::2])] if paired else [(None,
                                                                                              p) for p in data_path]
    sources = [{"name": Path(p).name or p, "prefix": p, **({"weight": w} if w is not None else {})} for w, p in pairs]
    names = [s["name"] for s in sources]
    for index, source in enumerate(sources):
        if names.count(source["name"]) > 1:
            source["name"] = f"{source['name']}#{index}"
    data = {"seq_length": seq_length, "seed": seed, "sources": sources, **({"split": split} if split else {}),
            **({"cache_dir": cache_dir} if cache_dir else {})}
    return blend_from_dict(data, origin="--data-path", base_dir=os.getcwd())


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def blend_to_dict(config: BlendConfig) -> dict:
    """The YAML mapping of ``config`` with every path made absolute (so it can be saved anywhere): every field
    that is set, in the order the dataclasses declare them."""
    return _to_yaml(config, config)


def fingerprint_fields(options: BlendConfig | SampleOptions, config: BlendConfig) -> dict:
    """The fields of ``options`` (the blend, or its sample options) as the blend's fingerprint takes them, as YAML
    data: a :data:`CHANGES_SAMPLES` field only when set to other than its default; with ``options`` the sample
    options, every other field too."""
    return {f.name: _to_yaml(getattr(options, f.name), config) for f in dataclasses.fields(options)
            if (getattr(options, f.name) != f.default if f.metadata.get("changes_samples")
                else isinstance(options, SampleOptions))}


def _to_yaml(value: object, config: BlendConfig) -> object:
    """``value`` as YAML data: a dataclass as the mapping of its fields that are set (not None, and not at a default
    that :data:`OMITTED_AT_DEFAULT` leaves out), its :data:`PATH` fields made absolute; tuples as lists."""
    if dataclasses.is_dataclass(value):
        return {f.name: config.resolve_path(item) if f.metadata.get("path") else _to_yaml(item, config)
                for f in yaml_fields(type(value)) if (item := getattr(value, f.name)) is not None
                and not (f.metadata.get("omitted_at_default") and item == f.default)}
    if isinstance(value, (tuple, list)):
        return [_to_yaml(item, config) for item in value]
    if isinstance(value, dict):
        return {key: _to_yaml(item, config) for key, item in value.items()}
    return value


def dump_blend(config: BlendConfig, path: str | os.PathLike) -> None:
    """Write ``config`` as a blend file (absolute paths), atomically. A blend made from
    ``--data-path`` saved this way is what ``corpus blend`` needs to reproduce a run's samples."""
    with guard(path):
        write_atomically(path, yaml.safe_dump(blend_to_dict(config), sort_keys=False))
