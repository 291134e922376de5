"""The GPT and its attention backends on CPU: causality, document masking, GQA, init, backends agree."""

from __future__ import annotations

import pytest
import torch

from corpus.core.errors import ConfigError
from trainer.config.schema import ModelConfig
from trainer.model.attention import BACKENDS, AttentionShape, select_backend
from trainer.model.gpt import build_model, parameter_counts, token_loss_sum
from trainer.parallel.state import ParallelState

CPU = ParallelState(torch.device("cpu"))
VOCAB, SEQ = 128, 24


def tiny(seed: int = 0, backend: str = "math", **shape):
    config = ModelConfig(num_layers=2, hidden_size=32, num_attention_heads=4, num_query_groups=2, ffn_hidden_size=48,
                         **shape)
    return build_model(config, VOCAB, SEQ, CPU, BACKENDS[backend], seed).eval()


def positions(batch: int = 1, size: int = SEQ) -> torch.Tensor:
    return torch.arange(size).expand(batch, -1)


@torch.no_grad()
def test_causal_future_tokens_do_not_change_past_logits():
    model = tiny()
    tokens = torch.randint(0, VOCAB, (2, SEQ))
    changed = tokens.clone()
    changed[:, 10:] = torch.randint(0, VOCAB, (2, SEQ - 10))
    before, after = model(tokens, positions(2)), model(changed, positions(2))
    assert torch.equal(before[:, :10], after[:, :10])
    assert not torch.allclose(before[:, 10:], after[:, 10:])


@torch.no_grad()
def test_document_mask_makes_packed_documents_independent():
    """With cu_seqlens and restarted positions, the second document of a packed row gets the logits it
    would get alone, and the first is unaffected by the second."""
    model = tiny()
    first, second = torch.randint(1, VOCAB, (1, 9)), torch.randint(1, VOCAB, (1, SEQ - 9))
    packed = torch.cat((first, second), dim=1)
    restarted = torch.cat((torch.arange(9), torch.arange(SEQ - 9)))[None]
    cu_seqlens = torch.tensor([0, 9, SEQ], dtype=torch.int32)
    masked = model(packed, restarted, cu_seqlens)
    torch.testing.assert_close(masked[:, 9:], model(second, positions(1, SEQ - 9)), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(masked[:, :9], model(first, positions(1, 9)), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(masked[:, 9:], model(packed, restarted)[:, 9:])


@torch.no_grad()
def test_cpu_backends_agree():
    tokens = torch.randint(0, VOCAB, (2, SEQ))
    cu_seqlens = torch.tensor([0, 7, SEQ, SEQ + 13, 2 * SEQ], dtype=torch.int32)
    for documents in (None, cu_seqlens):
        reference = tiny(backend="math")(tokens, positions(2), documents)
        torch.testing.assert_close(tiny(backend="flash")(tokens, positions(2), documents), reference,
                                   rtol=1e-4, atol=1e-4)


@torch.no_grad()
def test_grouped_query_attention_equals_repeated_heads():
    q = torch.randn(2, SEQ, 4, 8)
    k, v = torch.randn(2, SEQ, 2, 8), torch.randn(2, SEQ, 2, 8)
    repeated = BACKENDS["math"].attend(q, k.repeat_interleave(2, dim=2), v.repeat_interleave(2, dim=2), None)
    assert torch.equal(BACKENDS["math"].attend(q, k, v, None), repeated)


def test_init_is_seeded_and_scaled():
    a, b, c = tiny(seed=1), tiny(seed=1), tiny(seed=2)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.embedding.weight, c.embedding.weight)
    assert torch.all(a.final_norm.weight == 1)
    big = build_model(ModelConfig(num_layers=8, hidden_size=256, num_attention_heads=4, num_query_groups=4,
                                  ffn_hidden_size=512), VOCAB, SEQ, CPU, BACKENDS["math"], 0)
    assert abs(big.layers[0].mlp.fc1.weight.std().item() - 0.02) < 0.002
    assert abs(big.layers[0].mlp.fc2.weight.std().item() - 0.02 / 4) < 0.0005  # std / sqrt(2 * 8 layers)


def test_loss_sum_honours_the_mask_and_counts():
    model = tiny()
    tokens = torch.randint(0, VOCAB, (2, SEQ))
    logits = model(tokens, positions(2))
    mask = torch.ones(2, SEQ)
    mask[1] = 0
    full = token_loss_sum(logits, tokens, torch.ones(2, SEQ))
    half = token_loss_sum(logits, tokens, mask)
    alone = token_loss_sum(logits[:1], tokens[:1], torch.ones(1, SEQ))
    torch.testing.assert_close(half, alone)
    assert full > half
    counts = parameter_counts(model)
    assert counts["embedding"] == VOCAB * 32
    assert counts["total"] - counts["embedding"] - counts["matmul"] == 32 * (2 * 2 + 1)  # the norm scales


def test_backend_selection_on_cpu():
    shape = AttentionShape(1, SEQ, 4, 2, 8, torch.float32, False)
    cpu = torch.device("cpu")
    assert select_backend("auto", cpu, shape).name == "math"
    assert select_backend("flash", cpu, shape).name == "flash"
    with pytest.raises(ConfigError, match="unknown; choose auto or one of"):
        select_backend("fastest", cpu, shape)
    with pytest.raises(ConfigError, match="cudnn: needs CUDA"):
        select_backend("cudnn", cpu, shape)
    with pytest.raises(ConfigError, match="flash_attn"):
        select_backend("flash_attn", cpu, shape)


def test_auto_on_cuda_keeps_the_fastest_working_kernel(monkeypatch, caplog):
    """The probe's decision logic, with the timings faked (CI has no GPU): refused kernels are skipped
    with their reason, the fastest of the rest wins, math is the last resort."""
    import trainer.model.attention as attention

    timings = {"cudnn": 1.0, "flash": 2.0, "efficient": 3.0}

    def fake_time(backend, shape, device):
        if backend.name not in timings:
            raise RuntimeError("No available kernel for this shape")
        return timings[backend.name]

    monkeypatch.setattr(attention, "_time_backend", fake_time)
    monkeypatch.setattr(attention, "_unusable", lambda backend, device: None)
    shape = AttentionShape(4, 4096, 16, 16, 128, torch.bfloat16, False)
    cuda = torch.device("cuda")
    with caplog.at_level("INFO"):
        assert select_backend("auto", cuda, shape).name == "cudnn"
    assert "flash_attn: No available kernel" in caplog.text and "cudnn 1.00 ms" in caplog.text
    timings.update(flash_attn=0.5)
    assert select_backend("auto", cuda, shape).name == "flash_attn"
    timings.clear()
    assert select_backend("auto", cuda, shape).name == "math"


def test_full_recompute_gives_the_same_gradients():
    def gradients(**shape):
        model = tiny(**shape).train()
        tokens = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(3))
        batch = {"tokens": tokens, "position_ids": positions(2), "labels": tokens.roll(-1, 1),
                 "loss_mask": torch.ones(2, SEQ)}
        model.loss_sum(batch).backward()
        return [p.grad for p in model.parameters()]

    for plain, recomputed in zip(gradients(), gradients(recompute_granularity="full")):
        torch.testing.assert_close(recomputed, plain, rtol=0, atol=0)


def test_fused_loss_equals_the_logits_path():
    tokens = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(4))
    batch = {"tokens": tokens, "position_ids": positions(2), "labels": tokens.roll(-1, 1),
             "loss_mask": torch.ones(2, SEQ)}
    fused, plain = tiny(cross_entropy_loss_fusion=True), tiny(cross_entropy_loss_fusion=False)
    assert fused.fused_loss and not plain.fused_loss
    torch.testing.assert_close(fused.loss_sum(batch), plain.loss_sum(batch), rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_residual_stream_is_in_the_compute_dtype_unless_fp32_is_asked():
    """Megatron's default: bf16 hidden states under bf16 (half the bytes of every norm and add); the
    --fp32-residual-connection flag keeps them fp32 with the same weights."""
    tokens = torch.randint(0, VOCAB, (2, SEQ))
    seen = {}
    for fp32_residual in (False, True):
        model = tiny(fp32_residual_connection=fp32_residual)
        dtypes = []
        model.layers[0].register_forward_hook(lambda module, args, out: dtypes.append((args[0].dtype, out[0].dtype)))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            seen[fp32_residual] = model.hidden_states(tokens, positions(2)).float()
        residual = torch.float32 if fp32_residual else torch.bfloat16
        assert dtypes == [(residual, residual)]
    assert (seen[True] - seen[False]).abs().max() < 0.1 * seen[True].abs().max()  # same model, rounder stream


@torch.no_grad()
@pytest.mark.parametrize("backend", ["math", "flash"])
def test_packed_samples_do_not_attend_across_documents(tmp_path, backend):
    """A best-fit packed batch, as the loader makes it: changing one document of a sample leaves the logits of
    the other documents in it unchanged, on every CPU attention backend."""
    from corpus.blending.datasets import SampleCounts, build_split_datasets
    from corpus.blending.schema import blend_from_dict
    from tests.corpus.blending.blend_data import write_random

    write_random(tmp_path / "docs", 300, seed=4, max_len=SEQ)
    blend = blend_from_dict({"seq_length": SEQ, "split": "100,0,0", "cache_dir": "cache", "packing": "best_fit",
                             "sources": [{"name": "docs", "prefix": "docs"}]}, base_dir=tmp_path)
    train = build_split_datasets(blend, SampleCounts(40)).train
    index = next(i for i in range(len(train)) if len(train.view(i)[1]) >= 3)
    batch = {name: torch.from_numpy(array) for name, array in train.batch([index]).items()}
    second, third = train.view(index)[1][1:3]
    changed = batch["tokens"].clone()
    changed[0, second[0]:third[0]] = (changed[0, second[0]:third[0]] + 1) % (VOCAB - 1) + 1
    model = tiny(backend=backend)
    before = model(batch["tokens"] % VOCAB, batch["position_ids"], batch["cu_seqlens"])
    after = model(changed % VOCAB, batch["position_ids"], batch["cu_seqlens"])
    outside = torch.ones(SEQ, dtype=torch.bool)
    outside[second[0]:third[0]] = False
    torch.testing.assert_close(after[0, outside], before[0, outside], rtol=0, atol=1e-6)
    assert not torch.allclose(after[0, ~outside], before[0, ~outside])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_cuda_backends_honour_document_masks_or_refuse_them(backend):
    """On CUDA each backend either keeps documents apart (changing one document leaves the other's outputs as
    they were) or is refused at start-up with document masking asked for."""
    device = torch.device("cuda")
    shape = AttentionShape(2, 256, 4, 2, 64, torch.bfloat16, True)
    try:
        chosen = select_backend(backend, device, shape)
    except ConfigError as error:
        assert any(reason in str(error) for reason in ("document-masked", "needs", "does not import"))
        return
    q, k, v = torch.randn(2, 256, 4, 64, device=device, dtype=torch.bfloat16), *(
        torch.randn(2, 256, 2, 64, device=device, dtype=torch.bfloat16) for _ in range(2))
    cu_seqlens = torch.tensor([0, 100, 256, 256 + 37, 512], dtype=torch.int32, device=device)
    before = chosen.attend(q, k, v, cu_seqlens)
    k2, v2 = k.clone(), v.clone()
    k2[0, 100:], v2[0, 100:] = torch.randn_like(k2[0, 100:]), torch.randn_like(v2[0, 100:])
    after = chosen.attend(q, k2, v2, cu_seqlens)
    torch.testing.assert_close(after[0, :100], before[0, :100], rtol=0, atol=0)
    torch.testing.assert_close(after[1], before[1], rtol=0, atol=0)
    assert not torch.equal(after[0, 100:], before[0, 100:])
