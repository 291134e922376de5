"""The typed configs of ``trainer export`` and ``trainer plot``: their flags are generated from these fields, as
``trainer run``'s are from :class:`~trainer.config.schema.TrainConfig` (``cli/config_options.py``)."""

from __future__ import annotations

from dataclasses import MISSING, dataclass
from typing import Literal

from corpus.core.typed_config import knob


@dataclass(frozen=True)
class ExportConfig:
    """Which checkpoint ``trainer export`` writes as a transformers model, where, and in which dtype."""

    out_dir: str = knob(MISSING, "Folder to write model safetensors + config.json into "
                                 "(LlamaForCausalLM.from_pretrained loads it).", "--hf")
    load: str = knob(MISSING, "A --save folder (its latest checkpoint) or one iter_* folder in it.", "--load")
    dtype: Literal["bfloat16", "float32", "float16"] = knob("bfloat16", "Dtype of the exported weights.", "--dtype")


@dataclass(frozen=True)
class PlotConfig:
    """Which run ``trainer plot`` reads, and where it draws the curves."""

    run: str = knob(MISSING, "The run's --metrics-jsonl file, or the folder holding it.", "RUN_DIR_OR_METRICS")
    out: str | None = knob(None, "Image to write the curves to (type from its suffix: .png, .svg, .pdf…); needs "
                                 "matplotlib (pip install 'blendforge[plot]').", "--out")
