"""Optional dependencies, probed in one place: whether a package imports here, and why not.

Every optional package (Triton, Transformer Engine, flash-attn, torchao, gigatoken, matplotlib) is imported only
where it is used, after :func:`missing` said it can be: a caller that can do without it degrades and says why in
one log line; one that cannot stops with an error naming what to install (:func:`install_hint`). torch is optional
in the same sense: ``corpus`` never imports it, and a command or module that needs it names the extra.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys


def missing(module: str) -> str | None:
    """Why ``module`` cannot be imported here (None when it can).

    NOTE: a real import, not a lookup: a package that is installed but fails to load its libraries (Transformer
    Engine raises OSError or RuntimeError then), or one set to None in ``sys.modules``, counts as missing. Not
    cached: an imported package costs a dictionary lookup, and the answer may change (a test hides a package)."""
    try:
        importlib.import_module(module)
    except Exception as error:  # noqa: BLE001 - any failure to import means the package cannot be used
        return f"{module.split('.')[0]} does not import ({type(error).__name__}: {str(error)[:80]})"
    return None


def installed(module: str) -> bool:
    """Whether ``module`` is installed, found without importing it: for a package whose import is slow and which
    is only needed later, if at all (one set to None in ``sys.modules`` counts as not installed)."""
    if module in sys.modules:
        return sys.modules[module] is not None
    return importlib.util.find_spec(module) is not None


#: The pip extra that installs each package a whole command or module cannot do without (``corpus`` needs none:
#: ``pip install blendforge`` is the data-only install; the trainer's stack is ``blendforge[train]``).
EXTRAS: dict[str, str] = {"torch": "train", "safetensors": "train", "tensorboard": "train", "matplotlib": "plot"}


def install_hint(module: str) -> str | None:
    """``pip install 'blendforge[<extra>]'`` for ``module`` (dotted names by their package), None when no extra
    of blendforge installs it."""
    extra = EXTRAS.get(module.split(".")[0])
    return f"pip install 'blendforge[{extra}]'" if extra else None
