"""Compile the Triton part of tests/corpus/: Triton 3.9's AMD backend output for gfx942 and gfx950.

Benchmark-side only (Triton is never a tilegcn dependency). Run it with the Triton environment:

    /work/venvs/triton/bin/python bench/corpus/make_corpus.py [--out tests/corpus] [--only NAME ...]

For each kernel and arch it writes NAME.ARCH.hsaco (the code object the tests run), NAME.ARCH.amdgcn
(Triton's assembly, which bench/checker_power.py edits and reassembles) and NAME.ARCH.json:
kernel name, grid, block, dynamic LDS (Triton's kernels take their LDS as sharedMemBytes), the argument
list (tensors with shape/dtype/init, scalars, the two scratch pointers Triton appends), the name of the
torch reference in tests/corpus/reference.py, the outputs to compare and the tolerance.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

ARCHES = ("gfx942", "gfx950")
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "..", "tests", "corpus")


# ------------------------------------------------------------------------------------------------------
# kernels
# ------------------------------------------------------------------------------------------------------

@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


@triton.jit
def gelu_silu_kernel(x, out_gelu, out_silu, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x + offs, mask=m).to(tl.float32)
    g = 0.5 * v * (1.0 + tl.extra.hip.libdevice.tanh(0.7978845608 * (v + 0.044715 * v * v * v)))
    s = v / (1.0 + tl.exp(-v))
    tl.store(out_gelu + offs, g.to(tl.float16), mask=m)
    tl.store(out_silu + offs, s.to(tl.float16), mask=m)


@triton.jit
def row_sum_max_kernel(x, out_sum, out_max, out_argmax, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x + row * stride + cols, mask=cols < n_cols, other=float("-inf"))
    tl.store(out_max + row, tl.max(v, axis=0))
    tl.store(out_argmax + row, tl.argmax(v, axis=0))
    tl.store(out_sum + row, tl.sum(tl.where(cols < n_cols, v, 0.0), axis=0))


@triton.jit
def col_sum_kernel(x, out, n_rows, n_cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    acc = tl.zeros([BLOCK_C], dtype=tl.float32)
    for r0 in range(0, n_rows, BLOCK_R):
        rows = r0 + tl.arange(0, BLOCK_R)
        m = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
        acc += tl.sum(tl.load(x + rows[:, None] * n_cols + cols[None, :], mask=m, other=0.0), axis=0)
    tl.store(out + cols, acc, mask=cols < n_cols)


@triton.jit
def softmax_kernel(x, out, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x + row * stride + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
    v = v - tl.max(v, axis=0)
    e = tl.exp(v)
    tl.store(out + row * stride + cols, (e / tl.sum(e, axis=0)).to(out.dtype.element_ty), mask=cols < n_cols)


@triton.jit
def layernorm_kernel(x, w, b, out, mean_out, rstd_out, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    v = tl.load(x + row * n_cols + cols, mask=m, other=0.0).to(tl.float32)
    mean = tl.sum(v, axis=0) / n_cols
    d = tl.where(m, v - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / n_cols + eps)
    y = d * rstd * tl.load(w + cols, mask=m).to(tl.float32) + tl.load(b + cols, mask=m).to(tl.float32)
    tl.store(out + row * n_cols + cols, y.to(tl.float16), mask=m)
    tl.store(mean_out + row, mean)
    tl.store(rstd_out + row, rstd)


@triton.jit
def rmsnorm_kernel(x, w, out, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    v = tl.load(x + row * n_cols + cols, mask=m, other=0.0).to(tl.float32)
    r = tl.rsqrt(tl.sum(v * v, axis=0) / n_cols + eps)
    tl.store(out + row * n_cols + cols, (v * r * tl.load(w + cols, mask=m).to(tl.float32)).to(tl.bfloat16), mask=m)


@triton.jit
def matmul_kernel(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K, BK):
        ka = k0 + rk
        at = tl.load(a + rm[:, None] * sam + ka[None, :] * sak, mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.0)
        bt = tl.load(b + ka[:, None] * sbk + rn[None, :] * sbn, mask=(ka[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(at, bt)
    tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(c.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def flash_attn_fwd_kernel(q, k, v, o, seq, sm_scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    bh = tl.program_id(1)
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rd = tl.arange(0, D)
    base = bh * seq * D
    qt = tl.load(q + base + rm[:, None] * D + rd[None, :], mask=rm[:, None] < seq, other=0.0)
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    for n0 in range(0, seq, BN):
        rn = n0 + tl.arange(0, BN)
        kt = tl.load(k + base + rn[None, :] * D + rd[:, None], mask=rn[None, :] < seq, other=0.0)
        s = tl.dot(qt, kt) * sm_scale
        s = tl.where(rn[None, :] < seq, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        vt = tl.load(v + base + rn[:, None] * D + rd[None, :], mask=rn[:, None] < seq, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt)
        m_i = m_new
    tl.store(o + base + rm[:, None] * D + rd[None, :], (acc / l_i[:, None]).to(o.dtype.element_ty),
             mask=rm[:, None] < seq)


@triton.jit
def convert_kernel(x, out_f16, out_bf16, out_i32, out_from_int, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x + offs, mask=m)
    tl.store(out_f16 + offs, v.to(tl.float16), mask=m)
    tl.store(out_bf16 + offs, v.to(tl.bfloat16), mask=m)
    i = v.to(tl.int32)
    tl.store(out_i32 + offs, i, mask=m)
    tl.store(out_from_int + offs, (i * 3 + 1).to(tl.float32), mask=m)


@triton.jit
def int_math_kernel(a, b, out_div, out_mod, out_bits, out_udiv, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(a + offs, mask=m, other=1)
    y = tl.load(b + offs, mask=m, other=1)
    tl.store(out_div + offs, x // y, mask=m)
    tl.store(out_mod + offs, x % y, mask=m)
    tl.store(out_bits + offs, ((x << 3) ^ (y >> 1)) & 0x7FFF | tl.minimum(x, y), mask=m)
    tl.store(out_udiv + offs, (x.to(tl.uint32) // 7).to(tl.int32), mask=m)


@triton.jit
def atomic_kernel(x, idx, hist, out_max, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x + offs, mask=m)
    i = tl.load(idx + offs, mask=m)
    tl.atomic_add(hist + i, v, mask=m)
    tl.atomic_max(out_max + i, (v * 1000).to(tl.int32), mask=m)


@triton.jit
def cumsum_kernel(x, out, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(out + row * n_cols + cols, tl.cumsum(v, axis=0), mask=cols < n_cols)


@triton.jit
def transpose_kernel(x, out, M, N, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    t = tl.load(x + rm[:, None] * N + rn[None, :], mask=(rm[:, None] < M) & (rn[None, :] < N))
    tl.store(out + rn[:, None] * M + rm[None, :], tl.trans(t), mask=(rn[:, None] < N) & (rm[None, :] < M))


@triton.jit
def grid_info_kernel(out):
    """tl.num_programs reads the hidden block counts: zeros there would make it 0."""
    pid = tl.program_id(0) + tl.num_programs(0) * (tl.program_id(1) + tl.num_programs(1) * tl.program_id(2))
    tl.store(out + pid * 4 + tl.arange(0, 4),
             tl.where(tl.arange(0, 4) == 0, tl.num_programs(0),
                      tl.where(tl.arange(0, 4) == 1, tl.num_programs(1),
                               tl.where(tl.arange(0, 4) == 2, tl.num_programs(2), pid))))


@triton.jit
def matmul_lowp_kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                       INT_ACC: tl.constexpr, PRECISION: tl.constexpr):
    """Row-major A [M, K] @ B [K, N] -> C [M, N] (int32 accumulation for int8, fp32 otherwise); PRECISION is
    tl.dot's input_precision ("ieee" / "tf32" for fp32 operands)."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], dtype=tl.int32 if INT_ACC else tl.float32)
    for k0 in range(0, K, BK):
        ka = k0 + rk
        at = tl.load(a + rm[:, None] * K + ka[None, :], mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.0)
        bt = tl.load(b + ka[:, None] * N + rn[None, :], mask=(ka[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(at, bt, input_precision=PRECISION)
    tl.store(c + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def dot_scaled_kernel(a, a_scale, b, b_scale, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                      FMT_A: tl.constexpr, FMT_B: tl.constexpr, PACK_A: tl.constexpr, PACK_B: tl.constexpr):
    """MX matmul: A [M, K/PACK_A] and B^T [N, K/PACK_B] hold FMT_A / FMT_B elements (PACK per byte: 2 for e2m1),
    with one E8M0 scale byte per 32 elements of K in a_scale [M, K/32] / b_scale [N, K/32]; C [M, N] fp32."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rka = tl.arange(0, BK // PACK_A)
    rkb = tl.arange(0, BK // PACK_B)
    rks = tl.arange(0, BK // 32)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K, BK):
        at = tl.load(a + rm[:, None] * (K // PACK_A) + (k0 // PACK_A + rka)[None, :])
        bt = tl.load(b + rn[:, None] * (K // PACK_B) + (k0 // PACK_B + rkb)[None, :])
        sa = tl.load(a_scale + rm[:, None] * (K // 32) + (k0 // 32 + rks)[None, :])
        sb = tl.load(b_scale + rn[:, None] * (K // 32) + (k0 // 32 + rks)[None, :])
        acc = tl.dot_scaled(at, sa, FMT_A, tl.trans(bt), sb, FMT_B, acc)
    tl.store(c + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def dot_scaled_bf16_kernel(a, b, b_scale, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                           FMT_B: tl.constexpr, PACK_B: tl.constexpr):
    """bf16 A [M, K] (no scale) times an MX B^T [N, K/PACK_B] with E8M0 scales b_scale [N, K/32]: Triton upcasts B
    to bf16 (gfx950: the scaled conversions v_cvt_scalef32_pk_bf16_*) and runs bf16 MFMAs."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    rkb = tl.arange(0, BK // PACK_B)
    rks = tl.arange(0, BK // 32)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K, BK):
        at = tl.load(a + rm[:, None] * K + (k0 + rk)[None, :])
        bt = tl.load(b + rn[:, None] * (K // PACK_B) + (k0 // PACK_B + rkb)[None, :])
        sb = tl.load(b_scale + rn[:, None] * (K // 32) + (k0 // 32 + rks)[None, :])
        acc = tl.dot_scaled(at, None, "bf16", tl.trans(bt), sb, FMT_B, acc)
    tl.store(c + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def fp8_cast_kernel(x, out_fp8, out_back, n, BLOCK: tl.constexpr):
    """fp32 -> fp8 (the arch's e4m3) and back to fp32."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    q = tl.load(x + offs, mask=m).to(out_fp8.dtype.element_ty)
    tl.store(out_fp8 + offs, q, mask=m)
    tl.store(out_back + offs, q.to(tl.float32), mask=m)


# ------------------------------------------------------------------------------------------------------
# the corpus: kernel, signature, constexprs, one launch with its arguments, reference, tolerance
# ------------------------------------------------------------------------------------------------------

def T(shape, dtype, init="randn", out=False):
    return {"kind": "tensor", "shape": list(shape), "dtype": dtype, "init": init, "output": out}


def S(value):
    return {"kind": "scalar", "value": value}


def _cdiv(a, b):
    return -(-a // b)


def corpus():
    """[(name, fn, signature, constexprs, options, grid, args, reference, tol)]; arg names come from fn."""
    n, rows, cols = 1000, 6, 200
    M, N, K = 72, 80, 96  # dynamic shapes: none a multiple of the tiles
    seq, heads, D = 80, 2, 64
    f16, bf16 = "fp16", "bf16"
    return [
        ("add", add_kernel, {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32"}, {"BLOCK": 256},
         {"num_warps": 4}, (_cdiv(n, 256),), [T([n], "float32"), T([n], "float32"), T([n], "float32", "zeros", True),
                                               S(n)], "add", (1e-6, 1e-6)),
        ("gelu_silu", gelu_silu_kernel, {"x": "*fp16", "out_gelu": "*fp16", "out_silu": "*fp16", "n": "i32"},
         {"BLOCK": 512}, {"num_warps": 4}, (_cdiv(n, 512),),
         [T([n], "float16"), T([n], "float16", "zeros", True), T([n], "float16", "zeros", True), S(n)],
         "gelu_silu", (2e-3, 2e-3)),
        ("row_sum_max", row_sum_max_kernel, {"x": "*fp32", "out_sum": "*fp32", "out_max": "*fp32",
                                             "out_argmax": "*i32", "n_cols": "i32", "stride": "i32"},
         {"BLOCK": 256}, {"num_warps": 4}, (rows,),
         [T([rows, cols], "float32"), T([rows], "float32", "zeros", True), T([rows], "float32", "zeros", True),
          T([rows], "int32", "zeros", True), S(cols), S(cols)], "row_sum_max", (1e-4, 1e-5)),
        ("col_sum", col_sum_kernel, {"x": "*fp32", "out": "*fp32", "n_rows": "i32", "n_cols": "i32"},
         {"BLOCK_R": 16, "BLOCK_C": 64}, {"num_warps": 4}, (_cdiv(cols, 64),),
         [T([37, cols], "float32"), T([cols], "float32", "zeros", True), S(37), S(cols)], "col_sum", (1e-4, 1e-5)),
        ("softmax", softmax_kernel, {"x": "*fp16", "out": "*fp16", "n_cols": "i32", "stride": "i32"},
         {"BLOCK": 256}, {"num_warps": 4}, (rows,),
         [T([rows, cols], "float16"), T([rows, cols], "float16", "zeros", True), S(cols), S(cols)],
         "softmax", (2e-3, 1e-2)),
        ("layernorm", layernorm_kernel, {"x": "*fp16", "w": "*fp16", "b": "*fp16", "out": "*fp16",
                                         "mean_out": "*fp32", "rstd_out": "*fp32", "n_cols": "i32", "eps": "fp32"},
         {"BLOCK": 256}, {"num_warps": 4}, (rows,),
         [T([rows, cols], "float16"), T([cols], "float16"), T([cols], "float16"),
          T([rows, cols], "float16", "zeros", True), T([rows], "float32", "zeros", True),
          T([rows], "float32", "zeros", True), S(cols), S(1e-5)], "layernorm", (1e-2, 1e-2)),
        ("rmsnorm", rmsnorm_kernel, {"x": "*bf16", "w": "*bf16", "out": "*bf16", "n_cols": "i32", "eps": "fp32"},
         {"BLOCK": 256}, {"num_warps": 4}, (rows,),
         [T([rows, cols], "bfloat16"), T([cols], "bfloat16"), T([rows, cols], "bfloat16", "zeros", True),
          S(cols), S(1e-6)], "rmsnorm", (2e-2, 2e-2)),
    ] + [
        (f"matmul_{dt}", matmul_kernel,
         {"a": f"*{tt}", "b": f"*{tt}", "c": f"*{tt}", **{s: "i32" for s in
                                                         ("M", "N", "K", "sam", "sak", "sbk", "sbn", "scm", "scn")}},
         {"BM": 32, "BN": 32, "BK": bk}, {"num_warps": 4}, (_cdiv(M, 32), _cdiv(N, 32)),
         [T([M, K], dt), T([K, N], dt), T([M, N], dt, "zeros", True), S(M), S(N), S(K), S(K), S(1), S(N), S(1),
          S(N), S(1)], "matmul", tol)
        # fp32 inputs would need the f32/xf32 MFMAs, which the emulator does not model
        for dt, tt, bk, tol in (("float16", f16, 32, (2e-2, 2e-2)), ("bfloat16", bf16, 32, (5e-2, 3e-2)))
    ] + [
        ("flash_attn_fwd", flash_attn_fwd_kernel, {"q": "*fp16", "k": "*fp16", "v": "*fp16", "o": "*fp16",
                                                   "seq": "i32", "sm_scale": "fp32"},
         {"D": D, "BM": 32, "BN": 32}, {"num_warps": 4}, (_cdiv(seq, 32), heads),
         [T([heads, seq, D], "float16"), T([heads, seq, D], "float16"), T([heads, seq, D], "float16"),
          T([heads, seq, D], "float16", "zeros", True), S(seq), S(D ** -0.5)], "flash_attn_fwd", (2e-2, 2e-2)),
        ("convert", convert_kernel, {"x": "*fp32", "out_f16": "*fp16", "out_bf16": "*bf16", "out_i32": "*i32",
                                     "out_from_int": "*fp32", "n": "i32"}, {"BLOCK": 256}, {"num_warps": 4},
         (_cdiv(n, 256),), [T([n], "float32", "randn100"), T([n], "float16", "zeros", True),
                            T([n], "bfloat16", "zeros", True), T([n], "int32", "zeros", True),
                            T([n], "float32", "zeros", True), S(n)], "convert", (0.0, 0.0)),
        ("int_math", int_math_kernel, {"a": "*i32", "b": "*i32", "out_div": "*i32", "out_mod": "*i32",
                                       "out_bits": "*i32", "out_udiv": "*i32", "n": "i32"}, {"BLOCK": 256},
         {"num_warps": 4}, (_cdiv(n, 256),),
         [T([n], "int32", "randint_signed"), T([n], "int32", "randint_nonzero"), T([n], "int32", "zeros", True),
          T([n], "int32", "zeros", True), T([n], "int32", "zeros", True), T([n], "int32", "zeros", True), S(n)],
         "int_math", (0.0, 0.0)),
        ("atomics", atomic_kernel, {"x": "*fp32", "idx": "*i32", "hist": "*fp32", "out_max": "*i32", "n": "i32"},
         {"BLOCK": 256}, {"num_warps": 4}, (_cdiv(n, 256),),
         [T([n], "float32", "rand"), T([n], "int32", "randint16"), T([16], "float32", "zeros", True),
          T([16], "int32", "zeros", True), S(n)], "atomics", (1e-4, 1e-5)),
        ("cumsum", cumsum_kernel, {"x": "*fp32", "out": "*fp32", "n_cols": "i32"}, {"BLOCK": 128},
         {"num_warps": 2}, (rows,), [T([rows, 100], "float32"), T([rows, 100], "float32", "zeros", True), S(100)],
         "cumsum", (1e-4, 1e-5)),
        ("transpose", transpose_kernel, {"x": "*fp16", "out": "*fp16", "M": "i32", "N": "i32"},
         {"BM": 64, "BN": 64}, {"num_warps": 4}, (_cdiv(70, 64), _cdiv(90, 64)),
         [T([70, 90], "float16"), T([90, 70], "float16", "zeros", True), S(70), S(90)], "transpose", (0.0, 0.0)),
        ("grid_info", grid_info_kernel, {"out": "*i32"}, {}, {"num_warps": 1}, (3, 2, 2),
         [T([12, 4], "int32", "zeros", True)], "grid_info", (0.0, 0.0)),
    ]


# fp8 element types per arch: gfx942 has the "fnuz" encodings (bias 8 / 16, one NaN), gfx950 the OCP ones
FP8_TYPES = {"gfx942": {"e4m3": ("fp8e4b8", "float8_e4m3fnuz"), "e5m2": ("fp8e5b16", "float8_e5m2fnuz")},
             "gfx950": {"e4m3": ("fp8e4nv", "float8_e4m3fn"), "e5m2": ("fp8e5", "float8_e5m2")}}


def lowp_corpus(arch):
    """The low-precision kernels for `arch`: int8 / fp8 / fp32 matmuls (matrix_instr_nonkdim picks the 16x16 or
    32x32 MFMA), tl.dot_scaled (MXFP8 / MXFP4; more variants on gfx950, whose scaled MFMAs they check) and an fp8
    cast."""
    M, N, K = 48, 40, 256  # the matmuls mask M and N tails; K is a multiple of every MFMA's K
    fp8 = FP8_TYPES[arch]
    mm_sig = {"a": None, "b": None, "c": None, "M": "i32", "N": "i32", "K": "i32"}

    def matmul(name, a_ty, b_ty, c_ty, a_t, b_t, c_t, init, int_acc, precision, nonkdim, bk, ref, tol):
        sig = dict(mm_sig, a=f"*{a_ty}", b=f"*{b_ty}", c=f"*{c_ty}")
        return (name, matmul_lowp_kernel, sig,
                {"BM": 32, "BN": 32, "BK": bk, "INT_ACC": int_acc, "PRECISION": precision},
                {"num_warps": 4, "matrix_instr_nonkdim": nonkdim}, (_cdiv(M, 32), _cdiv(N, 32)),
                [T([M, K], a_t, init), T([K, N], b_t, init), T([M, N], c_t, "zeros", True), S(M), S(N), S(K)],
                ref, tol)

    e4, e5 = fp8["e4m3"], fp8["e5m2"]
    entries = [
        matmul("matmul_i8", "i8", "i8", "i32", "int8", "int8", "int32", "randint8", True, "ieee", 32, 64,
               "matmul_int", (0.0, 0.0)),
        matmul("matmul_i8_16", "i8", "i8", "i32", "int8", "int8", "int32", "randint8", True, "ieee", 16, 128,
               "matmul_int", (0.0, 0.0)),
        matmul("matmul_fp8", e4[0], e4[0], "fp32", e4[1], e4[1], "float32", "randn", False, "ieee", 16, 128,
               "matmul_f32", (1e-4, 1e-5)),
        matmul("matmul_fp8_bf8", e4[0], e5[0], "fp32", e4[1], e5[1], "float32", "randn", False, "ieee", 32, 64,
               "matmul_f32", (1e-4, 1e-5)),
        matmul("matmul_f32", "fp32", "fp32", "fp32", "float32", "float32", "float32", "randn", False, "ieee", 32,
               32, "matmul_f32", (1e-4, 1e-5)),
        matmul("matmul_f32_16", "fp32", "fp32", "fp32", "float32", "float32", "float32", "randn", False, "ieee", 16,
               32, "matmul_f32", (1e-4, 1e-5)),
        ("fp8_cast", fp8_cast_kernel, {"x": "*fp32", "out_fp8": f"*{e4[0]}", "out_back": "*fp32", "n": "i32"},
         {"BLOCK": 256}, {"num_warps": 4}, (4,),
         [T([1000], "float32", "fp8_range_and_beyond"), T([1000], e4[1], "zeros", True),
          T([1000], "float32", "zeros", True), S(1000)], "fp8_cast", (0.0, 0.0)),
    ]
    if arch == "gfx942":  # xf32 (tf32-like inputs): gfx942 only, gfx950 dropped it
        entries.append(matmul("matmul_xf32", "fp32", "fp32", "fp32", "float32", "float32", "float32", "randn",
                              False, "tf32", 32, 32, "matmul_xf32", (1e-4, 1e-5)))
    # tl.dot_scaled: gfx950 runs it on the scaled MFMAs; gfx942, which has none, upcasts to bf16 MFMAs in software.
    # (name, A format, B format, matrix_instr_nonkdim, BK): on gfx950 both MFMA sizes for each format, and a mixed
    # pair (an 8-bit and a 4-bit operand are laid out in K differently: only a mixed pair shows it)
    scaled = [("dot_scaled_mxfp8", "e4m3", "e4m3", 32, 128), ("dot_scaled_mxfp4", "e2m1", "e2m1", 16, 256)]
    if arch == "gfx950":
        scaled += [("dot_scaled_mxfp8_16", "e4m3", "e4m3", 16, 128), ("dot_scaled_mxfp4_32", "e2m1", "e2m1", 32, 256),
                   ("dot_scaled_mxfp8_mxfp4", "e4m3", "e2m1", 32, 128),
                   ("dot_scaled_mxfp4_mxfp8_16", "e2m1", "e4m3", 16, 128)]
    for name, fa, fb, nonkdim, bk in scaled:
        entries.append(_dot_scaled_entry(name, fa, fb, nonkdim, bk))
    for fmt in ("e4m3", "e2m1"):  # bf16 x MX: the upcast path (gfx950's scaled conversions to bf16)
        entries.append(_dot_scaled_bf16_entry(fmt))
    return entries


def _dot_scaled_entry(name, fa, fb, nonkdim, bk):
    """One tl.dot_scaled launch: MX operands are OCP formats on every arch (e4m3 = Triton's fp8e4nv)."""
    Ms, Ns, Ks = 32, 64, 512

    def operand(fmt, rows):
        pack = 2 if fmt == "e2m1" else 1
        sig = "*u8" if pack == 2 else "*fp8e4nv"
        el = ("uint8", "randbyte") if pack == 2 else ("float8_e4m3fn", "randn")
        return pack, sig, T([rows, Ks // pack], el[0], el[1])

    pa, sig_a, ta = operand(fa, Ms)
    pb, sig_b, tb = operand(fb, Ns)
    sig = {"a": sig_a, "a_scale": "*u8", "b": sig_b, "b_scale": "*u8", "c": "*fp32", "M": "i32", "N": "i32",
           "K": "i32"}
    return (name, dot_scaled_kernel, sig,
            {"BM": 32, "BN": 32, "BK": bk, "FMT_A": fa, "FMT_B": fb, "PACK_A": pa, "PACK_B": pb},
            {"num_warps": 4, "matrix_instr_nonkdim": nonkdim}, (Ms // 32, Ns // 32),
            [ta, T([Ms, Ks // 32], "uint8", "e8m0"), tb, T([Ns, Ks // 32], "uint8", "e8m0"),
             T([Ms, Ns], "float32", "zeros", True), S(Ms), S(Ns), S(Ks)],
            # values reach ~1e6: fp32 partial sums round at ~0.06 there, in the hardware's own order
            f"dot_scaled_{fa}_{fb}", (0.25, 1e-5))


def _dot_scaled_bf16_entry(fmt):
    M, N, K = 32, 64, 256
    pack = 2 if fmt == "e2m1" else 1
    el, sig = (("uint8", "randbyte"), "*u8") if pack == 2 else (("float8_e4m3fn", "randn"), "*fp8e4nv")
    name = "dot_scaled_bf16_" + ("mxfp4" if pack == 2 else "mxfp8")
    return (name, dot_scaled_bf16_kernel,
            {"a": "*bf16", "b": sig, "b_scale": "*u8", "c": "*fp32", "M": "i32", "N": "i32", "K": "i32"},
            {"BM": 32, "BN": 32, "BK": 128, "FMT_B": fmt, "PACK_B": pack}, {"num_warps": 4}, (M // 32, N // 32),
            [T([M, K], "bfloat16"), T([N, K // pack], *el), T([N, K // 32], "uint8", "e8m0"),
             T([M, N], "float32", "zeros", True), S(M), S(N), S(K)],
            f"dot_scaled_bf16_{fmt}", (0.05, 1e-5))  # |c| reaches ~1e5: fp32 partial sums round at ~0.01


def _arg_names(fn):
    return list(fn.arg_names)


def build(entry, arch, out_dir):
    name, fn, sig, constexprs, options, grid, args, ref, tol = entry
    signature = dict(sig)
    for c in constexprs:
        signature[c] = "constexpr"
    src = ASTSource(fn, signature=signature, constexprs=dict(constexprs))
    k = triton.compile(src, target=GPUTarget("hip", arch, 64), options=dict(options))
    names = [a for a in _arg_names(fn) if a not in constexprs]
    assert len(names) == len(args), (name, names)
    described = [dict(a, name=n) for n, a in zip(names, args)]
    # Triton appends two pointers to every AMD kernel: global scratch and profile scratch (unused here)
    described += [{"kind": "null", "name": "global_scratch"}, {"kind": "null", "name": "profile_scratch"}]
    stem = f"{name}.{arch}"
    with open(os.path.join(out_dir, stem + ".hsaco"), "wb") as f:
        f.write(k.asm["hsaco"])
    with open(os.path.join(out_dir, stem + ".amdgcn"), "w") as f:
        f.write(k.asm["amdgcn"])
    meta = {
        "name": name, "arch": arch, "kernel": k.name, "compiler": f"triton {triton.__version__}",
        "hsaco": stem + ".hsaco", "amdgcn": stem + ".amdgcn",
        "grid": list(grid) + [1] * (3 - len(grid)), "block": [64 * k.metadata.num_warps, 1, 1],
        "shared_mem": k.metadata.shared, "args": described, "reference": ref,
        "atol": tol[0], "rtol": tol[1], "constexprs": dict(constexprs),
    }
    with open(os.path.join(out_dir, stem + ".json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    return stem


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--arch", nargs="*", default=list(ARCHES))
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    for arch in a.arch:
        for entry in corpus() + lowp_corpus(arch):
            if a.only and entry[0] not in a.only:
                continue
            try:
                print("built", build(entry, arch, a.out))
            except Exception as exc:  # report and go on: one kernel must not stop the corpus
                print(f"FAILED {entry[0]} {arch}: {type(exc).__name__}: {exc}", file=sys.stderr)


if __name__ == "__main__":
    main()
