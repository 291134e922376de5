"""Texts for tokenizer conformance: real documents of the shipped sample plus the hard cases."""

from __future__ import annotations

import json

import pytest

from tests.tokenizer_files import REPO

HARD_CASES = [
    "",
    " ",
    "\n",
    "   \n\n\t  ",
    "Hello, world!",
    "naïve café, Ångström, “quotes” — ‘single’ … ﬁ ligature, e\u0301 combining, ℌ𝔢𝔩𝔩𝔬",
    "日本語の文章です。中文文本，还有标点。한국어 텍스트도 있습니다.",
    "Русский текст и ελληνικά και العربية وعبرית",
    "emoji 🚀🔥 family 👨‍👩‍👧‍👦 flag 🇳🇱 skin 👍🏽 keycap 1️⃣",
    "def f(x: int) -> int:\n\t\"\"\"Doc.\"\"\"\n    return x ** 2  # square\n\nif __name__ == '__main__':\n    "
    "print(f(3))\n",
    "x = {'a': [1, 2.5e-10, 0xFF, None]}; y = a->b && c || !d; // C-ish\r\n",
    "1234567890 3.14159265 1,000,000 2024-01-01T12:00:00Z",
    "special strings: <s> </s> <unk> <pad> <SPECIAL_7> <|endoftext|> <|begin_of_text|> [INST] <mask>",
    "control\x00chars\x07and\x0cform feed\x1b[0m\u200b\u2028\u2029\ufeff",
    "trailing spaces    ",
    "    leading spaces",
    "a" * 20000,
    "word " * 5000,
    "\u4e00" * 5000,
    "🚀" * 2000,
    " ".join(["supercalifragilistic" * 20] * 50),
    "line without newline but very long: " + "lorem ipsum dolor sit amet " * 4000,
]


@pytest.fixture(autouse=True)
def fresh_tokenizer_checks(tmp_path, monkeypatch):
    """Each test starts with no cached encoder check (its own cache folder): what a test plants or patches
    never reaches another test's verdict."""
    monkeypatch.setenv("BLENDFORGE_TOKENIZER_CHECKS_DIR", str(tmp_path / "tokenizer_checks"))


def _documents(name: str, limit: int, max_chars: int) -> list[str]:
    with open(REPO / "examples" / name, encoding="utf-8") as handle:
        return [json.loads(line)["text"][:max_chars] for line, _ in zip(handle, range(limit))]


@pytest.fixture(scope="session")
def conformance_texts() -> list[str]:
    """Real prose and code (about 250 KB) followed by the hard cases."""
    return _documents("web.jsonl", 30, 6000) + _documents("code.jsonl", 20, 4000) + HARD_CASES
