"""One check for every content-addressed key: each field it is made of, changed alone, gives a new key.

A key that leaves a field out serves an entry built from other inputs (stale index maps, another tokenizer's
verdict, a kernel compiled from other source); the check names the field whose change the key did not see.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping


def assert_each_field_changes_the_key(key_of: Callable[..., str], base: Mapping[str, object],
                                      changes: Mapping[str, object]) -> None:
    """``key_of(**fields)`` for ``base`` and for ``base`` with each field of ``changes`` changed alone: every
    change gives a key of its own (unlike the base's and unlike every other change's), and the same fields give
    the same key again. ``changes`` must name every field of ``base``, so a field added to the key is tested."""
    assert set(changes) == set(base), f"fields without a change to test: {sorted(set(base) - set(changes))}"
    first = key_of(**base)
    assert key_of(**base) == first, "the same fields gave another key"
    seen = {first: "the base fields"}
    for name, value in changes.items():
        key = key_of(**{**base, name: value})
        assert key not in seen, f"changing {name} gave the same key as {seen.get(key)}"
        seen[key] = f"changing {name}"
