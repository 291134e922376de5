"""What a written figure is, read back as a viewer would: its type and its size in pixels (PNG) or points (SVG, PDF).
Pillow comes with matplotlib (the test extra)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from corpus.core.figures import DPI, THREE_PANELS, TWO_PANELS


def png_size(path: Path) -> tuple[int, int]:
    """Width and height of a PNG file in pixels, after Pillow checked the file is a whole, valid PNG."""
    from PIL import Image

    with Image.open(path) as image:
        assert image.format == "PNG"
        image.verify()  # the chunks' checksums: a truncated or damaged file fails here
        return image.size


def svg_size(path: Path) -> tuple[float, float]:
    """Width and height of an SVG file in points, after parsing the whole document."""
    root = ElementTree.parse(path).getroot()
    assert root.tag.endswith("svg")
    return float(root.get("width").removesuffix("pt")), float(root.get("height").removesuffix("pt"))


def pdf_size(path: Path) -> tuple[float, float]:
    """Width and height of a one-page PDF in points (its MediaBox), after checking its header and trailer."""
    data = path.read_bytes()
    assert data.startswith(b"%PDF-") and data.rstrip().endswith(b"%%EOF")
    box = re.search(rb"/MediaBox\s*\[\s*0 0 ([0-9.]+) ([0-9.]+)\s*\]", data)
    return float(box.group(1)), float(box.group(2))


#: The pixel size of a two-panel figure (``corpus inspect --plot``) written as PNG.
TWO_PANELS_PIXELS = (round(TWO_PANELS[0] * DPI), round(TWO_PANELS[1] * DPI))
#: The pixel size of a three-panel figure (``trainer plot --out``) written as PNG.
THREE_PANELS_PIXELS = (round(THREE_PANELS[0] * DPI), round(THREE_PANELS[1] * DPI))
