"""Vector ALU instructions on the emulated device, checked lane by lane against numpy/torch.

Each case is a small kernel (tests/asm/emukit.lane_kernel): thread t loads in_i[t] into v10+i, runs the
instructions under test and stores v20+j to out_j[t]. Assembled by LLVM, decoded from llvm-objdump.
"""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from asm.emukit import run_lanes  # noqa: E402

N = 512
U32 = 0xFFFFFFFF
gen = torch.Generator().manual_seed(1234)


def rand_i32(n=N):
    return torch.randint(-2**31, 2**31 - 1, (n,), dtype=torch.int32, generator=gen)


def u(t):
    """int32 tensor -> numpy int64 unsigned values."""
    return t.numpy().astype(np.int64) & U32


def s(x):
    """unsigned values -> signed (object arrays keep big products exact)."""
    x = np.asarray(x, dtype=object)
    return np.where(x >= 2**31, x - 2**32, x)


A, B, C = rand_i32(), rand_i32(), rand_i32()
a, b, c = u(A), u(B), u(C)

INT_CASES = {
    "v_add_u32 v20, v10, v11": a + b,
    "v_sub_u32 v20, v10, v11": a - b,
    "v_subrev_u32 v20, v10, v11": b - a,
    "v_mul_lo_u32 v20, v10, v11": a * b,
    "v_mul_hi_u32 v20, v10, v11": (a.astype(object) * b.astype(object)) >> 32,
    "v_mul_hi_i32 v20, v10, v11": (s(a) * s(b)) >> 32,
    "v_mad_u32_u24 v20, v10, v11, v12": (a & 0xFFFFFF) * (b & 0xFFFFFF) + c,
    "v_mul_u32_u24 v20, v10, v11": (a & 0xFFFFFF) * (b & 0xFFFFFF),
    "v_lshlrev_b32 v20, v10, v11": b << (a & 31),
    "v_lshrrev_b32 v20, v10, v11": b >> (a & 31),
    "v_ashrrev_i32 v20, v10, v11": s(b) >> (a & 31),
    "v_lshl_add_u32 v20, v10, 3, v12": (a << 3) + c,
    "v_add_lshl_u32 v20, v10, v11, 2": (a + b) << 2,
    "v_lshl_or_b32 v20, v10, 5, v12": (a << 5) | c,
    "v_and_or_b32 v20, v10, v11, v12": (a & b) | c,
    "v_or3_b32 v20, v10, v11, v12": a | b | c,
    "v_add3_u32 v20, v10, v11, v12": a + b + c,
    "v_and_b32 v20, v10, v11": a & b,
    "v_or_b32 v20, v10, v11": a | b,
    "v_xor_b32 v20, v10, v11": a ^ b,
    "v_not_b32 v20, v10": ~a,
    "v_bfe_u32 v20, v10, 5, 9": (a >> 5) & 511,
    "v_bfe_u32 v20, v10, v11, v12": np.where(c & 31 == 0, 0, (a >> (b & 31)) & ((1 << (c & 31)) - 1)),
    "v_bfe_i32 v20, v10, 5, 9": np.where((a >> 13) & 1, ((a >> 5) & 511) - 512, (a >> 5) & 511),
    "v_bfi_b32 v20, v10, v11, v12": (a & b) | (~a & c),
    "v_alignbit_b32 v20, v10, v11, 7": ((a << 32) | b) >> 7,
    "v_alignbit_b32 v20, v10, v11, v12": ((a << 32) | b) >> (c & 31),
    "v_max_u32 v20, v10, v11": np.maximum(a, b),
    "v_min_i32 v20, v10, v11": np.minimum(s(a), s(b)),
    "v_mov_b32 v20, 0x12345678": np.full(N, 0x12345678),
    "v_mov_b32 v20, -16": np.full(N, -16),
    "v_mov_b32 v20, 0.5": np.full(N, 0x3F000000),
    "v_mov_b32 v20, 0.15915494": np.full(N, 0x3E22F983),  # 1/(2*pi) inline constant
    "v_add_u32 v20, 64, v10": a + 64,
    "v_add_i32 v20, v10, 64": a + 64,  # aiter's hand-written gfx950 GEMM uses it
    "v_sub_i32 v20, v10, v11": a - b,
}


@pytest.mark.parametrize("asm", list(INT_CASES))
def test_integer_ops_match_numpy(asm):
    out = run_lanes(asm, [A, B, C])[0]
    expect = np.asarray(INT_CASES[asm]).astype(object) & U32
    assert np.array_equal(u(out), expect.astype(np.int64)), asm


def _perm_ref(s0, s1, sel):
    out = []
    for x, y, sl in zip(s0, s1, sel):
        by = [(int(y) >> 8 * i) & 255 for i in range(4)] + [(int(x) >> 8 * i) & 255 for i in range(4)]
        r = 0
        for i in range(4):
            k = (int(sl) >> 8 * i) & 255
            v = 255 if k >= 13 else 0 if k == 12 else (255 if by[(1, 3, 5, 7)[k - 8]] & 128 else 0) if k >= 8 else by[k]
            r |= v << 8 * i
        out.append(r)
    return np.array(out, dtype=np.int64)


def test_perm_b32_selects_bytes_sign_and_constants():
    sel = torch.randint(0, 16, (N, 4), generator=gen)
    selv = (sel[:, 0] | sel[:, 1] << 8 | sel[:, 2] << 16 | sel[:, 3] << 24).to(torch.int32)
    out = run_lanes("v_perm_b32 v20, v10, v11, v12", [A, B, selv])[0]
    assert np.array_equal(u(out), _perm_ref(a, b, u(selv)))


def _llvm_folded_perm(triples) -> list:
    """What LLVM's constant folding of llvm.amdgcn.perm (opt -passes=instcombine, from AMD's v_perm_b32
    definition) makes of each (s0, s1, selector): an outside oracle for the emulator's v_perm_b32."""
    import re
    import subprocess

    from tilegcn.toolchain import find_llvm

    opt = find_llvm("gfx942").tool("opt")
    if opt is None:
        pytest.skip("this LLVM has no opt")
    body = "".join(f"  %r{i} = call i32 @llvm.amdgcn.perm(i32 {a}, i32 {b}, i32 {c})\n"
                   f"  %p{i} = getelementptr i32, ptr addrspace(1) %out, i32 {i}\n"
                   f"  store i32 %r{i}, ptr addrspace(1) %p{i}\n" for i, (a, b, c) in enumerate(triples))
    ir = ("declare i32 @llvm.amdgcn.perm(i32, i32, i32)\n"
          f"define void @f(ptr addrspace(1) %out) {{\n{body}  ret void\n}}\n")
    out = subprocess.run([opt, "-mtriple=amdgcn-amd-amdhsa", "-mcpu=gfx942", "-passes=instcombine", "-S"],
                         input=ir, capture_output=True, text=True, check=True).stdout
    stores = re.findall(r"store i32 (-?\d+), ptr addrspace\(1\) (%out|%p(\d+))", out)
    assert len(stores) == len(triples), out
    folded = {0 if name == "%out" else int(i): int(v) & U32 for v, name, i in stores}
    return [folded[i] for i in range(len(triples))]


def test_perm_b32_agrees_with_llvm_constant_folding():
    """Selector bytes 0..15 (bytes, sign replication, 0x00, 0xFF) and the 16-bit half selectors the transposing
    GEMM copy packs k pairs with (0x05040100, 0x07060302)."""
    n = 64
    sel = torch.randint(0, 16, (n, 4), generator=gen)
    selv = (sel[:, 0] | sel[:, 1] << 8 | sel[:, 2] << 16 | sel[:, 3] << 24).to(torch.int32)
    selv[:2] = torch.tensor([0x05040100, 0x07060302], dtype=torch.int32)
    x, y = rand_i32(n), rand_i32(n)
    got = u(run_lanes("v_perm_b32 v20, v10, v11, v12", [x, y, selv], block=64)[0])
    want = _llvm_folded_perm(list(zip(u(x).tolist(), u(y).tolist(), u(selv).tolist())))
    assert got.tolist() == want


def test_carry_chain_builds_64bit_sums():
    """v_add_co_u32 / v_addc_co_u32 (VOP2 with vcc, VOP3 with an SGPR pair) and the borrow forms."""
    body = """v_add_co_u32 v20, vcc, v10, v12
              s_nop 1
              v_addc_co_u32 v21, vcc, v11, v13, vcc
              v_sub_co_u32_e64 v22, s[96:97], v10, v12
              s_nop 1
              v_subb_co_u32_e64 v23, s[96:97], v11, v13, s[96:97]"""  # a VALU-written carry: 2 wait states
    D = rand_i32()
    out = run_lanes(body, [A, B, C, D], n_out=4)
    x = (u(B).astype(object) << 32) | u(A)
    y = (u(D).astype(object) << 32) | u(C)
    ssum, sdiff = (x + y) & (2**64 - 1), (x - y) & (2**64 - 1)
    assert np.array_equal(u(out[0]), (ssum & U32).astype(np.int64))
    assert np.array_equal(u(out[1]), (ssum >> 32).astype(np.int64))
    assert np.array_equal(u(out[2]), (sdiff & U32).astype(np.int64))
    assert np.array_equal(u(out[3]), (sdiff >> 32).astype(np.int64))


def test_64bit_shifts():
    body = """v_lshlrev_b64 v[20:21], v12, v[10:11]
              v_lshrrev_b64 v[22:23], v12, v[10:11]
              v_ashrrev_i64 v[24:25], v12, v[10:11]"""
    sh = torch.randint(0, 64, (N,), dtype=torch.int32, generator=gen)
    outs = run_lanes(body, [A, B, sh], n_out=6)
    x = (u(B).astype(object) << 32) | u(A)
    xs = np.where(x >= 2**63, x - 2**64, x)
    k = u(sh)
    shl = (x << k) & (2**64 - 1)
    shr = x >> k
    sar = (xs >> k) & (2**64 - 1)
    for (o_lo, o_hi), ref in zip(((0, 1), (2, 3), (4, 5)), (shl, shr, sar)):
        assert np.array_equal(u(outs[o_lo]), (ref & U32).astype(np.int64))
        assert np.array_equal(u(outs[o_hi]), (ref >> 32).astype(np.int64))


FP = torch.randn(N, generator=gen) * 4
FQ = torch.randn(N, generator=gen) * 4
FR = torch.randn(N, generator=gen)


def run_f(body, ins=(FP, FQ, FR), n_out=1, **kw):
    return [o.view(torch.float32) for o in run_lanes(body, list(ins), n_out=n_out, **kw)]


def test_f32_arithmetic_is_exactly_rounded():
    outs = run_f("""v_add_f32 v20, v10, v11
                    v_sub_f32 v21, v10, v11
                    v_mul_f32 v22, v10, v11
                    v_fma_f32 v23, v10, v11, v12
                    v_mov_b32 v24, v12
                    v_fmac_f32 v24, v10, v11
                    v_subrev_f32 v25, v10, v11""", n_out=6)
    p, q, r = FP.double(), FQ.double(), FR.double()
    assert torch.equal(outs[0], FP + FQ)
    assert torch.equal(outs[1], FP - FQ)
    assert torch.equal(outs[2], FP * FQ)
    assert torch.equal(outs[3], (p * q + r).float())  # fused: one rounding of the exact value
    assert torch.equal(outs[4], (p * q + r).float())
    assert torch.equal(outs[5], FQ - FP)


def test_fma_rounds_once_where_mul_then_add_would_not():
    # (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 exactly; minus 1 keeps the 2^-24 only when fused
    x = torch.full((N,), 1.0 + 2.0**-12)
    fused = run_f("v_fma_f32 v20, v10, v10, -1.0", ins=(x,))[0]
    assert torch.all(fused == torch.tensor(2.0**-11 + 2.0**-24, dtype=torch.float32))
    unfused = run_f("v_mul_f32 v20, v10, v10\nv_add_f32 v20, -1.0, v20", ins=(x,))[0]
    assert torch.all(unfused == torch.tensor(2.0**-11, dtype=torch.float32))


def test_f32_unary_and_minmax():
    pos = FP.abs() + 0.25
    outs = run_f("""v_exp_f32 v20, v10
                    v_log_f32 v21, v11
                    v_rcp_f32 v22, v11
                    v_sqrt_f32 v23, v11
                    v_floor_f32 v24, v10
                    v_ceil_f32 v25, v10""", ins=(FP, pos), n_out=6)
    assert torch.allclose(outs[0], torch.exp2(FP), rtol=1e-6)
    assert torch.allclose(outs[1], torch.log2(pos), rtol=1e-6, atol=1e-7)
    assert torch.allclose(outs[2], 1 / pos, rtol=1e-6)
    assert torch.allclose(outs[3], pos.sqrt(), rtol=1e-6)
    assert torch.equal(outs[4], FP.floor()) and torch.equal(outs[5], FP.ceil())
    halves = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 3.7, -3.2, 7.0] * (N // 8))
    outs = run_f("""v_rndne_f32 v20, v10
                    v_trunc_f32 v21, v10
                    v_max_f32 v22, v10, v11
                    v_min_f32 v23, v10, v11
                    v_med3_f32 v24, v10, v11, 0.5""", ins=(halves, FQ), n_out=5)
    assert torch.equal(outs[0], torch.round(halves))  # ties to even
    assert torch.equal(outs[1], halves.trunc())
    assert torch.equal(outs[2], torch.maximum(halves, FQ)) and torch.equal(outs[3], torch.minimum(halves, FQ))
    med = torch.stack([halves, FQ, torch.full_like(FQ, 0.5)]).median(0).values
    assert torch.equal(outs[4], med)


def test_vop3_modifiers_neg_abs_clamp_omod():
    outs = run_f("""v_add_f32_e64 v20, -v10, |v11|
                    v_mul_f32_e64 v21, v10, v11 clamp
                    v_add_f32_e64 v22, v10, v11 mul:2
                    v_add_f32_e64 v23, -|v10|, v11 div:2
                    v_mul_f32_e64 v24, v10, v11 clamp mul:4""", n_out=5)
    assert torch.equal(outs[0], -FP + FQ.abs())
    assert torch.equal(outs[1], (FP * FQ).clamp(0, 1))
    assert torch.equal(outs[2], (FP + FQ) * 2)
    assert torch.equal(outs[3], (-FP.abs() + FQ) / 2)
    assert torch.equal(outs[4], (FP * FQ * 4).clamp(0, 1))


def test_inline_constants_in_float_and_integer_operands():
    outs = run_f("""v_add_f32 v20, 4.0, v10
                    v_mul_f32 v21, -0.5, v10
                    v_mul_f32 v22, 0.15915494, v10
                    v_add_f32 v23, 1, v10
                    v_add_f32 v24, 0x40490fdb, v10""", n_out=5)
    assert torch.equal(outs[0], 4.0 + FP)
    assert torch.equal(outs[1], -0.5 * FP)
    assert torch.equal(outs[2], torch.tensor(0.15915494, dtype=torch.float32) * FP)
    # integer inline constant 1 in a float op is the bit pattern 0x00000001 (a denormal), not 1.0;
    # this kernel's descriptor flushes f32 denormals (LLVM's default mode 0), so it adds zero
    assert torch.equal(outs[3], FP)
    assert torch.equal(outs[4], torch.tensor(3.1415927, dtype=torch.float32) + FP)


def test_f32_compare_kinds_including_nan():
    p = torch.tensor([1.0, 2.0, float("nan"), 3.0, -1.0, float("nan"), 0.0, -0.0] * (N // 8))
    q = torch.tensor([2.0, 2.0, 1.0, float("nan"), -2.0, float("nan"), -0.0, 0.0] * (N // 8))
    ops = ["lt", "eq", "le", "gt", "lg", "ge", "o", "u", "nge", "nlg", "ngt", "nle", "neq", "nlt"]
    # s_nop 1: a VALU-written VCC / SGPR pair read by a VALU needs 2 wait states (docs/hazards.md)
    body = "\n".join(f"v_cmp_{op}_f32 vcc, v10, v11\ns_nop 1\nv_cndmask_b32 v{20 + i}, 0, 1, vcc"
                     for i, op in enumerate(ops[:8]))
    body2 = "\n".join(f"v_cmp_{op}_f32_e64 s[96:97], v10, v11\ns_nop 1\nv_cndmask_b32_e64 v{20 + i}, 0, 1, s[96:97]"
                      for i, op in enumerate(ops[8:]))
    o1 = run_lanes(body, [p, q], n_out=8)
    o2 = run_lanes(body2, [p, q], n_out=6)
    nan = p.isnan() | q.isnan()
    ref = {"lt": p < q, "eq": p == q, "le": p <= q, "gt": p > q, "lg": (p < q) | (p > q), "ge": p >= q, "o": ~nan,
           "u": nan, "nge": ~(p >= q), "nlg": ~((p < q) | (p > q)), "ngt": ~(p > q), "nle": ~(p <= q),
           "neq": ~(p == q), "nlt": ~(p < q)}
    for i, op in enumerate(ops):
        got = (o1 + o2)[i]
        assert torch.equal(got.bool(), ref[op]), op


def test_integer_compares_signed_and_unsigned():
    body = """v_cmp_lt_u32 vcc, v10, v11
              s_nop 1
              v_cndmask_b32 v20, 0, 1, vcc
              v_cmp_lt_i32_e64 s[96:97], v10, v11
              s_nop 1
              v_cndmask_b32_e64 v21, 0, 1, s[96:97]
              v_cmp_ne_u32 vcc, v10, v10
              s_nop 1
              v_cndmask_b32 v22, v10, v11, vcc
              v_cmp_ge_u32 vcc, v10, v11
              s_nop 1
              v_cndmask_b32 v23, v10, v11, vcc"""
    outs = run_lanes(body, [A, B], n_out=4)
    assert np.array_equal(u(outs[0]), (a < b).astype(np.int64))
    assert np.array_equal(u(outs[1]), (A < B).numpy().astype(np.int64))
    assert torch.equal(outs[2], A)
    assert np.array_equal(u(outs[3]), np.where(a >= b, b, a))


def test_conversions_int_float():
    f = torch.cat([FP * 1e5, torch.tensor([float("nan"), float("inf"), -float("inf"), 5e9, -5e9, -0.7, 2.5, 4e9])])
    f = f[:N]
    f[-8:] = torch.tensor([float("nan"), float("inf"), -float("inf"), 5e9, -5e9, -0.7, 2.5, 4e9])
    outs = run_lanes("""v_cvt_u32_f32 v20, v10
                        v_cvt_i32_f32 v21, v10
                        v_cvt_f32_u32 v22, v11
                        v_cvt_f32_i32 v23, v11""", [f, A], n_out=4)
    fd = np.nan_to_num(f.double().numpy(), nan=0.0)
    assert np.array_equal(u(outs[0]), np.trunc(np.clip(fd, 0, 2**32 - 1)).astype(np.int64))
    assert np.array_equal(outs[1].numpy(), np.trunc(np.clip(fd, -2**31, 2**31 - 1)).astype(np.int32))
    assert torch.equal(outs[2].view(torch.float32), torch.tensor(a, dtype=torch.float64).float())
    assert torch.equal(outs[3].view(torch.float32), A.float())


def _specials(n):
    x = torch.randn(n, generator=gen) * 100
    x[:16] = torch.tensor([0.0, -0.0, 65504.0, 65520.0, 70000.0, -70000.0, 1e-8, 6e-8, float("inf"), -float("inf"),
                           float("nan"), 1.0009765625, 1.00048828125, 3.0e38, -1.5e-5, 2049.0])
    return x


def test_f32_to_f16_and_bf16_round_to_nearest_even_like_torch():
    x, y = _specials(N), torch.randn(N, generator=gen)
    outs = run_lanes("""v_cvt_f16_f32 v20, v10
                        v_cvt_pkrtz_f16_f32 v21, v10, v11
                        v_cvt_f32_f16 v22, v20
                        v_pack_b32_f16 v23, v20, v21 op_sel:[0,1]""", [x, y], n_out=4)
    h = x.to(torch.float16)
    assert torch.equal(outs[0] & 0xFFFF, h.view(torch.int16).to(torch.int32) & 0xFFFF)
    assert torch.equal(outs[0] >> 16, torch.zeros(N, dtype=torch.int32))  # bits [31:16] zeroed
    assert torch.equal(outs[2].view(torch.float32)[~h.isnan()], h.float()[~h.isnan()])
    # round toward zero, against an independent reference: the f16 of largest magnitude <= |x|
    all_f16 = torch.arange(0, 0x7C01, dtype=torch.int32).to(torch.int16).view(torch.float16).double()  # 0 .. inf
    for got, src in (((outs[1] & 0xFFFF), x), ((outs[1] >> 16) & 0xFFFF, y)):
        ok = ~src.isnan()
        mag = src.double().abs()[ok]
        idx = torch.searchsorted(all_f16, mag, right=True) - 1
        ref = all_f16[idx].clamp(max=65504.0) * torch.sign(src.double()[ok])
        ref = torch.where(mag.isinf(), src.double()[ok], ref)
        rtz = got.to(torch.int16).view(torch.float16).double()[ok]
        assert torch.equal(rtz, ref)
    assert torch.equal(outs[3] & 0xFFFF, outs[0] & 0xFFFF)
    assert torch.equal((outs[3] >> 16) & 0xFFFF, (outs[1] >> 16) & 0xFFFF)


def test_cvt_pk_bf16_f32_rne_on_gfx950_only():
    from tilegcn.errors import EmulatorError
    from asm.emukit import build, lane_kernel
    x, y = _specials(N), torch.randn(N, generator=gen) * 1e3
    out, back = run_lanes("v_cvt_pk_bf16_f32 v20, v10, v11\nv_cvt_f32_bf16 v21, v20", [x, y], n_out=2,
                          arch="gfx950")
    lo = (out & 0xFFFF).to(torch.int16).view(torch.bfloat16)
    hi = (out >> 16).to(torch.int16).view(torch.bfloat16)
    ref_lo, ref_hi = x.to(torch.bfloat16), y.to(torch.bfloat16)
    keep = ~ref_lo.isnan()
    assert torch.equal(lo[keep].view(torch.int16), ref_lo[keep].view(torch.int16))
    assert torch.equal(hi.view(torch.int16), ref_hi.view(torch.int16))
    assert lo[~keep].isnan().all()
    assert torch.equal(back.view(torch.float32)[keep], ref_lo[keep].float())  # bf16 -> f32 is exact
    # the same code object decoded as gfx942 (where the instruction does not exist) is refused
    text = lane_kernel("v_cvt_pk_bf16_f32 v20, v10, v11", 2, 1, "gfx950")
    mod = build(text, "gfx950", "gfx942")
    with pytest.raises(EmulatorError, match="pc 0x"):
        mod.launch("k", (1, 1, 1), (64, 1, 1), [torch.zeros(64), torch.zeros(64), torch.zeros(64)])


def test_packed_f16_ops_with_op_sel_and_neg():
    xh = torch.randn(2 * N, generator=gen).to(torch.float16)
    yh = torch.randn(2 * N, generator=gen).to(torch.float16)
    zh = torch.randn(2 * N, generator=gen).to(torch.float16)
    xi, yi, zi = (t.view(torch.int32) for t in (xh, yh, zh))
    outs = run_lanes("""v_pk_add_f16 v20, v10, v11
                        v_pk_mul_f16 v21, v10, v11 op_sel:[1,0] neg_lo:[0,1]
                        v_pk_fma_f16 v22, v10, v11, v12
                        v_pk_add_f16 v23, v10, 1.0 op_sel_hi:[1,0]""", [xi, yi, zi], n_out=4)
    X, Y, Z = (t.view(N, 2).float() for t in (xh, yh, zh))
    half = lambda t: t.view(torch.float16).view(N, 2).float()  # noqa: E731
    assert torch.equal(half(outs[0]), (X + Y).half().float())
    lo = (X[:, 1] * -Y[:, 0]).half().float()
    hi = (X[:, 1] * Y[:, 1]).half().float()
    assert torch.equal(half(outs[1]), torch.stack([lo, hi], 1))
    exact = (X.double() * Y.double() + Z.double())
    assert torch.equal(half(outs[2]), exact.half().float())  # single rounding (exact product fits in f64)
    assert torch.equal(half(outs[3]), torch.stack([(X[:, 0] + 1).half().float(), (X[:, 1] + 1).half().float()], 1))


def test_packed_f32_fma_mul_add_with_op_sel():
    P, Q, R = (torch.randn(2 * N, generator=gen) for _ in range(3))
    ins = [t.view(N, 2)[:, i].contiguous() for t in (P, Q, R) for i in (0, 1)]
    outs = run_lanes("""v_pk_fma_f32 v[20:21], v[10:11], v[12:13], v[14:15]
                        v_pk_mul_f32 v[22:23], v[10:11], v[12:13] op_sel:[1,0] op_sel_hi:[0,1]
                        v_pk_add_f32 v[24:25], v[10:11], v[12:13] neg_lo:[1,0] neg_hi:[0,1]""", ins, n_out=6)
    p0, p1, q0, q1, r0, r1 = (t.double() for t in ins)
    f = lambda t: t.view(torch.float32)  # noqa: E731
    assert torch.equal(f(outs[0]), (p0 * q0 + r0).float()) and torch.equal(f(outs[1]), (p1 * q1 + r1).float())
    assert torch.equal(f(outs[2]), ins[1] * ins[2]) and torch.equal(f(outs[3]), ins[0] * ins[3])
    assert torch.equal(f(outs[4]), -ins[0] + ins[2]) and torch.equal(f(outs[5]), ins[1] - ins[3])


def test_lane_ops_mbcnt_readlane_writelane_readfirstlane():
    body = """v_mbcnt_lo_u32_b32 v20, -1, 0
              v_mbcnt_hi_u32_b32 v20, -1, v20
              v_readlane_b32 s96, v10, 5
              v_readfirstlane_b32 s97, v10
              s_nop 1
              v_mov_b32 v21, s96
              v_mov_b32 v22, s97
              v_mov_b32 v23, v11
              v_writelane_b32 v23, s96, 63"""
    outs = run_lanes(body, [A, B], n_out=4, block=64)
    lane = torch.arange(N) % 64
    assert torch.equal(outs[0], lane.to(torch.int32))
    base = (torch.arange(N) // 64) * 64
    assert torch.equal(outs[1], A[base + 5])
    assert torch.equal(outs[2], A[base])
    expect = B.clone()
    expect[lane == 63] = A[base + 5][lane == 63]
    assert torch.equal(outs[3], expect)


def test_exec_masking_keeps_inactive_lanes():
    """v_cmpx / s_and_saveexec restrict EXEC; VALU writes only active lanes; EXEC restored after."""
    body = """v_mov_b32 v20, v11
              v_cmp_gt_i32 vcc, v10, 0
              s_and_saveexec_b64 s[96:97], vcc
              v_mov_b32 v20, 7
              s_or_b64 exec, exec, s[96:97]
              v_mov_b32 v21, v11
              v_cmpx_lt_i32 vcc, v10, 0
              v_add_u32 v21, 1, v21
              s_mov_b64 exec, -1
              v_mov_b32 v22, 3"""
    outs = run_lanes(body, [A, B], n_out=3)
    assert torch.equal(outs[0], torch.where(A > 0, torch.tensor(7, dtype=torch.int32), B))
    assert torch.equal(outs[1], torch.where(A < 0, B + 1, B))
    assert torch.equal(outs[2], torch.full((N,), 3, dtype=torch.int32))


def test_accvgpr_moves_through_agprs():
    out = run_lanes("""v_accvgpr_write_b32 a3, v10
                       v_accvgpr_mov_b32 a5, a3
                       v_accvgpr_write_b32 a6, 0
                       v_accvgpr_read_b32 v20, a5
                       v_accvgpr_read_b32 v21, a6""", [A], n_out=2, vgprs=72, accum=64)
    assert torch.equal(out[0], A) and torch.equal(out[1], torch.zeros(N, dtype=torch.int32))
