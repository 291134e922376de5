"""``mixing:`` keys are checked where they are written: every mistake names the file, the line, the key and
the fix."""

from __future__ import annotations

import pytest

from corpus.blending.schema import load_blend
from corpus.core.errors import ConfigError

SOURCES = ("sources:\n"
           "  - {name: web, prefix: data/web, weight: 0.7}\n"
           "  - {name: code, prefix: data/code, weight: 0.3}\n")


@pytest.mark.parametrize("mixing, line, message", [
    ("mixing: {kind: offline}", 5, r"mixing\.kind: unknown mixing kind 'offline'; use one of online"),
    ("mixing: {kind: online, rule: doremi2}", 5, r"mixing\.rule: unknown mixing rule 'doremi2'; use one of odm, "
                                                r"excess_loss"),
    ("mixing:\n  kind: online\n  floor: 0.5", 7, r"mixing\.floor: floor 0.5 for 2 sources leaves no weight"),
    ("mixing:\n  kind: online\n  update_interval: 0", 7, r"mixing\.update_interval: .* must be at least 1"),
    ("mixing:\n  kind: online\n  options:\n    smoothing: 1.5", 8, r"mixing\.options\.smoothing: smoothing 1.5"),
    ("mixing:\n  kind: online\n  options: {speed: 2}", 7, r"mixing\.options\.speed: unknown key"),
    ("mixing:\n  kind: online\n  rule: excess_loss\n  options:\n    reference: {web: 3.0}", 9,
     r"mixing\.options\.reference: no reference loss for code"),
    ("mixing: {kind: online}\nschedule:\n  - {weights: {web: 1, code: 1}}", None, r"remove this weight"),
])
def test_mistakes_are_located(tmp_path, mixing, line, message):
    blend = tmp_path / "blend.yaml"
    blend.write_text("seq_length: 16\n" + SOURCES + mixing + "\n")
    with pytest.raises(ConfigError, match=message) as caught:
        load_blend(blend)
    if line is not None:
        assert str(caught.value).startswith(f"{blend}:{line}: ")


def test_online_mixing_needs_the_weights_it_starts_from(tmp_path):
    blend = tmp_path / "blend.yaml"
    blend.write_text("seq_length: 16\nsources:\n  - {name: web, prefix: data/web}\n"
                     "  - {name: code, prefix: data/code}\nmixing: {kind: online}\n")
    with pytest.raises(ConfigError, match=r":3: sources\[0\]\.weight: online mixing starts from the sources'"):
        load_blend(blend)
