"""Image files of figures, the one way every command draws them (``corpus inspect --plot``, ``trainer plot``).

matplotlib is optional (``pip install 'blendforge[plot]'``): it is imported only here, only when a figure is
asked for, and :func:`require_image` says how to install it (or that the image type is unknown) before any work
is done. A figure is drawn without pyplot (no GUI backend, no global state) and written under a temporary name, then
renamed, so an interrupted run never leaves half an image; its folder is made when missing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from corpus.core.atomic_write import atomic_path
from corpus.core.disk import OutputError, guard
from corpus.core.errors import UserError
from corpus.core.optional import install_hint, missing

#: Resolution of every image written (dots per inch): a figure of W × H inches is W·DPI × H·DPI pixels.
DPI = 120
#: Two panels side by side (``corpus inspect --plot``), in inches.
TWO_PANELS = (12.0, 4.5)
#: Three panels side by side (``trainer plot --out``: losses, validation losses, the mix), in inches.
THREE_PANELS = (18.0, 4.5)


def require_matplotlib(option: str) -> None:
    """Raise :class:`UserError` naming ``option`` (what asked for the figure) and the install command when
    matplotlib is not importable."""
    if missing("matplotlib"):
        raise UserError(f"{option} needs matplotlib, which is not installed: {install_hint('matplotlib')} "
                        f"(or pip install matplotlib), or drop {option}")


def require_image(path: str | os.PathLike, option: str) -> None:
    """Refuse, before any work, an image ``path`` that cannot be written: matplotlib missing, or a suffix that is no
    image type matplotlib writes; ``option`` names what asked for it in the errors."""
    require_matplotlib(option)
    from matplotlib.backend_bases import FigureCanvasBase

    supported = FigureCanvasBase.get_supported_filetypes()
    fmt = Path(path).suffix.lstrip(".").lower()
    if fmt not in supported:
        raise UserError(f"{option} {path}: unsupported image type {fmt or '(none)'}; use one of: "
                        f"{', '.join(sorted(supported))}")


def new_figure(path: str | os.PathLike, option: str, size: tuple[float, float]) -> Any:
    """An empty matplotlib ``Figure`` of ``size`` inches for the image ``path`` (checked by :func:`require_image`);
    ``option`` names what asked for it in errors."""
    require_image(path, option)
    from matplotlib.figure import Figure

    return Figure(figsize=size, layout="constrained")


def save_figure(figure: Any, path: str | os.PathLike, option: str) -> None:
    """Write ``figure`` to ``path`` (type from its suffix) atomically, making its folder if needed; a path that
    cannot be written is an :class:`~corpus.core.disk.OutputError` naming ``option``."""
    path = Path(path)
    try:
        with guard(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(path) as temporary:
                figure.savefig(temporary, format=path.suffix.lstrip(".").lower(), dpi=DPI)
    except OutputError as error:
        raise error.for_command(option) from None
