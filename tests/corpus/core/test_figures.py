"""Image files of figures: every type written whole at its size, the folder made, refusals before any work, and
nothing half-written left behind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from corpus.core import figures
from corpus.core.disk import OutputError
from corpus.core.errors import UserError
from tests.images import pdf_size, png_size, svg_size

POINTS_PER_INCH = 72


def draw(path: Path) -> None:
    figure = figures.new_figure(path, "--plot", figures.TWO_PANELS)
    left, right = figure.subplots(1, 2)
    left.plot([1, 2, 3], [3, 1, 2])
    right.stairs([4, 2], [0, 1, 2])
    figures.save_figure(figure, path, "--plot")


def test_each_image_type_is_written_whole_at_the_figure_size_into_a_new_folder(tmp_path):
    width, height = figures.TWO_PANELS
    for name in ("plots/a.png", "plots/a.svg", "plots/a.PDF"):
        draw(tmp_path / name)
    assert png_size(tmp_path / "plots/a.png") == (round(width * figures.DPI), round(height * figures.DPI))
    assert svg_size(tmp_path / "plots/a.svg") == (width * POINTS_PER_INCH, height * POINTS_PER_INCH)
    assert pdf_size(tmp_path / "plots/a.PDF") == (width * POINTS_PER_INCH, height * POINTS_PER_INCH)
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["a.PDF", "a.png", "a.svg"]


@pytest.mark.parametrize("name, shown", [("c.nope", "nope"), ("curves", "(none)")])
def test_an_unknown_image_type_is_refused_with_the_known_ones(tmp_path, name, shown):
    expected = rf"--plot {tmp_path / name}: unsupported image type {re.escape(shown)}; use one of: .*pdf, .*png, .*svg"
    with pytest.raises(UserError, match=expected):
        figures.require_image(tmp_path / name, "--plot")
    with pytest.raises(UserError):
        figures.new_figure(tmp_path / name, "--plot", figures.TWO_PANELS)


def test_a_file_where_the_folder_should_be_is_one_line_naming_the_option(tmp_path):
    (tmp_path / "blocker").write_text("")
    with pytest.raises(OutputError, match=r"blocker is a file, not a folder; choose another --plot"):
        draw(tmp_path / "blocker" / "c.png")


def test_a_failed_write_leaves_neither_the_image_nor_a_partial_one(tmp_path):
    figure = figures.new_figure(tmp_path / "c.png", "--plot", figures.TWO_PANELS)

    def dies_half_way(path, **options):
        Path(path).write_bytes(b"\x89PNG half")
        raise OSError(28, "No space left on device")

    figure.savefig = dies_half_way
    with pytest.raises(OutputError, match="No space left on device"):
        figures.save_figure(figure, tmp_path / "c.png", "--plot")
    assert list(tmp_path.iterdir()) == []
