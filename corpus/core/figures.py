"""Image files of figures, the one way every command draws them (``corpus inspect --plot``, ``trainer plot``).

matplotlib is optional (``pip install 'blendforge[plot]'``): it is imported only here, only when a figure is
asked for, and :func:`require_matplotlib` says how to install it before any work is done. A figure is drawn
without pyplot (no GUI backend, no global state) and written under a temporary name, then renamed, so an
interrupted run never leaves half an image.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from corpus.core.atomic_write import atomic_path
from corpus.core.disk import guard
from corpus.core.errors import UserError
from corpus.core.optional import install_hint, missing


class PlotError(UserError):
    """A figure cannot be written (matplotlib missing, unsupported file type)."""


def require_matplotlib(option: str) -> None:
    """Raise :class:`PlotError` naming ``option`` (what asked for the figure) and the install command when
    matplotlib is not importable."""
    if missing("matplotlib"):
        raise PlotError(f"{option} needs matplotlib, which is not installed: {install_hint('matplotlib')} "
                        f"(or pip install matplotlib), or drop {option}")


def new_figure(path: str | os.PathLike, option: str, size: tuple[float, float]) -> Any:
    """An empty matplotlib ``Figure`` of ``size`` inches for the image ``path``, whose type (its suffix, e.g.
    ``.png``) is checked first; ``option`` names what asked for it in errors."""
    require_matplotlib(option)
    from matplotlib.figure import Figure

    figure = Figure(figsize=size, layout="constrained")
    fmt = Path(path).suffix.lstrip(".").lower()
    if fmt not in figure.canvas.get_supported_filetypes():
        supported = ", ".join(sorted(figure.canvas.get_supported_filetypes()))
        raise PlotError(f"{option} {path}: unsupported image type {fmt or '(none)'}; use one of: {supported}")
    return figure


def save_figure(figure: Any, path: str | os.PathLike) -> None:
    """Write ``figure`` to ``path`` (type from its suffix) atomically."""
    with guard(path), atomic_path(path) as temporary:
        figure.savefig(temporary, format=Path(path).suffix.lstrip(".").lower(), dpi=120)
