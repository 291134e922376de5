"""Options generated from typed configs (``cli/config_options.py``): every command's flags say what their config
field says (help and default, written once there), a flag left out leaves the config's default, and a printed
command repeats the options exactly as typed."""

from __future__ import annotations

import dataclasses
import shlex
import typing

import click
import pytest

from cli import corpus_autotune, corpus_blend, corpus_inspect, corpus_tokenize, trainer_export, trainer_plot
from cli.config_options import SEPARATOR
from cli.corpus import main as corpus
from cli.trainer import main as trainer
from corpus.autotune.search import AutotuneConfig
from corpus.blending.request import BlendRequest
from corpus.core.typed_config import field_default
from corpus.indexed.merge import MergeConfig
from corpus.inspect.checksums import AddChecksumsConfig
from corpus.inspect.run import InspectConfig
from corpus.tokenize.config import TokenizeConfig
from tests.conftest import run_cli
from tests.corpus.tokenize.support import TOKENIZER, WEB
from trainer.config.commands import ExportConfig, PlotConfig
from trainer.config.schema import TrainConfig

COMMANDS = [(corpus, "tokenize", TokenizeConfig, corpus_tokenize.SETTINGS),
            (corpus, "autotune-workers", AutotuneConfig, corpus_autotune.SETTINGS),
            (corpus, "inspect", InspectConfig, corpus_inspect.SETTINGS),
            (corpus, "blend", BlendRequest, corpus_blend.SETTINGS), (corpus, "merge", MergeConfig, {}),
            (corpus, "add-checksums", AddChecksumsConfig, {}), (trainer, "run", TrainConfig, {}),
            (trainer, "export", ExportConfig, trainer_export.SETTINGS), (trainer, "plot", PlotConfig,
                                                                         trainer_plot.SETTINGS)]


def test_every_command_has_its_flags_generated_from_a_typed_config() -> None:
    """A command added without a config (its flags declared by hand) is missing from the list the tests below
    check."""
    listed = {(group.name, name) for group, name, _, _ in COMMANDS}
    assert {(group.name, name) for group in (corpus, trainer)
            for name in group.list_commands(click.Context(group))} == listed


def _field(cls: type, dest: str) -> dataclasses.Field:
    """The field an option's destination (``tokenizer__model``) stands for."""
    *sections, name = dest.split(SEPARATOR)
    for section in sections:
        hint = typing.get_type_hints(cls)[section]
        cls = next(arg for arg in (typing.get_args(hint) or (hint,)) if dataclasses.is_dataclass(arg))
    return next(field for field in dataclasses.fields(cls) if field.name == name)


@pytest.mark.parametrize("group, name, config, settings", COMMANDS, ids=[command[1] for command in COMMANDS])
def test_each_flag_shows_its_fields_help_and_default(group: click.Group, name: str, config: type,
                                                     settings: dict) -> None:
    """The help of every generated option is its field's (or the command's own word for it, where it says one),
    with the field's default."""
    command = group.get_command(click.Context(group), name)
    ctx = click.Context(command)
    generated = [param for param in command.params if param.name and SEPARATOR in param.name
                 or param.name in {f.name for f in dataclasses.fields(config)}]
    flagged = {field.name for field in dataclasses.fields(config) if field.metadata.get("flag")}
    assert generated and flagged <= {param.name for param in generated}  # each top-level flag, sections' below
    for param in generated:
        field = _field(config, param.name)
        if isinstance(param, click.Argument):
            assert param.required == (field_default(field) is dataclasses.MISSING)
            continue
        flag, shown = param.get_help_record(ctx)
        if param.opts[0] in field.metadata["switches"]:
            assert param.flag_value == field.metadata["switches"][param.opts[0]]
            continue
        assert param.opts[0] == field.metadata["flag"], flag
        default = field_default(field)
        words = " ".join(map(str, default)) if isinstance(default, list) else str(default)
        if default not in (None, False, [], dataclasses.MISSING):
            assert f"[default: {words}]" in shown, (flag, shown)
        said = settings.get(param.name.replace(SEPARATOR, "."), {}).get("help", field.metadata["help"])
        assert shown.startswith(said), (flag, shown)


def test_a_printed_command_repeats_switches_and_storage_options_as_typed(tmp_path) -> None:
    """autotune-workers prints the corpus tokenize command to run: the tokenizer switch and the storage options the
    user typed come back in it, and it runs."""
    typed = ["--input", str(WEB), "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(TOKENIZER),
             "--tokenizer-hf-no-include-special-tokens", "--storage-options", '{"anon": true}']
    result = run_cli("corpus", "autotune-workers", *typed, "--max-documents", "40", "--batch-sizes-to-check", "4",
                     "--threads-per-worker-to-check", "1", "--workers-to-check", "1", "--repeats", "0",
                     "--output-prefix", str(tmp_path / "web"), env={"TMPDIR": str(tmp_path)})
    lines = result.stdout.splitlines()
    words = shlex.split(lines[lines.index("run:") + 1])
    assert words[2:2 + len(typed)] == typed[:-1] + ['{"anon":true}']
    run_cli(*words, "--quiet")
    assert (tmp_path / "web_text_document.idx").exists()
