"""Every benchmark script imports: the scripts share helpers (``bench/timing.py``, the tokenizer families, the
data builders), and a helper renamed in one place must not leave a script that fails only when someone runs it."""

from __future__ import annotations

import importlib

import pytest

from tests.conftest import REPO

#: The scripts, not what lies in hidden folders beside them (``bench/.cache``: data and whatever a run left there).
_PARTS = [path.relative_to(REPO).with_suffix("").parts for path in (REPO / "bench").rglob("*.py")]
MODULES = sorted(".".join(parts) for parts in _PARTS
                 if parts[-1] != "__init__" and not any(part.startswith(".") for part in parts))


@pytest.mark.parametrize("module", MODULES)
def test_the_script_imports(module):
    importlib.import_module(module)
