"""``trainer export --hf DIR --load CKPT``: a checkpoint as a transformers Llama model."""

from __future__ import annotations

import click


@click.command("export")
@click.option("--hf", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Folder to write model safetensors + config.json into (LlamaForCausalLM.from_pretrained loads it).")
@click.option("--load", required=True, type=click.Path(exists=True),
              help="A --save folder (its latest checkpoint) or one iter_* folder in it.")
@click.option("--dtype", default="bfloat16", show_default=True, type=click.Choice(["bfloat16", "float32", "float16"]),
              help="Dtype of the exported weights.")
def export(out_dir: str, load: str, dtype: str) -> None:
    """Export a checkpoint for transformers (Llama architecture)."""
    from trainer.checkpoint.export import export_hf

    files = export_hf(load, out_dir, dtype)
    click.echo(f"wrote {', '.join(files)} to {out_dir}")
