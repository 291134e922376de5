"""Whether token data was written by a given tokenizer: the one rule every reader of a sidecar applies (a blend's
``tokenizer:``, the trainer's tokenizer flags), so data and tokenizer are held together the same way everywhere.

The rule compares what both sides know, and nothing else: the type (exactly, when a ``--tokenizer-type`` is named;
its family, when a blend names only a family such as ``huggingface``), the fingerprint of the tokenizer's files, and
the end-of-document id. Callers phrase the :class:`Mismatch` in their own terms (a blend key, a flag).
"""

from __future__ import annotations

from dataclasses import dataclass

from corpus.tokenizers.registry import family_of


@dataclass(frozen=True)
class Mismatch:
    """How the data's recorded tokenizer differs from the expected one."""

    aspect: str
    """``type``, ``files`` or ``eod_id``: which part differs (a caller names its own key or flag for it)."""
    recorded: object
    """The data's value (from its ``.meta.json``): a type name, a fingerprint or an id."""
    expected: object
    """The expected tokenizer's value, of the same kind."""


def data_mismatch(record: dict | None, kind: str, fingerprint: str | None = None, eod_id: int | None = None,
                  recorded_eod_id: int | None = None) -> Mismatch | None:
    """The first way the tokenizer ``record`` of a sidecar (what :meth:`TextTokenizer.describe` wrote) contradicts
    the expected tokenizer, or None when nothing known differs.

    ``kind``: the expected ``--tokenizer-type``, or a family name (then only the family must agree);
    ``fingerprint``: of the expected tokenizer's files (None: not known, not compared); ``eod_id``: its
    end-of-document id, compared with ``recorded_eod_id`` (the data's, recorded beside the tokenizer) when both
    are known."""
    record = record or {}
    recorded_type = record.get("type")
    if recorded_type is not None:
        named_family = kind.lower() == family_of(kind)
        agrees = (family_of(recorded_type) == family_of(kind) if named_family
                  else recorded_type.lower() == kind.lower())
        if not agrees:
            return Mismatch("type", recorded_type, kind)
    recorded_fingerprint = record.get("fingerprint")
    if fingerprint and recorded_fingerprint and fingerprint != recorded_fingerprint:
        return Mismatch("files", recorded_fingerprint, fingerprint)
    if eod_id is not None and recorded_eod_id is not None and eod_id != recorded_eod_id:
        return Mismatch("eod_id", recorded_eod_id, eod_id)
    return None
