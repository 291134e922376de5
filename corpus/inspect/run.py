"""``corpus inspect``: what is inside ``.bin/.idx`` pairs — the summary (:mod:`corpus.inspect.summary`), and on
request every problem (:mod:`corpus.inspect.checks`), decoded documents (:mod:`corpus.inspect.show`) and
histograms drawn to a file (:mod:`corpus.inspect.plot`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any

from corpus import storage
from corpus.core.typed_config import knob
from corpus.indexed.errors import IndexFormatError
from corpus.indexed.prefixes import expand_all
from corpus.inspect.checks import CheckOptions, Problem, check_prefix, contents_unverified, id_space
from corpus.inspect.errors import InspectError
from corpus.inspect.plot import require_image, write_plot
from corpus.inspect.show import DocumentRange, ShownDocument, show_documents
from corpus.inspect.summary import InspectReport, inspect_prefix
from corpus.storage import storage_options_knob
from corpus.tokenizers.config import TokenizerConfig
from corpus.tokenizers.decode import cached_tokenizer


@dataclass(frozen=True)
class InspectConfig:
    """What ``corpus inspect`` does; the CLI builds one from its flags."""

    datasets: tuple[str, ...] = knob(
        MISSING, "Prefixes, .idx/.bin paths, globs or directories, local or s3:// URLs.", "DATASETS")
    check: bool = knob(False, "Validate everything (sizes, pointers, document index, ids < vocab, EOD, sidecar); "
                       "exit 1 naming each problem.", "--check")
    deep: bool = knob(False, "With --check: also compare the sha256 of the .bin and .idx with the checksums the "
                      "sidecar records (reads every byte; catches changes the structure checks cannot).", "--deep")
    max_problems: int = knob(10, "With --check: list at most N problems of each kind per file (the rest are "
                             "counted).", "--max-problems")
    show: DocumentRange | str | None = knob(None, "Print documents A to B-1 (or document N), decoded.", "--show",
                                            metavar="A:B|N")
    ids: bool = knob(False, "With --show: print the raw token ids too.", "--ids")
    tokenizer: TokenizerConfig | None = knob(
        None, "Decode (and bound ids for --check) with this tokenizer instead of the one each sidecar records.")
    plot: Path | None = knob(None, "Write histograms of document lengths and token-id frequency (needs matplotlib).",
                             "--plot", metavar="FILE.png")
    storage_options: dict[str, Any] | None = storage_options_knob()

    def __post_init__(self) -> None:
        if isinstance(self.datasets, (str, Path)):  # one spec, not its characters
            object.__setattr__(self, "datasets", (str(self.datasets),))
        object.__setattr__(self, "datasets", tuple(map(str, self.datasets)))
        if not self.datasets:
            raise InspectError("name at least one dataset (a prefix, an .idx/.bin path, a glob or a directory)")
        if self.max_problems < 1:
            raise InspectError(f"--max-problems must be at least 1, not {self.max_problems}")
        if isinstance(self.show, str):  # as a command line spells it
            object.__setattr__(self, "show", DocumentRange.parse(self.show))
        if self.deep and not self.check:
            raise InspectError("--deep deepens --check: add --check")
        if self.ids and self.show is None:
            raise InspectError("--ids prints the ids of shown documents: add --show A:B (or --show N)")


@dataclass
class Inspection:
    """Everything inspect found for one prefix."""

    prefix: str
    #: None only when ``--check`` found the pair too broken to summarise (see ``problems``).
    report: InspectReport | None
    #: None unless checks were asked for; empty when the pair is clean.
    problems: list[Problem] | None = None
    documents: list[ShownDocument] | None = None
    #: With ``deep``: the files (``bin``, ``idx``) whose contents were not verified, the sidecar recording no
    #: checksum of them (``corpus add-checksums`` records them); None without ``deep``.
    unverified: list[str] | None = None

    def to_dict(self) -> dict:
        """A JSON-ready dict; keys are stable so ``--json`` output can be diffed across runs."""
        result = {"prefix": self.prefix, **(dataclasses.asdict(self.report) if self.report else {})}
        if self.problems is not None:
            result["problems"] = [dataclasses.asdict(problem) for problem in self.problems]
        if self.unverified is not None:
            result["unverified"] = self.unverified
        if self.documents is not None:
            result["documents"] = [dataclasses.asdict(document) for document in self.documents]
        return result


def _inspect_one(prefix: str, config: InspectConfig, vocab_size: int | None) -> Inspection:
    problems = None
    if config.check:
        problems = check_prefix(prefix, CheckOptions(vocab_size=vocab_size, max_problems=config.max_problems,
                                                     deep=config.deep))
    try:
        report = inspect_prefix(prefix)
    except (IndexFormatError, InspectError):
        if problems:  # already listed; a summary is impossible
            return Inspection(prefix, None, problems, unverified=contents_unverified(prefix) if config.deep else None)
        raise
    inspection = Inspection(prefix, report, problems, unverified=contents_unverified(prefix) if config.deep else None)
    if config.show is not None:
        inspection.documents = show_documents(prefix, config.show, config.tokenizer, report.meta, config.ids)
    return inspection


def inspect(config: InspectConfig) -> list[Inspection]:
    """Inspect every dataset ``config`` names (in the order given, globs sorted) and write the plot."""
    if config.plot is not None:
        require_image(config.plot)  # before any work, not after minutes of it
    storage.configure(config.storage_options)
    prefixes = expand_all(config.datasets)
    # An explicit tokenizer bounds the ids (--check) of every file; otherwise each sidecar does.
    tokenizer = cached_tokenizer(config.tokenizer) if config.tokenizer is not None else None
    vocab_size = id_space(tokenizer.vocab_size, [tokenizer.eod, tokenizer.bos]) if tokenizer is not None else None
    inspections = [_inspect_one(prefix, config, vocab_size) for prefix in prefixes]
    if config.plot is not None:
        write_plot(config.plot, [i.report for i in inspections if i.report is not None])
    return inspections
