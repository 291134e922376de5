"""The fault probe as a test: a seeded fuzz of a real pair's ``.idx``, ``.bin`` and ``.meta.json``. For every damaged
copy, ``corpus inspect --check`` ends in a finding or a clean bill (never a traceback), and a blend reading the pair
(dry run, samples) refuses it whenever ``--check`` reports a problem: a pair ``--check`` rejects is never read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from corpus.indexed import HEADER_SIZE
from corpus.inspect.checks import check_prefix
from tests.conftest import invoke_cli
from tests.corpus.blending.blend_data import tokenize_web

SEED = 45
CASES = 300

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    return tokenize_web(tmp_path_factory.mktemp("clean"))


def _flip_bytes(rng: np.random.Generator, data: bytearray, start: int = 0) -> str:
    count = int(rng.integers(1, 5))
    offsets = rng.integers(start, len(data), count)
    for offset in offsets:
        data[offset] ^= int(rng.integers(1, 256))
    return f"flip {count} byte(s) at {sorted(offsets.tolist())}"


def _overwrite(rng: np.random.Generator, data: bytearray, start: int, end: int, item: int, dtype: str) -> str:
    """Write one value that breaks the usual rules (0, -1, huge, a neighbour's, random) over an item of an array."""
    if end - start < item:
        return _flip_bytes(rng, data)
    slot = start + item * int(rng.integers(0, (end - start) // item))
    info = np.iinfo(dtype)
    current = int(np.frombuffer(bytes(data[slot:slot + item]), dtype)[0])
    value = int(rng.choice([0, -1, info.max, info.min, current + 1, current - 1, 2**30,
                            int(rng.integers(info.min // 2, info.max // 2))]))
    value = int(np.array([value]).astype(dtype)[0])  # wrapped into the field as a raw edit of its bytes would be
    data[slot:slot + item] = np.array([value], dtype=dtype).tobytes()
    return f"{dtype} at byte {slot}: {current} -> {value}"


def _damage_idx(rng: np.random.Generator, data: bytearray) -> str:
    n = int.from_bytes(data[18:26], "little")
    lengths, pointers, documents = HEADER_SIZE, HEADER_SIZE + 4 * n, HEADER_SIZE + 12 * n
    kind = int(rng.integers(0, 7))
    if kind == 0:
        return _flip_bytes(rng, data, 0)
    if kind == 1:
        return _overwrite(rng, data, lengths, pointers, 4, "int32")
    if kind == 2:
        return _overwrite(rng, data, pointers, documents, 8, "int64")
    if kind == 3:
        return _overwrite(rng, data, documents, len(data), 8, "int64")
    if kind == 4:
        data[17] = int(rng.integers(0, 10))
        return f"dtype code {data[17]}"
    if kind == 5:
        cut = int(rng.integers(0, len(data)))
        del data[cut:]
        return f"truncated to {cut} bytes"
    data.extend(rng.integers(0, 256, int(rng.integers(1, 17)), dtype=np.uint8).tobytes())
    return "bytes appended"


def _damage_bin(rng: np.random.Generator, data: bytearray) -> str:
    kind = int(rng.integers(0, 4))
    if kind == 0:
        return _flip_bytes(rng, data)
    if kind == 1:
        return _overwrite(rng, data, 0, len(data), 2, "uint16")
    if kind == 2:
        cut = int(rng.integers(0, len(data)))
        del data[cut:]
        return f"truncated to {cut} bytes"
    data.extend(b"\0" * int(rng.integers(1, 9)))
    return "bytes appended"


def _damage_meta(rng: np.random.Generator, data: bytearray) -> str:
    meta = json.loads(data)
    kind = int(rng.integers(0, 4))
    if kind == 0:
        cut = int(rng.integers(0, len(data)))
        del data[cut:]
        return f"text cut at {cut}"
    place, keys = meta, sorted(meta)
    if kind == 1 and isinstance(meta.get("tokenizer"), dict):
        place, keys = meta["tokenizer"], sorted(meta["tokenizer"])
    key = str(rng.choice(keys))
    if kind == 3:
        del place[key]
        change = f"{key} deleted"
    else:
        value = [None, -1, 0, 1, 2**62, "x", [], {}, True, False, 1.5, place[key]][int(rng.integers(0, 12))]
        if isinstance(place[key], int) and not isinstance(place[key], bool) and rng.random() < 0.5:
            value = place[key] + int(rng.choice([-1, 1, 7]))
        place[key] = value
        change = f"{key} = {value!r}"
    data[:] = json.dumps(meta).encode()
    return change


DAMAGE: dict[str, Callable[[np.random.Generator, bytearray], str]] = {
    ".idx": _damage_idx, ".bin": _damage_bin, ".meta.json": _damage_meta}


@pytest.mark.parametrize("case", range(CASES))
def test_a_damaged_pair_is_a_finding_and_never_read_by_a_blend(clean: Path, tmp_path: Path, case: int) -> None:
    rng = np.random.default_rng([SEED, case])
    suffix = str(rng.choice(list(DAMAGE)))
    data = tmp_path / "data"
    data.mkdir()
    for part in DAMAGE:
        shutil.copy(f"{clean}{part}", data / f"web{part}")
    target = data / f"web{suffix}"
    content = bytearray(target.read_bytes())
    damage = f"{suffix}: {DAMAGE[suffix](rng, content)}"
    target.write_bytes(bytes(content))
    prefix = data / "web"

    problems = check_prefix(str(prefix))  # a traceback here fails the case
    inspected = invoke_cli("corpus", "inspect", str(prefix), "--check")
    assert inspected.returncode in (0, 1) and "Traceback" not in inspected.stderr, (damage, inspected.stderr)
    assert (inspected.returncode == 1) == bool(problems), (damage, problems, inspected.stdout)

    blend = tmp_path / "blend.yaml"
    blend.write_text("seq_length: 32\nsplit: \"90,10,0\"\nsources:\n  - {name: web, prefix: data/web}\n")
    for command in (["--num-samples", "20"], ["--num-samples", "20", "--show-samples", "0:2"]):
        result = invoke_cli("corpus", "blend", str(blend), *command)
        assert result.returncode in (0, 1) and "Traceback" not in result.stderr, (damage, result.stderr)
        if problems:
            assert result.returncode == 1, (damage, problems[0], "read by a blend")
