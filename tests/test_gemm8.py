"""T.gemm on 8-bit operands (issue 22): fp8 / bf8 (float8_e4m3fnuz / e5m2fnuz on gfx942, the OCP float8_e4m3fn /
e5m2 on gfx950) with an fp32 accumulator, int8 with an int32 one, on the emulated device against torch: the fp32
(int64) matmul of exactly the 8-bit inputs, K-major operands and ones stored (K, X), e4m3 x e5m2, 8-bit fragment A
operands. The per-token / per-channel scaled epilogue stored as bf16 or fp8; a global element read before T.Parallel;
the int4 weight GEMM example on gfx942; the refusals; the operand layout the plan relies on against AMD's Matrix
Instruction Calculator. Small tiles: the file takes about 20 s."""
from __future__ import annotations

import json
import pathlib
import re
import sys

import pytest
import torch

import tilegcn
from tilegcn import language as T
from tilegcn.amdgcn.arch import get_arch
from tilegcn.errors import CompileError
from tilegcn.passes.gemm_plan import plan_gemm

CALC = json.loads((pathlib.Path(__file__).parent / "data" / "mfma_layouts_cdna3.json").read_text())["instructions"]
FP8 = {"gfx942": torch.float8_e4m3fnuz, "gfx950": torch.float8_e4m3fn}
BF8 = {"gfx942": torch.float8_e5m2fnuz, "gfx950": torch.float8_e5m2}


@pytest.fixture(autouse=True)
def emulator(monkeypatch):
    monkeypatch.setenv("TILEGCN_DEVICE", "emulator")


@tilegcn.jit
def gemm8(A, B, C, *, acc_dtype="float32", block_M=64, block_N=64, block_K=64, threads=256, num_stages=1, init=0):
    """C = init + A @ B^T with B given as (N, K) (8-bit operands are K-major), accumulated in `acc_dtype`."""
    M, K = A.shape
    N = B.shape[0]
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), A.dtype)
        B_s = T.alloc_shared((block_N, block_K), B.dtype)
        acc = T.alloc_fragment((block_M, block_N), acc_dtype)
        T.fill(acc, init)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
            T.copy(A[by * block_M, k * block_K], A_s)
            T.copy(B[bx * block_N, k * block_K], B_s)
            T.gemm(A_s, B_s, acc, transpose_B=True)
        T.copy(acc, C[by * block_M, bx * block_N])


@tilegcn.jit
def gemm8_scaled(A, B, scale_A, scale_B, C, *, block_M=64, block_N=64, block_K=64, threads=256):
    """C = (A @ B^T) * scale_A[:, None] * scale_B[None, :] (per token, per channel), rounded to C's dtype on store."""
    M, K = A.shape
    N = B.shape[0]
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), A.dtype)
        B_s = T.alloc_shared((block_N, block_K), B.dtype)
        acc = T.alloc_fragment((block_M, block_N), "float32")
        sa = T.alloc_fragment((block_M,), "float32")
        sb = T.alloc_fragment((block_N,), "float32")
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            T.copy(A[by * block_M, k * block_K], A_s)
            T.copy(B[bx * block_N, k * block_K], B_s)
            T.gemm(A_s, B_s, acc, transpose_B=True)
        T.copy(scale_A[by * block_M], sa)
        T.copy(scale_B[bx * block_N], sb)
        for i, j in T.Parallel(block_M, block_N):
            acc[i, j] = acc[i, j] * sa[i] * sb[j]
        T.copy(acc, C[by * block_M, bx * block_N])


def _fp8(shape, dtype, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _close_to_fp32(C, A, B):
    """Products of 8-bit floats are exact in fp32; what is left is the order of fp32 additions: <= K * 2^-24 * the
    sum of |products| (a dropped or mispaired k term moves an entry by ~1, far outside)."""
    ref = A.float() @ B.float().T
    bound = A.shape[1] * 2.0 ** -24 * (A.float().abs() @ B.float().abs().T) + 1e-6
    assert not C.isnan().any()
    assert bool(((C - ref).abs() <= bound).all()), f"max |C - ref| {(C - ref).abs().max().item():.3g}"


# (arch, operand dtype, num_stages, block_M, block_K, the MFMA): each arch its e4m3 and e5m2 encoding, pipelined and
# not, 32x32 and (a 32-row block over four waves) 16x16 tiles; gfx950 takes its f8f6f4 MFMAs (twice the fp8_fp8
# rate, cbsz / blgp naming the format) where block_K covers their K per read step (64 for 32x32, 128 for 16x16)
FLOAT_CASES = [("gfx942", FP8, 1, 64, 64, "v_mfma_f32_32x32x16_fp8_fp8"),
               ("gfx942", BF8, 2, 32, 64, "v_mfma_f32_16x16x32_bf8_bf8"),
               ("gfx950", FP8, 2, 64, 64, "v_mfma_f32_32x32x64_f8f6f4"),
               ("gfx950", BF8, 1, 64, 64, "v_mfma_f32_32x32x64_f8f6f4 cbsz:1 blgp:1"),
               ("gfx950", FP8, 1, 32, 128, "v_mfma_f32_16x16x128_f8f6f4"),
               ("gfx950", BF8, 2, 32, 64, "v_mfma_f32_16x16x32_bf8_bf8")]


@pytest.mark.parametrize("arch,dtypes,stages,block_M,block_K,mfma", FLOAT_CASES,
                         ids=[f"{a}-{d[a]}-s{s}-bm{m}-bk{k}".replace("torch.", "") for a, d, s, m, k, _ in FLOAT_CASES])
def test_fp8_gemm_matches_torch(arch, dtypes, stages, block_M, block_K, mfma):
    dt = dtypes[arch]
    A, B = _fp8((64, 128), dt, 1), _fp8((64, 128), dt, 2)
    C = torch.full((64, 64), float("nan"))
    cfg = dict(arch=arch, num_stages=stages, block_M=block_M, block_K=block_K)
    stats = gemm8(A, B, C, **cfg)
    _close_to_fp32(C, A, B)
    # the XOR swizzle of 16-byte chunks keeps byte rows conflict free too (the emulator's LDS bank model)
    assert not {m: n for m, n in stats.lds_bank_conflicts_by_mnemonic.items() if n}
    asm = gemm8.compile(A, B, C, **cfg).asm
    fills = {name for name, _ in get_arch(arch).acc_fill_mfmas()}  # T.clear: D = 0 * 0 + 0, any input type
    used = set()  # each MFMA of the kernel but T.clear's, with its modifiers (cbsz:1 ...)
    for line in asm.splitlines():
        words = line.split("//")[0].split()
        if words and words[0].startswith("v_mfma") and words[0] not in fills:
            used.add(" ".join([words[0]] + [w for w in words[1:] if re.fullmatch(r"\w+:\d+", w)]))
    assert used == {mfma}


@tilegcn.jit
def gemm8_stored(A, B, C, *, transpose_A=False, transpose_B=False, acc_dtype="float32", block_M=64, block_N=64,
                 block_K=64, threads=256, num_stages=1):
    """C = A @ B with A given as (M, K) or, transpose_A, (K, M) and B as (K, N) or, transpose_B, (N, K)."""
    K = A.shape[0] if transpose_A else A.shape[1]
    M = A.shape[1] if transpose_A else A.shape[0]
    N = B.shape[0] if transpose_B else B.shape[1]
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_K, block_M) if transpose_A else (block_M, block_K), A.dtype)
        B_s = T.alloc_shared((block_N, block_K) if transpose_B else (block_K, block_N), B.dtype)
        acc = T.alloc_fragment((block_M, block_N), acc_dtype)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
            if transpose_A:
                T.copy(A[k * block_K, by * block_M], A_s)
            else:
                T.copy(A[by * block_M, k * block_K], A_s)
            if transpose_B:
                T.copy(B[bx * block_N, k * block_K], B_s)
            else:
                T.copy(B[k * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, acc, transpose_A=transpose_A, transpose_B=transpose_B)
        T.copy(acc, C[by * block_M, bx * block_N])


# (arch, dtype, transpose_A, transpose_B, block_M, block_K, threads, the LDS instruction that transposes): gfx950
# reads a (K, X) tile with ds_read_b64_tr_b8 (32x32 and, for a 32-row block, 16x16 f8f6f4 tiles); gfx942 transposes
# in the register copy, one byte a write (rows of 64 bytes), two k (v_perm_b32, ds_write_b16) or four (64 threads:
# three v_perm_b32, ds_write_b32)
NOT_K_MAJOR = [("gfx950", FP8, True, False, 64, 64, 256, "ds_read_b64_tr_b8"),
               ("gfx950", BF8, True, False, 32, 128, 256, "ds_read_b64_tr_b8"),
               ("gfx950", "int8", False, False, 64, 64, 256, "ds_read_b64_tr_b8"),
               ("gfx942", FP8, False, False, 64, 64, 256, "ds_write_b8"),
               ("gfx942", BF8, True, True, 64, 128, 256, "ds_write_b16"),
               ("gfx942", "int8", True, False, 64, 128, 64, "ds_write_b32")]


@pytest.mark.parametrize("arch,dtypes,ta,tb,block_M,block_K,threads,transposer", NOT_K_MAJOR,
                         ids=[f"{c[0]}-{c[7]}-ta{int(c[2])}-tb{int(c[3])}" for c in NOT_K_MAJOR])
def test_operands_stored_k_by_x_match_torch(arch, dtypes, ta, tb, block_M, block_K, threads, transposer):
    """A as (K, M) (transpose_A) and B as (K, N) (no transpose_B), as TileLang writes them, on 8-bit operands."""
    gen = torch.Generator().manual_seed(11)
    if dtypes == "int8":
        A, B = (torch.randint(-128, 128, (64, 128), generator=gen, dtype=torch.int8) for _ in range(2))
        C, acc = torch.full((64, 64), -1, dtype=torch.int32), "int32"
    else:
        A, B = _fp8((64, 128), dtypes[arch], 12), _fp8((64, 128), dtypes[arch], 13)
        C, acc = torch.full((64, 64), float("nan")), "float32"
    args = (A.T.contiguous() if ta else A, B if tb else B.T.contiguous(), C)
    cfg = dict(arch=arch, transpose_A=ta, transpose_B=tb, acc_dtype=acc, block_M=block_M, block_K=block_K,
               threads=threads, num_stages=2)
    stats = gemm8_stored(*args, **cfg)
    if acc == "int32":
        assert torch.equal(C.long(), A.long() @ B.long().T)
    else:
        _close_to_fp32(C, A, B)
    assert not {m: n for m, n in stats.lds_bank_conflicts_by_mnemonic.items() if n}
    assert transposer in gemm8_stored.compile(*args, **cfg).asm


# (arch, A's format, B's format, block_K, the MFMA with its modifiers): T.gemm swaps the operands (srcA takes B), so
# e4m3 A x e5m2 B is gfx942's bf8_fp8 and, on gfx950's f8f6f4, cbsz (srcA) names B's format, blgp A's
MIXED = [("gfx942", FP8, BF8, 64, "v_mfma_f32_32x32x16_bf8_fp8"),
         ("gfx950", BF8, FP8, 64, "v_mfma_f32_32x32x64_f8f6f4 blgp:1"),
         ("gfx950", FP8, BF8, 32, "v_mfma_f32_32x32x16_bf8_fp8")]


@pytest.mark.parametrize("arch,a_dtypes,b_dtypes,block_K,mfma", MIXED, ids=[f"{c[0]}-{c[4]}" for c in MIXED])
def test_e4m3_times_e5m2_matches_torch(arch, a_dtypes, b_dtypes, block_K, mfma):
    A, B = _fp8((64, 128), a_dtypes[arch], 21), _fp8((64, 128), b_dtypes[arch], 22)
    C = torch.full((64, 64), float("nan"))
    gemm8(A, B, C, arch=arch, block_K=block_K)
    _close_to_fp32(C, A, B)
    asm = gemm8.compile(A, B, C, arch=arch, block_K=block_K).asm
    name, *mods = mfma.split()
    assert any(line.split()[:1] == [name] and all(m in line.split() for m in mods) for line in asm.splitlines())


def test_ragged_fp8_gemm_matches_torch():
    """M, N past the tile's edge and K = 100 (rows of 100 bytes: 4-byte loads, a masked last K tile) on the f8f6f4
    MFMAs of gfx950."""
    A, B = _fp8((80, 100), torch.float8_e4m3fn, 7), _fp8((48, 100), torch.float8_e4m3fn, 8)
    C = torch.full((80, 48), float("nan"))
    gemm8(A, B, C, arch="gfx950", num_stages=2)
    _close_to_fp32(C, A, B)


@pytest.mark.parametrize("arch,block_M,init", [("gfx942", 64, 0), ("gfx950", 32, -100000)])
def test_int8_gemm_is_exact(arch, block_M, init):
    """int32 accumulation, from 0 (an MFMA fill) or from a value that is no inline constant (v_accvgpr_write)."""
    gen = torch.Generator().manual_seed(3)
    A = torch.randint(-128, 128, (64, 128), generator=gen, dtype=torch.int8)
    B = torch.randint(-128, 128, (64, 128), generator=gen, dtype=torch.int8)
    C = torch.full((64, 64), -1, dtype=torch.int32)
    gemm8(A, B, C, acc_dtype="int32", arch=arch, block_M=block_M, num_stages=2, init=init)
    assert torch.equal(C.long(), init + A.long() @ B.long().T)


@pytest.mark.parametrize("arch,out", [("gfx942", torch.bfloat16), ("gfx950", torch.float8_e4m3fn)])
def test_scaled_epilogue_rounds_to_the_output_dtype(arch, out):
    A, B = _fp8((64, 128), FP8[arch], 4), _fp8((64, 128), FP8[arch], 5)
    gen = torch.Generator().manual_seed(6)
    sa, sb = torch.rand(64, generator=gen) * 0.1, torch.rand(64, generator=gen) * 0.1
    C = torch.zeros(64, 64, dtype=out)
    gemm8_scaled(A, B, sa, sb, C, arch=arch)
    ref = (A.float() @ B.float().T) * sa[:, None] * sb[None, :]
    ulp = 2.0 ** -(7 if out == torch.bfloat16 else 3)  # one unit in the last place of the output, relative
    torch.testing.assert_close(C.float(), ref.to(out).float(), rtol=ulp, atol=1e-3)
    assert (C.float() == ref.to(out).float()).float().mean() > 0.95  # almost all round as torch's cast does


def test_refusals_name_the_way_around():
    A = torch.zeros(64, 64, dtype=torch.float8_e4m3fn)
    with pytest.raises(CompileError, match=r"float8_e4m3fn, an fp8 format gfx942 does not have.*use T.float8_e4m3fnuz"):
        gemm8(A, A, torch.zeros(64, 64), arch="gfx942")
    A = torch.zeros(64, 64, dtype=torch.int8)
    with pytest.raises(CompileError, match=r"C must be an int32 fragment for int8"):
        gemm8(A, A, torch.zeros(64, 64, dtype=torch.int32), arch="gfx950")
    with pytest.raises(CompileError, match=r"one dtype.*\(got int8, float8_e4m3fn\), or be the arch's e4m3 and e5m2"):
        gemm8(A, torch.zeros(64, 64, dtype=torch.float8_e4m3fn), torch.zeros(64, 64), arch="gfx950")
    with pytest.raises(CompileError, match=r"float8_e5m2, an fp8 format gfx942 does not have.*T.float8_e5m2fnuz"):
        gemm8(torch.zeros(64, 64, dtype=torch.float8_e4m3fnuz), torch.zeros(64, 64, dtype=torch.float8_e5m2),
              torch.zeros(64, 64), arch="gfx942")


@pytest.mark.parametrize("name", ["v_mfma_f32_32x32x16_fp8_fp8", "v_mfma_f32_16x16x32_fp8_fp8"])
def test_plan_reads_the_calculators_fp8_operand_layout(name):
    """The plan feeds lane M * (k // kpl) + i the kpl consecutive bytes of row i from k = kpl * (lane // M), byte
    k % kpl of the operand registers: the calculator's A and B tables say the same, entry by entry."""
    calc = CALC[name]
    plan = plan_gemm("gfx942", "float8_e4m3fnuz", 64, 64, 128, 256 if calc["M"] == 32 else 1024, transpose_B=True)
    shape = plan.mfma
    assert shape.name("fp8") == name
    kpl = shape.k_per_lane
    assert plan.mfma_per_read * kpl * shape.elem_bytes == 16  # one 16-byte read feeds whole MFMAs
    for table, key_order in ((calc["A"], "ik"), (calc["B"], "kj")):
        for key, (lane, reg, lo, hi) in table.items():
            first, second = (int(x) for x in key.split(","))
            row, k = (first, second) if key_order == "ik" else (second, first)
            assert (lane, 4 * reg + lo // 8, hi - lo) == (shape.M * (k // kpl) + row, k % kpl, 7), (key, name)


@tilegcn.jit
def scale_by_one_element(X, S, Y, *, shared=False):
    """Y = X * S[0, bx]: one element of S read outside T.Parallel (global: a value; a shared tile's: refused)."""
    with T.Kernel(1, threads=64) as bx:
        x = T.alloc_fragment((64,), "float32")
        T.copy(X[0], x)
        if shared:
            s_s = T.alloc_shared((1, 4), "float32")
            T.copy(S[0, 0], s_s)
            s = s_s[0, bx]
        else:
            s = S[0, bx + 1]
        for i in T.Parallel(64):
            x[i] = x[i] * s
        T.copy(x, Y[0])


def test_one_global_element_outside_parallel_is_a_value():
    """DeepGEMM's `Scale_B = scales_b[bx * block_N // group_size, k]`: a whole index into a global tensor read where
    the element expression uses it; a shared tile's element is refused with the way around."""
    X, S, Y = torch.randn(64), torch.tensor([[2.0, -3.0, 5.0, 7.0]]), torch.zeros(64)
    scale_by_one_element(X, S, Y, arch="gfx942")
    assert torch.equal(Y, X * -3.0)
    with pytest.raises(CompileError, match=r"not a value: read shared elements inside T.Parallel"):
        scale_by_one_element(X, S, Y, shared=True, arch="gfx942")


def test_int4_weights_unpacked_for_the_bf16_matrix_cores_on_gfx942():
    """examples/lowp/int4_gemm.py on gfx942 (tests/test_examples.py runs it on the default gfx950): every byte's
    two signed nibbles, scaled per group of 32 along K, on a bf16 MFMA, against the format's definition."""
    sys.path.insert(0, str(pathlib.Path(__file__).parent.parent / "examples" / "lowp"))
    import int4_gemm

    gen = torch.Generator().manual_seed(9)
    A = torch.randn(64, 128, generator=gen).to(torch.bfloat16)
    QB = torch.randint(0, 256, (64, 64), dtype=torch.uint8, generator=gen)
    S = (torch.rand(64, 4, generator=gen) / 8).to(torch.bfloat16)
    C = torch.empty(64, 64, dtype=torch.bfloat16)
    int4_gemm.int4_gemm(A, QB, S, C, arch="gfx942")
    want = (A.float() @ int4_gemm.dequantize(QB, S).to(torch.bfloat16).float().T).to(torch.bfloat16).float()
    assert bool(((C.float() - want).abs() <= 2 ** -7 * want.abs() + 1e-3).all())
    assert "v_mfma_f32_32x32x8_bf16" in int4_gemm.int4_gemm.compile(A, QB, S, C, arch="gfx942").asm


@tilegcn.jit
def gemm_fragment_a(A, B, C, *, frag_dtype="float32", acc_dtype="int32"):
    """C = A @ B^T with A copied into a fragment of `frag_dtype` first (TileLang's gemm_rs)."""
    with T.Kernel(1, threads=256):
        A_f = T.alloc_fragment((64, 64), frag_dtype)
        B_s = T.alloc_shared((64, 64), B.dtype)
        acc = T.alloc_fragment((64, 64), acc_dtype)
        T.clear(acc)
        T.copy(A, A_f)
        T.copy(B, B_s)
        T.gemm(A_f, B_s, acc, transpose_B=True)
        T.copy(acc, C)


def test_an_8bit_fragment_a_goes_through_lds_and_a_float32_one_is_refused():
    gen = torch.Generator().manual_seed(5)
    A, B = (torch.randint(-128, 128, (64, 64), generator=gen, dtype=torch.int8) for _ in range(2))
    C = torch.zeros(64, 64, dtype=torch.int32)
    gemm_fragment_a(A, B, C, frag_dtype="int8", arch="gfx942")
    assert torch.equal(C.long(), A.long() @ B.long().T)
    assert "A_f_lds" in gemm_fragment_a.compile(A, B, C, frag_dtype="int8", arch="gfx942").ir
    with pytest.raises(CompileError, match=r"A fragment A_f is float32.*T.copy it into a fragment of one of those"):
        gemm_fragment_a(A.bfloat16(), B.bfloat16(), torch.zeros(64, 64), acc_dtype="float32", arch="gfx942")


@tilegcn.jit
def reinterpret_bytes(X, Y, *, to="int8"):
    """Y = the low byte of X's elements read as `to` (T.reinterpret: the W4A8 port's sign step)."""
    with T.Kernel(1, threads=64):
        x = T.alloc_fragment((256,), "int32")
        T.copy(X, x)
        for i in T.Parallel(256):
            x[i] = T.reinterpret(to, x[i].astype(T.uint8))
        T.copy(x, Y)


def test_reinterpret_to_int8_takes_the_low_byte_signed_and_fp8_is_refused():
    X = torch.arange(256, dtype=torch.int32) + 0x1200  # junk above the byte
    Y = torch.zeros(256, dtype=torch.int32)
    reinterpret_bytes(X, Y, arch="gfx942")
    assert torch.equal(Y, torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.int8).int())
    with pytest.raises(CompileError, match=r"reinterprets integer bits as bfloat16, float16, float32 or an integer"):
        reinterpret_bytes(X, Y, to="float8_e4m3fn", arch="gfx942")
