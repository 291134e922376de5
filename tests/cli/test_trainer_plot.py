"""``trainer plot``: which file it reads, its summary without matplotlib, the image it draws, and each refusal's
message (the curves of a real run are drawn in tests/trainer/run/test_telemetry.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.images import THREE_PANELS_PIXELS, png_size


def write_metrics(path: Path, per_source: bool = True) -> Path:
    """Three training records of two sources (``b`` has no tokens in the second) and one evaluation."""
    def sources(step: int, b_tokens: int) -> dict:
        return {"a": {"loss": 5.0 - step, "tokens": 30, "tokens_total": 30 * step, "share": 0.75, "weight": 0.5},
                "b": {"loss": 6.0 - step if b_tokens else None, "tokens": b_tokens, "tokens_total": 10 * step,
                      "share": 0.25, "weight": 0.5}}

    records = [{"step": step, "loss": 5.5 - step, **({"sources": sources(step, 0 if step == 2 else 10)}
                                                      if per_source else {})} for step in (1, 2, 3)]
    records.insert(2, {"step": 2, "split": "valid", "eval_loss": 4.0,
                       **({"sources": {"a": {"loss": 3.5, "tokens": 64}, "b": {"loss": 4.5, "tokens": 64}}}
                          if per_source else {})})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records) + '{"step": 4, "lo')  # torn by a kill
    return path


def without_matplotlib(tmp_path: Path) -> dict:
    """An environment in which ``import matplotlib`` fails."""
    shadow = tmp_path / "shadow" / "matplotlib"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    return {"PYTHONPATH": f"{shadow.parent}:{REPO}"}


def test_summary_of_a_folder_without_matplotlib(tmp_path):
    write_metrics(tmp_path / "run" / "metrics.jsonl")
    (tmp_path / "run" / "other.jsonl").write_text("")
    result = json.loads(run_cli("trainer", "plot", str(tmp_path / "run"), "--json",
                                env=without_matplotlib(tmp_path)).stdout)
    assert result["step"] == 3 and result["tokens"] == 120 and result["valid_loss"] == 4.0
    assert result["sources"]["b"] == {"loss": 3.0, "valid_loss": 4.5, "tokens": 30, "share": 0.25, "weight": 0.5}
    table = run_cli("trainer", "plot", str(tmp_path / "run" / "metrics.jsonl")).stdout
    assert "step 3, 120 tokens" in table and table.splitlines()[-1].split() == ["b", "3.0000", "4.5000", "30",
                                                                               "0.250", "0.500"]


def test_out_without_matplotlib_says_how_to_install_before_reading(tmp_path):
    result = run_cli("trainer", "plot", str(write_metrics(tmp_path / "m.jsonl")), "--out", str(tmp_path / "c.png"),
                     check=False, env=without_matplotlib(tmp_path))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "trainer plot --out needs matplotlib" in result.stderr and "pip install 'blendforge[plot]'" in result.stderr
    assert not (tmp_path / "c.png").exists()


@pytest.mark.parametrize("layout, message", [
    ({"a.jsonl": "", "b.jsonl": ""}, "it holds a.jsonl, b.jsonl; give the run's --metrics-jsonl file itself"),
    ({}, "it holds no *.jsonl file"),
    ({"metrics.jsonl": None}, "no per-source training records"),
])
def test_what_it_cannot_plot_is_named(tmp_path, layout, message):
    for name, text in layout.items():
        if text is None:
            write_metrics(tmp_path / name, per_source=False)
        else:
            (tmp_path / name).write_text(text)
    result = run_cli("trainer", "plot", str(tmp_path), "--json", check=False)
    assert result.returncode == 1 and message in result.stderr and "Traceback" not in result.stderr


def test_out_draws_the_curves_as_an_image_of_the_figure_size(tmp_path):
    out = tmp_path / "c" / "c.png"  # a folder that does not exist yet
    result = run_cli("trainer", "plot", str(write_metrics(tmp_path / "m.jsonl")), "--out", str(out))
    assert png_size(out) == THREE_PANELS_PIXELS and f"wrote {out}" in result.stdout


@pytest.mark.parametrize("name, shown", [("c.nope", "nope"), ("c", "(none)")])
def test_an_unsupported_image_type_is_refused(tmp_path, name, shown):
    result = run_cli("trainer", "plot", str(write_metrics(tmp_path / "m.jsonl")), "--out", str(tmp_path / name),
                     check=False)
    assert result.returncode == 1 and f"unsupported image type {shown}; use one of:" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / name).exists()


def test_out_of_a_run_without_per_source_records_is_refused(tmp_path):
    metrics = write_metrics(tmp_path / "m.jsonl", per_source=False)
    result = run_cli("trainer", "plot", str(metrics), "--out", str(tmp_path / "c.png"), check=False)
    assert result.returncode == 1 and "no per-source training records" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "c.png").exists()
