"""``trainer export --hf DIR --load CKPT``: a checkpoint as a Hugging Face Llama model (safetensors +
``config.json``) that ``transformers.LlamaForCausalLM.from_pretrained(DIR)`` loads, so what is trained
here leaves the toolkit. Our layouts (grouped QKV, fused gate/up) are split into Llama's names. The
data's tokenizer comes along as Hugging Face files, whatever its family (:mod:`corpus.tokenizers.export`), so
``AutoTokenizer`` loads the folder and gives the data's ids."""

from __future__ import annotations

import errno
import json
import logging
import os
import re
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file

from corpus.core.atomic_write import atomic_path, write_atomically
from corpus.core.disk import OutputError, guard
from corpus.core.errors import ConfigError
from corpus.tokenizers import TextTokenizer, build_tokenizer, config_from_record
from corpus.tokenizers.errors import NotExportable
from corpus.tokenizers.export import write_tokenizer_files
from trainer.checkpoint import store as checkpoint
from trainer.checkpoint.state_dict import model_state
from trainer.config.loading import from_dict
from trainer.config.schema import ModelConfig
from trainer.errors import CheckpointError
from trainer.model.attention import BACKENDS
from trainer.model.gpt import GPT, build_model
from trainer.parallel.state import ParallelState

log = logging.getLogger(__name__)

SHARD_BYTES = 5 * 2**30  # transformers' default shard size
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_for_export(load: str | os.PathLike) -> tuple[GPT, dict]:
    """The model of checkpoint ``load`` (a ``--save`` folder or one ``iter_*`` in it) on CPU, and its run.json."""
    directory = checkpoint.find(load)
    if directory is None:
        raise CheckpointError(f"--load {load}: no checkpoint there (expected iter_* folders or "
                              f"{checkpoint.TRACKER})")
    info = checkpoint.read_info(directory)
    config = from_dict(ModelConfig, info["config"]["model"], f"{directory}/{checkpoint.INFO}: config.model")
    cpu = ParallelState(device=torch.device("cpu"))
    model = build_model(config, info["model_shape"]["vocab_size"], info["seq_length"], cpu, BACKENDS["math"], seed=0)
    checkpoint.load(directory, {"model": model_state([model], cpu)})  # NOTE: DCP loads in place into the parameters
    log.info("loaded model of %s (iteration %d)", directory, info["iteration"])
    return model, info


def llama_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """Our parameters under transformers' Llama names and layouts."""
    config = model.config
    groups, head_dim = config.num_query_groups, config.head_dim
    per_group = config.num_attention_heads // groups
    tensors = {"model.embed_tokens.weight": model.embedding.weight, "model.norm.weight": model.final_norm.weight,
               "lm_head.weight": model.output.weight}
    for index, layer in enumerate(model.layers):
        prefix = f"model.layers.{index}."
        qkv = layer.attn.qkv.weight.view(groups, per_group + 2, head_dim, config.hidden_size)
        gate, up = layer.mlp.fc1.weight.chunk(2, dim=0)
        tensors.update({
            prefix + "input_layernorm.weight": layer.attn_norm.weight,
            prefix + "self_attn.q_proj.weight": qkv[:, :per_group].reshape(-1, config.hidden_size),
            prefix + "self_attn.k_proj.weight": qkv[:, per_group].reshape(-1, config.hidden_size),
            prefix + "self_attn.v_proj.weight": qkv[:, per_group + 1].reshape(-1, config.hidden_size),
            prefix + "self_attn.o_proj.weight": layer.attn.proj.weight,
            prefix + "post_attention_layernorm.weight": layer.mlp_norm.weight,
            prefix + "mlp.gate_proj.weight": gate,
            prefix + "mlp.up_proj.weight": up,
            prefix + "mlp.down_proj.weight": layer.mlp.fc2.weight,
        })
    return tensors


def llama_config(model: GPT, info: dict, dtype: str) -> dict:
    """transformers' ``LlamaConfig`` fields for ``model``."""
    config = model.config
    tokenizer = info.get("tokenizer", {})
    eod, bos = tokenizer.get("eod_id"), (tokenizer.get("record") or {}).get("bos")
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": config.hidden_size, "intermediate_size": config.ffn_hidden_size,
        "num_hidden_layers": config.num_layers, "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": config.num_query_groups, "head_dim": config.head_dim,
        "vocab_size": model.vocab_size, "max_position_embeddings": model.seq_length,
        "rms_norm_eps": config.norm_epsilon, "rope_theta": config.rotary_base, "rope_scaling": None,
        "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        "initializer_range": config.init_method_std, "torch_dtype": dtype,
        "bos_token_id": bos, "eos_token_id": eod, "pad_token_id": eod,
    }


def _write_json(path: Path, data: dict) -> None:
    write_atomically(path, json.dumps(data, indent=2) + "\n")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _save_safetensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """``save_file`` into ``path``, atomically, with its I/O errors as an :class:`OutputError`, and the umask's
    mode like every other file (safetensors writes a private temporary file, mode 0600, and renames it)."""
    with atomic_path(path) as temporary:
        try:
            save_file(tensors, str(temporary), metadata={"format": "pt"})
        except SafetensorError as error:  # it carries the OS error only in its text: "... (os error 28) ..."
            code = re.search(r"os error (\d+)", str(error))
            number = int(code.group(1)) if code else errno.EIO
            raise OutputError(path, OSError(number, os.strerror(number))) from None
        os.chmod(temporary, 0o666 & ~_umask())


def _write_shards(tensors: dict[str, torch.Tensor], directory: Path) -> list[str]:
    """safetensors files of at most :data:`SHARD_BYTES` (one file when it fits), each written atomically."""
    shards, current, size = [], {}, 0
    for name, tensor in tensors.items():
        if current and size + tensor.nbytes > SHARD_BYTES:
            shards.append(current)
            current, size = {}, 0
        current[name] = tensor
        size += tensor.nbytes
    shards.append(current)
    names = (["model.safetensors"] if len(shards) == 1 else
             [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))])
    for name, shard in zip(names, shards):
        _save_safetensors(shard, directory / name)
    if len(shards) > 1:
        weight_map = {tensor: name for name, shard in zip(names, shards) for tensor in shard}
        total = sum(t.nbytes for t in tensors.values())
        _write_json(directory / "model.safetensors.index.json", {"metadata": {"total_size": total},
                                                                 "weight_map": weight_map})
    return names


def data_tokenizer(record: dict | None) -> TextTokenizer:
    """The tokenizer the run's data was made with (rebuilt from its sidecar record), or :class:`NotExportable`
    saying why it cannot come along: none recorded, or its files changed since the data was tokenized."""
    if not record:
        raise NotExportable("the run's data records no tokenizer (trained on --mock-data?)")
    try:
        tokenizer = build_tokenizer(config_from_record(record))
    except ConfigError as error:
        raise NotExportable(f"it cannot be rebuilt from the data's record ({error})") from None
    if tokenizer.describe()["fingerprint"] != record.get("fingerprint"):
        raise NotExportable(f"{', '.join(tokenizer.files())} changed since the data was tokenized")
    return tokenizer


def _write_tokenizer(record: dict | None, directory: Path, max_length: int) -> list[str]:
    """The data's tokenizer as tokenizer.json + tokenizer_config.json (AutoTokenizer loads the folder, giving the
    data's ids), or a log line saying why not; the model is exported either way."""
    try:
        return write_tokenizer_files(data_tokenizer(record), directory, max_length)
    except NotExportable as why:
        log.warning("tokenizer not exported: %s; AutoTokenizer will not load %s", why, directory)
        return []


def export_hf(load: str | os.PathLike, out_dir: str | os.PathLike, dtype: str = "bfloat16") -> list[str]:
    """Write checkpoint ``load`` as a transformers Llama model into ``out_dir``; returns the files written."""
    if dtype not in DTYPES:
        raise ConfigError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    model, info = load_for_export(load)
    directory = Path(out_dir)
    tensors = {name: tensor.detach().to(DTYPES[dtype]).contiguous() for name, tensor in llama_state_dict(model).items()}
    try:
        with guard(directory):
            directory.mkdir(parents=True, exist_ok=True)
            files = _write_shards(tensors, directory)
            _write_json(directory / "config.json", llama_config(model, info, dtype))
            record = info.get("tokenizer", {}).get("record")
            return files + ["config.json"] + _write_tokenizer(record, directory, model.seq_length)
    except OutputError as error:
        raise error.for_command("--hf", "export again", sum(t.nbytes for t in tensors.values())) from None
