"""Integer and fp8 dtypes against torch: the emulator's fp8 / bf8 conversion instructions over every code and a sweep
of fp32 values on both arches (their encodings: FNUZ on gfx942, OCP on gfx950); one kernel per arch that casts
fp32 to every dtype, loads every dtype into fragments of its own and converts back, computes with ints (+ - * & | ^
~ << >> // % comparisons, T.max, T.if_then_else, int8 wrap-around) and reduces int32 fragments; constant folding;
the refusals (an fp8 format the arch lacks, float `%`, absmax of ints).
"""
import sys
from pathlib import Path

import pytest
import torch

import tilegcn
from tilegcn import language as T
from tilegcn.errors import CompileError
from tilegcn.ir import elemfn

sys.path.insert(0, str(Path(__file__).parent))
from asm.emukit import lane_ir, llc_module, run_lanes  # noqa: E402

ARCHES = ["gfx942", "gfx950"]
FP8 = {"gfx942": ("float8_e4m3fnuz", "float8_e5m2fnuz"), "gfx950": ("float8_e4m3fn", "float8_e5m2")}
INTS = ("int8", "uint8", "int16", "int32", "int64")


@pytest.fixture(autouse=True)
def _emulator(monkeypatch):
    monkeypatch.setenv("TILEGCN_DEVICE", "emulator")


def fp32_sweep() -> torch.Tensor:
    """Edge values (0, -0, inf, NaN, ties, the formats' largest values and just past them, denormals), magnitudes
    from 1e-12 to 1e6 of both signs and random values, padded to a multiple of 256."""
    edges = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 448.0, 464.0, 465.0, 480.0, 240.0, 247.9, 248.0,
             57344.0, 61440.0, 61441.0, 2.0 ** -10, 2.0 ** -17, 1.5 * 2.0 ** -18, 2.0 ** -9 * 1.5, 1e-40, -1e-40,
             0.0625 * 1.0625, 0.0625 * 1.1875, 3.5, 5.5, -6.5]
    gen = torch.Generator().manual_seed(0)
    x = torch.cat([torch.tensor(edges), torch.logspace(-12, 6, 600), -torch.logspace(-12, 6, 600),
                   torch.randn(1000, generator=gen) * 100])
    return torch.cat([x, torch.zeros((-x.numel()) % 256)])


def _same(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """Equal values (signs of zeros included), NaN where NaN."""
    g, w = got.double(), want.double()
    return ((g == w) & (torch.signbit(g) == torch.signbit(w))) | (g.isnan() & w.isnan())


@pytest.mark.parametrize("arch", ARCHES)
def test_emulated_fp8_conversions_match_torch_on_every_code_and_a_sweep(arch):
    e4m3, e5m2 = (getattr(torch, n) for n in FP8[arch])
    codes = torch.arange(256, dtype=torch.int32)
    words = codes | ((codes + 1) & 0xFF) << 8 | ((codes + 2) & 0xFF) << 16 | ((codes + 3) & 0xFF) << 24
    out = run_lanes("""v_cvt_f32_fp8 v20, v10
                       v_cvt_f32_bf8 v21, v10
                       v_cvt_f32_fp8_sdwa v22, v10 src0_sel:BYTE_2
                       v_cvt_pk_f32_bf8_sdwa v[24:25], v10 src0_sel:WORD_1
                       v_mov_b32 v23, v25""", [words], n_out=4, arch=arch)
    byte = lambda k, dt: ((codes + k) & 0xFF).to(torch.uint8).view(dt).float()  # noqa: E731 - torch decodes
    for got, want in ((out[0], byte(0, e4m3)), (out[1], byte(0, e5m2)), (out[2], byte(2, e4m3)),
                      (out[3], byte(3, e5m2))):
        assert _same(got.view(torch.float32), want).all()

    x = fp32_sweep()
    keep = torch.full(x.shape, 0x12345678, dtype=torch.int32)
    out = run_lanes("""v_mov_b32 v20, v11
                       v_cvt_pk_fp8_f32 v20, v10, v10
                       v_mov_b32 v21, v11
                       v_cvt_pk_bf8_f32 v21, v10, v10 op_sel:[0,0,1]""", [x, keep], n_out=2, arch=arch)
    lo, hi = out[0].long() & 0xFFFFFFFF, out[1].long() & 0xFFFFFFFF
    assert ((lo >> 16) == 0x1234).all() and ((hi & 0xFFFF) == 0x5678).all()  # the other half is kept
    for got, dt in (((lo & 0xFF), e4m3), ((lo >> 8) & 0xFF, e4m3), ((hi >> 16) & 0xFF, e5m2), (hi >> 24, e5m2)):
        want = x.to(dt)
        if dt == torch.float8_e4m3fn:  # the instruction does not saturate: past 448 (464 rounds to it) it gives NaN
            want = torch.where(x.abs() > 464, torch.full_like(x, float("nan")), want.float()).to(dt)
        assert _same(got.to(torch.uint8).view(dt).float(), want.float()).all(), dt


FP8_INTRINSICS = """
%fa = bitcast i32 %x0 to float
%fb = bitcast i32 %x1 to float
%y0 = call i32 @llvm.amdgcn.cvt.pk.fp8.f32(float %fa, float %fb, i32 %x2, i1 true)
%f1 = call float @llvm.amdgcn.cvt.f32.fp8(i32 %x3, i32 2)
%y1 = bitcast float %f1 to i32
%v = call <2 x float> @llvm.amdgcn.cvt.pk.f32.bf8(i32 %x3, i1 true)
%e = extractelement <2 x float> %v, i32 1
%y2 = bitcast float %e to i32
"""
FP8_DECLARATIONS = """declare i32 @llvm.amdgcn.cvt.pk.fp8.f32(float, float, i32, i1)
declare float @llvm.amdgcn.cvt.f32.fp8(i32, i32)
declare <2 x float> @llvm.amdgcn.cvt.pk.f32.bf8(i32, i1)
"""


@pytest.mark.parametrize("arch", ARCHES)
def test_llc_byte_selection_of_the_fp8_intrinsics_runs_as_they_define_it(arch):
    """LLVM's intrinsics name the word / byte they convert (word_sel = true: bits [31:16]; byte 2; the high word):
    llc encodes that as op_sel / SDWA selects, which the emulator must read the same way."""
    e4m3, e5m2 = (getattr(torch, n) for n in FP8[arch])
    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn(256, generator=gen) * 50, torch.randn(256, generator=gen)
    old = torch.randint(-2**31, 2**31 - 1, (256,), dtype=torch.int32, generator=gen)
    word = torch.randint(-2**31, 2**31 - 1, (256,), dtype=torch.int32, generator=gen)
    mod = llc_module(lane_ir(FP8_INTRINSICS, 4, 3) + FP8_DECLARATIONS, arch)
    assert {"v_cvt_pk_fp8_f32", "v_cvt_f32_fp8", "v_cvt_pk_f32_bf8"} <= {i.base for i in mod.instrs}
    out = [torch.zeros(256, dtype=torch.int32) for _ in range(3)]
    mod.launch("k", grid=(1, 1, 1), block=(256, 1, 1), args=[a.view(torch.int32), b.view(torch.int32), old, word, *out])
    code = lambda v: v.to(e4m3).view(torch.uint8).long()  # noqa: E731 - |a| < 448 on this seed: no overflow
    pair = code(a) | code(b) << 8
    assert torch.equal(out[0].long() & 0xFFFFFFFF, (old.long() & 0xFFFF) | pair << 16)
    byte = lambda k, dt: ((word.long() >> 8 * k) & 0xFF).to(torch.uint8).view(dt).float()  # noqa: E731
    assert _same(out[1].view(torch.float32), byte(2, e4m3)).all()
    assert _same(out[2].view(torch.float32), byte(3, e5m2)).all()


@tilegcn.jit
def dtype_tour(X, Y0, Y1, Y2, Y3, Y4, Y5, Y6, I0, I1, I2, I3, I4, I5, I6, Z, A, B, W, A4, R):
    """Per dtype d (Yd, Id of dtype d): Yd = T.cast(X, d) stored as d through a shared buffer; Z[d] = Id loaded into a
    d fragment, copied to an fp32 one, Z[7 + d] the same through a shared buffer, Z[14 + d] Id loaded into the fp32
    fragment directly. W = int math on int32 A, B (and an int8 wrap-around); R = reduce_max / min / sum of A4's
    rows."""
    with T.Kernel(X.shape[0] // 64, threads=64) as bx:
        x = T.alloc_fragment((64,), "float32")
        z = T.alloc_fragment((64,), "float32")
        T.copy(X[bx * 64], x)
        Ys = (Y0, Y1, Y2, Y3, Y4, Y5, Y6)
        for k, (Y, In) in enumerate(zip(Ys, (I0, I1, I2, I3, I4, I5, I6))):
            y = T.alloc_fragment((64,), Y.dtype)
            staged = T.alloc_shared((64,), Y.dtype)
            for i in T.Parallel(64):
                y[i] = T.cast(x[i], Y.dtype)
            T.copy(y, staged)  # fragment -> shared -> global
            T.copy(staged, Y[bx * 64])
            v = T.alloc_fragment((64,), In.dtype)
            T.copy(In[bx * 64], v)  # global -> fragment
            T.copy(v, z)
            T.copy(z, Z[k, bx * 64])
            T.copy(In[bx * 64], staged)  # global -> shared -> fragment
            T.copy(staged, v)
            T.copy(v, z)
            T.copy(z, Z[len(Ys) + k, bx * 64])
            T.copy(In[bx * 64], z)  # global d -> fp32 fragment, converted on the way
            T.copy(z, Z[2 * len(Ys) + k, bx * 64])
        a = T.alloc_fragment((64,), "int32")
        b = T.alloc_fragment((64,), "int32")
        w = T.alloc_fragment((64,), "int32")
        n = T.alloc_fragment((64,), "int8")
        T.copy(A[bx * 64], a)
        T.copy(B[bx * 64], b)
        for i in T.Parallel(64):
            w[i] = (a[i] + b[i]) * 3 - (a[i] ^ b[i]) + (a[i] // b[i]) + (a[i] % b[i]) + (a[i] >> 2) + (b[i] << 3)
        T.copy(w, W[0, bx * 64])
        for i in T.Parallel(64):
            w[i] = T.max(a[i], b[i]) - T.min(a[i], -b[i]) + (a[i] & 0xFF0) + (a[i] | 5) + ~b[i] + (a[i] % 8) + \
                (a[i] // 4) + T.if_then_else(a[i] < b[i], a[i], 7) + T.abs(-b[i]) + (i - 3)
        T.copy(w, W[1, bx * 64])
        for i in T.Parallel(64):
            n[i] = a[i] * 7 + b[i]  # wraps to int8 on the store
        T.copy(n, W[2, bx * 64])
        for i in T.Parallel(64):
            w[i] = T.if_then_else((a[i] >= 0) & (b[i] != 3), T.cast(T.cast(a[i], "float32") * 0.5, "int32"), -1)
        T.copy(w, W[3, bx * 64])
        t = T.alloc_fragment((16, 4), "int32")
        r = T.alloc_fragment((16,), "int32")
        T.copy(A4[bx * 16, 0], t)
        T.reduce_max(t, r, dim=1)
        T.copy(r, R[0, bx * 16])
        T.reduce_min(t, r, dim=1)
        T.copy(r, R[1, bx * 16])
        T.reduce_sum(t, r, dim=1)
        T.copy(r, R[2, bx * 16])


@pytest.mark.parametrize("arch", ARCHES)
def test_casts_loads_int_math_and_int_reductions_match_torch(arch):
    dtypes = [getattr(torch, n) for n in INTS + FP8[arch]]
    x = fp32_sweep()
    n = x.numel()
    in_range = torch.where(torch.isfinite(x) & (x.abs() < 2.0 ** 31), x, torch.zeros_like(x))
    ys = [torch.empty(n, dtype=dt) for dt in dtypes]
    ins = [(in_range if dt.is_floating_point is False else x).to(dt) for dt in dtypes]
    gen = torch.Generator().manual_seed(1)
    a = torch.randint(-100000, 100000, (n,), dtype=torch.int32, generator=gen)
    b = torch.randint(-60, 60, (n,), dtype=torch.int32, generator=gen)
    b[b == 0] = 9
    z, w, r = torch.empty(3 * len(dtypes), n), torch.empty(4, n, dtype=torch.int32), torch.empty(3, n // 4,
                                                                                             dtype=torch.int32)
    dtype_tour(x, *ys, *ins, z, a, b, w, a.view(-1, 4), r, arch=arch)
    for dt, y, v, zk, zs, zc in zip(dtypes, ys, ins, z, z[len(dtypes):], z[2 * len(dtypes):]):
        # torch narrows a float to int8 / uint8 / int16 through int64 (truncation, then wrap-around): so does T.cast,
        # for values within int32's range (past it the device saturates where the host's result is undefined)
        want = in_range.to(torch.int64).to(dt) if not dt.is_floating_point else x.to(dt)
        defined = (x == in_range) | dt.is_floating_point
        assert _same(y.double(), want.double())[defined].all(), f"{arch} T.cast to {dt}"
        assert all(_same(got, v.float()).all() for got in (zk, zs, zc)), f"{arch} load of {dt}"
    i = torch.arange(n) % 64
    floor = torch.div(a, b, rounding_mode="floor")
    assert torch.equal(w[0], (a + b) * 3 - (a ^ b) + floor + torch.remainder(a, b) + (a >> 2) + (b << 3))
    assert torch.equal(w[1], torch.maximum(a, b) - torch.minimum(a, -b) + (a & 0xFF0) + (a | 5) + ~b + a % 8 + a // 4
                       + torch.where(a < b, a, 7) + b.abs() + (i - 3))
    assert torch.equal(w[2], (a * 7 + b).to(torch.int8).to(torch.int32))
    assert torch.equal(w[3], torch.where((a >= 0) & (b != 3), (a.float() * 0.5).to(torch.int32), -1))
    tiles = a.view(-1, 4)
    assert torch.equal(r[0], tiles.amax(1)) and torch.equal(r[1], tiles.amin(1))
    assert torch.equal(r[2], tiles.sum(1).to(torch.int32))


@tilegcn.jit
def _ragged(X, B, Y, s, *, bm=16, bn=32):
    """Tiles past the tensor's edges (masked), a global vector read per element, an index as an int value, int
    operations on a runtime int scalar."""
    M, N = X.shape
    with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=64) as (bx, by):
        x = T.alloc_fragment((bm, bn), X.dtype)
        T.copy(X[by * bm, bx * bn], x)
        for i, j in T.Parallel(bm, bn):
            x[i, j] = x[i, j] * 2 + B[bx * bn + j] - j + (s % 3) * (s >> 1)
        T.copy(x, Y[by * bm, bx * bn])


@pytest.mark.parametrize("arch", ARCHES)
def test_int8_tiles_at_ragged_edges_wrap_as_torch(arch):
    gen = torch.Generator().manual_seed(2)
    x = torch.randint(-128, 128, (37, 45), dtype=torch.int8, generator=gen)
    b = torch.randint(-128, 128, (45,), dtype=torch.int8, generator=gen)
    y = torch.zeros_like(x)
    _ragged(x, b, y, -7, arch=arch)
    j = torch.arange(45) % 32
    assert torch.equal(y, (x.to(torch.int64) * 2 + b - j + (-7 % 3) * (-7 >> 1)).to(torch.int8))


def test_constants_convert_as_torch():
    """Numbers known while tracing: T.<dtype>(v) folds with torch's rules (fp8 over the sweep, every format)."""
    assert T.int8(300) == 44 and T.uint8(-1) == 255 and T.int16(-2.9) == -2 and T.int32(2 ** 31) == -2 ** 31
    x = fp32_sweep()
    for name in elemfn.FP8_FORMATS:
        folded = torch.tensor([elemfn.round_to_fp8(name, float(v)) for v in x])
        assert _same(folded, x.to(getattr(torch, name)).float()).all(), name


@tilegcn.jit
def _fp8_store(X, Y):
    with T.Kernel(1, threads=64):
        x = T.alloc_fragment((64,), "float32")
        T.copy(X[0], x)
        T.copy(x, Y[0])


@tilegcn.jit
def _int_absmax(A, Y):
    with T.Kernel(1, threads=64):
        a = T.alloc_fragment((16, 4), "int32")
        m = T.alloc_fragment((16,), "int32")
        T.copy(A[0, 0], a)
        T.reduce_absmax(a, m, dim=1)
        T.copy(m, Y[0])


def test_refusals_name_the_way_around():
    x = torch.zeros(64)
    with pytest.raises(CompileError, match=r"Y is float8_e5m2fnuz, an fp8 format gfx950 does not have.*"
                                           r"use T.float8_e5m2 \(torch.float8_e5m2\) on gfx950"):
        _fp8_store(x, torch.zeros(64, dtype=torch.float8_e5m2fnuz), arch="gfx950")
    with pytest.raises(CompileError, match=r"Y is float8_e4m3fn, .* use T.float8_e4m3fnuz"):
        _fp8_store(x, torch.zeros(64, dtype=torch.float8_e4m3fn), arch="gfx942")
    with pytest.raises(CompileError, match=r"absmax / abssum reduce float fragments; T.copy it into a float32"):
        _int_absmax(torch.zeros(16, 4, dtype=torch.int32), torch.zeros(16, dtype=torch.int32))
