"""The Triton kernel of :mod:`trainer.attention_forward` (imported on first use: ``TRITON_INTERPRET`` is read when
these functions are decorated)."""

import triton
import triton.language as tl

LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def attend_block(acc, row_max, row_sum, q, k_desc, k_column, v_desc, v_column, key_row, rows, start, qk_scale,
                 MASKED: tl.constexpr, KEYS: tl.constexpr):
    """One block of ``KEYS`` keys folded into the running output ``acc`` and its row max and sum (base 2)."""
    scores = tl.dot(q, tl.trans(k_desc.load([key_row + start, k_column])))
    if MASKED:  # the diagonal block: key j only for query rows i >= j
        keys = start + tl.arange(0, KEYS)
        scores = tl.where(rows[:, None] >= keys[None, :], scores, float("-inf"))
    new_max = tl.maximum(row_max, tl.max(scores, 1) * qk_scale)
    probs = tl.math.exp2(scores * qk_scale - new_max[:, None])
    correction = tl.math.exp2(row_max - new_max)
    row_sum = row_sum * correction + tl.sum(probs, 1)
    v = v_desc.load([key_row + start, v_column])
    return tl.dot(probs.to(v.dtype), v, acc * correction[:, None]), new_max, row_sum


@triton.jit
def attention_forward_kernel(q_desc, q_heads, k_desc, k_heads, v_desc, v_heads, o_desc, lse_ptr, seq_length, heads,
                             heads_per_group, qk_scale, ROWS: tl.constexpr, KEYS: tl.constexpr,
                             HEAD_DIM: tl.constexpr):
    """Causal attention for ``ROWS`` query rows of one (batch, head): the output and each row's log-sum-exp.
    Operands are [B·S, width] row-major, a head's ``HEAD_DIM`` columns every ``*_heads`` columns."""
    batch_head = tl.program_id(0)
    block = tl.num_programs(1) - 1 - tl.program_id(1)  # NOTE: dispatched in order: the longest rows first
    batch, head = batch_head // heads, batch_head % heads
    kv_head = head // heads_per_group
    key_row = batch * seq_length  # the sequence's first token among the B·S rows
    first = block * ROWS
    q = q_desc.load([key_row + first, head * q_heads])
    rows = first + tl.arange(0, ROWS)
    row_max = tl.full([ROWS], float("-inf"), tl.float32)
    row_sum = tl.zeros([ROWS], tl.float32)
    acc = tl.zeros([ROWS, HEAD_DIM], tl.float32)
    k_column, v_column = kv_head * k_heads, kv_head * v_heads
    for start in range(0, first, KEYS):
        acc, row_max, row_sum = attend_block(acc, row_max, row_sum, q, k_desc, k_column, v_desc, v_column, key_row,
                                             rows, start, qk_scale, False, KEYS)
    for start in range(first, first + ROWS, KEYS):
        acc, row_max, row_sum = attend_block(acc, row_max, row_sum, q, k_desc, k_column, v_desc, v_column, key_row,
                                             rows, start, qk_scale, True, KEYS)
    o_desc.store([key_row + first, head * q_heads], (acc / row_sum[:, None]).to(o_desc.dtype))
    # NOTE: natural log, of the scaled scores: row_max is in base 2 (qk_scale carries log2(e))
    tl.store(lse_ptr + batch_head * seq_length + rows, (row_max + tl.math.log2(row_sum)) * LN2)
