"""``corpus inspect --plot FILE.png``: histograms of document lengths and token-id frequencies.

matplotlib is optional (``pip install 'blendforge[plot]'``): :func:`require_image` says how to install it,
or that the image type is unknown, before any work is done; :mod:`corpus.core.figures` draws and writes the image.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from corpus.core import figures
from corpus.core.errors import UserError
from corpus.indexed import IndexedReader
from corpus.inspect.stats import token_frequencies
from corpus.inspect.summary import InspectReport

log = logging.getLogger(__name__)

#: Ids counted when neither the sidecar nor a small dtype bounds the vocabulary (larger ones are
#: tallied apart, so a corrupt file cannot make the count array explode).
DEFAULT_ID_LIMIT = 1 << 20
#: Equal-width bins of token ids in the frequency histogram.
ID_BINS = 256
#: Prefixes beyond this many share the plot without a legend entry each.
LEGEND_LIMIT = 10


def require_image(path: str | os.PathLike) -> None:
    """Raise :class:`~UserError` when ``--plot path`` cannot be written (matplotlib missing: with
    the install command; an unknown image type: with the known ones)."""
    figures.require_image(path, "--plot")


def _id_limit(report: InspectReport) -> int:
    vocab = (report.meta or {}).get("vocab_size")
    if vocab:
        return int(vocab)
    dtype = np.dtype(report.dtype)
    return 1 << (8 * dtype.itemsize) if dtype.kind in "iu" and dtype.itemsize <= 2 else DEFAULT_ID_LIMIT


def _draw(axes_lengths, axes_ids, report: InspectReport) -> None:
    """Add one prefix's length histogram and id-frequency curve to the two panels."""
    with IndexedReader(report.prefix) as reader:
        counts, outside = token_frequencies(reader.tokens, _id_limit(report))
    if outside:
        log.warning("%s: %d token ids outside [0, %d) left out of the frequency plot", report.prefix, outside,
                    len(counts))
    edges = np.asarray(report.histogram.edges, dtype=np.float64)
    if len(edges):
        edges[0] = max(edges[0], 0.5)  # a log axis cannot start at 0: empty documents sit left of 1
        axes_lengths.stairs(report.histogram.counts, edges, label=report.prefix)
    edges = np.unique(np.linspace(0, len(counts), ID_BINS + 1).astype(np.int64))
    axes_ids.stairs(np.add.reduceat(counts, edges[:-1]), edges, label=report.prefix)


def write_plot(path: str | os.PathLike, reports: list[InspectReport]) -> None:
    """Write document-length histograms and token-id frequencies of ``reports`` to the image ``path``
    (format from its suffix, e.g. ``.png``); several prefixes are overlaid."""
    drawn = [report for report in reports if report.num_tokens]
    if not drawn:
        names = ", ".join(str(report.prefix) for report in reports) or "no dataset"
        raise UserError(f"--plot {path}: nothing to draw: {names} holds no tokens; tokenize text into it, "
                        "or drop --plot")
    for report in reports:
        if not report.num_tokens:
            log.warning("%s holds no tokens: left out of the plot", report.prefix)
    figure = figures.new_figure(path, "--plot", figures.TWO_PANELS)
    axes_lengths, axes_ids = figure.subplots(1, 2)
    for report in drawn:
        _draw(axes_lengths, axes_ids, report)
    axes_lengths.set(xscale="log", yscale="log", xlabel="tokens per document (power-of-two bins)",
                     ylabel="documents", title="document lengths")
    axes_ids.set(yscale="log", xlabel=f"token id ({ID_BINS} equal bins)", ylabel="occurrences",
                 title="token-id frequency")
    if 1 < len(drawn) <= LEGEND_LIMIT:
        axes_lengths.legend(fontsize="small", loc="best")
    figures.save_figure(figure, path, "--plot")
    log.info("wrote %s", path)
