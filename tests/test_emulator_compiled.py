"""Instructions other compilers emit, run on the emulated device and checked against torch/numpy.

The kernels are compiled from LLVM IR by `llc` (tests/asm/emukit.run_ir): LLVM is the oracle for which
instruction sequences real compilers produce (integer division on v_rcp_iflag_f32, fp32 division on
v_div_scale/fmas/fixup, 64-bit multiply-add, CDNA4's v_bitop3_b32 ...), torch for what they must compute.
Each case also asserts that the instruction it is about is in the compiled code, so a change in LLVM's
choices cannot silently turn a test into one that checks something else.
"""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from asm.emukit import lane_ir, llc_module, run_ir  # noqa: E402

N = 512
gen = torch.Generator().manual_seed(7)


def mnemonics(body, n_in, ty, arch, decls=""):
    mod = llc_module(lane_ir(body, n_in, 1, ty) + decls, arch)
    return {i.base for i in mod.instrs}


def ints(lo, hi, dtype=torch.int32, n=N):
    return torch.randint(lo, hi, (n,), dtype=dtype, generator=gen)


@pytest.mark.parametrize("op,arch", [("udiv", "gfx942"), ("sdiv", "gfx942"), ("urem", "gfx942"), ("srem", "gfx942"),
                                     ("sdiv", "gfx950")])
def test_integer_division_sequences_built_on_rcp_iflag(op, arch):
    a = ints(-2**31, 2**31 - 1)
    b = torch.cat([ints(-2**31, 2**31 - 1, n=N // 2), ints(-300, 300, n=N // 2)])
    b[b == 0] = 1
    b[:4] = torch.tensor([1, -1, 2**31 - 1, -2**31], dtype=torch.int32)
    a[:4] = torch.tensor([-2**31, -2**31, -1, -2**31], dtype=torch.int32)
    if op.startswith("s"):
        b[1] = 3  # INT_MIN / -1 is undefined in LLVM IR
    body = f"%y0 = {op} i32 %x0, %x1"
    assert "v_rcp_iflag_f32" in mnemonics(body, 2, "i32", arch)
    got = run_ir(body, [a, b], arch=arch)[0]
    ua, ub = a.long() & 0xFFFFFFFF, b.long() & 0xFFFFFFFF
    ref = {"udiv": ua // ub, "urem": ua % ub, "sdiv": torch.div(a.long(), b.long(), rounding_mode="trunc"),
           "srem": torch.fmod(a.long(), b.long())}[op]
    assert torch.equal(got.long() & 0xFFFFFFFF, ref & 0xFFFFFFFF)


@pytest.mark.parametrize("op", ["udiv", "srem"])
def test_64bit_division(op):
    a = torch.randint(-2**62, 2**62, (N,), dtype=torch.int64, generator=gen)
    b = torch.cat([torch.randint(1, 2**40, (N // 2,), generator=gen), torch.randint(1, 1000, (N // 2,), generator=gen)])
    got = run_ir(f"%y0 = {op} i64 %x0, %x1", [a, b], ty="i64")[0]
    ref = torch.fmod(a, b)
    if op == "udiv":
        ref = torch.tensor([(int(x) & (2**64 - 1)) // int(y) for x, y in zip(a, b)], dtype=torch.uint64).view(torch.int64)
    assert torch.equal(got, ref)


def _specials():
    x = torch.randn(N, generator=gen) * torch.exp(torch.randn(N, generator=gen) * 25)
    y = torch.randn(N, generator=gen) * torch.exp(torch.randn(N, generator=gen) * 25)
    sx = [0.0, -0.0, 1.0, float("inf"), float("nan"), 1e-40, 3e38, 1e-30, 2.0**-149, 1.0, 5.0, -7.0, 1.0, 2.0**100]
    sy = [0.0, 1.0, 0.0, float("inf"), 1.0, 3.0, 1e-10, 1e30, 3.0, 2.0**127 * 1.5, 1e-40, 2.0**-130, 2.55e38, 2.0**-40]
    x[:len(sx)], y[:len(sy)] = torch.tensor(sx), torch.tensor(sy)
    return x, y


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_fp32_division_is_correctly_rounded_with_denormals_and_specials(arch):
    """LLVM's IEEE fdiv: div_scale (twice, one writing VCC), rcp, Newton-Raphson FMAs, div_fmas (reads VCC),
    div_fixup. Results must equal torch's correctly rounded division bit for bit, denormal quotients,
    huge ratios, zeros, infinities and NaNs included."""
    body = "%y0 = fdiv float %x0, %x1"
    assert {"v_div_scale_f32", "v_div_fmas_f32", "v_div_fixup_f32", "v_rcp_f32"} <= mnemonics(body, 2, "float", arch)
    x, y = _specials()
    got = run_ir(body, [x, y], ty="float", arch=arch)[0]
    ref = x / y
    same = (got.view(torch.int32) == ref.view(torch.int32)) | (got.isnan() & ref.isnan())
    assert bool(same.all()), [(x[i].item(), y[i].item(), got[i].item(), ref[i].item())
                              for i in torch.nonzero(~same).flatten()[:5]]


def test_64bit_multiply_add_and_shift_add():
    x, y, z = (torch.randint(-2**63, 2**63 - 1, (N,), dtype=torch.int64, generator=gen) for _ in range(3))
    body = "%m = mul i64 %x0, %x1\n%y0 = add i64 %m, %x2"
    assert "v_mad_u64_u32" in mnemonics(body, 3, "i64", "gfx942")
    assert torch.equal(run_ir(body, [x, y, z], ty="i64")[0], x * y + z)  # torch int64 wraps like the IR
    body = "%s = shl i64 %x0, 3\n%y0 = add i64 %s, %x1"
    assert "v_lshl_add_u64" in mnemonics(body, 2, "i64", "gfx942")
    assert torch.equal(run_ir(body, [x, y], ty="i64")[0], (x << 3) + y)


def test_mad_i64_i32_and_carry_out():
    a, b = ints(-2**31, 2**31 - 1), ints(-2**31, 2**31 - 1)
    c = torch.randint(-2**63, 2**63 - 1, (N,), dtype=torch.int64, generator=gen)
    body = ("%xa = sext i32 %x0 to i64\n%xb = sext i32 %x1 to i64\n%m = mul i64 %xa, %xb\n"
            "%y0 = add i64 %m, %c")
    ir_body = "%cp = getelementptr i64, ptr addrspace(1) %p2, i32 %i\n%c = load i64, ptr addrspace(1) %cp\n" + body
    mod = llc_module(lane_ir(ir_body, 2, 1, "i32").replace("store i32 %y0", "store i64 %y0")
                     .replace("ptr addrspace(1) %p2)", "ptr addrspace(1) %p2, ptr addrspace(1) %p3)")
                     .replace("getelementptr i32, ptr addrspace(1) %p2, i32 %i\n  store", "getelementptr i64, ptr addrspace(1) %p3, i32 %i\n  store"), "gfx942")
    assert "v_mad_i64_i32" in {i.base for i in mod.instrs}
    out = torch.zeros(N, dtype=torch.int64)
    mod.launch("k", (N // 256, 1, 1), (256, 1, 1), [a, b, c, out])
    assert torch.equal(out, a.long() * b.long() + c)


@pytest.mark.parametrize("fn,ref", [
    ("ctlz", lambda u: torch.tensor([32 - int(v).bit_length() for v in u])),
    ("cttz", lambda u: torch.tensor([(int(v) & -int(v)).bit_length() - 1 if v else 32 for v in u])),
    ("ctpop", lambda u: torch.tensor([bin(int(v)).count("1") for v in u]))])
def test_bit_scans(fn, ref):
    a = ints(-2**31, 2**31 - 1)
    a[:3] = torch.tensor([0, 1, -1], dtype=torch.int32)
    a[3:40] = 1 << torch.arange(37) % 32
    extra = ", i1 false" if fn != "ctpop" else ""
    body = f"%y0 = call i32 @llvm.{fn}.i32(i32 %x0{extra})"
    decl = f"declare i32 @llvm.{fn}.i32(i32{', i1' if extra else ''})\n"
    assert {"ctlz": "v_ffbh_u32", "cttz": "v_ffbl_b32", "ctpop": "v_bcnt_u32_b32"}[fn] in mnemonics(body, 1, "i32", "gfx942", decl)
    mod = llc_module(lane_ir(body, 1, 1) + decl, "gfx942")
    out = torch.zeros(N, dtype=torch.int32)
    mod.launch("k", (N // 256, 1, 1), (256, 1, 1), [a, out])
    assert torch.equal(out.long(), ref(a.long() & 0xFFFFFFFF))


LOGIC = [("%t = and i32 %x0, %x1\n%u = xor i32 %t, %x2\n%y0 = or i32 %u, %x0", lambda a, b, c: ((a & b) ^ c) | a),
         ("%n = xor i32 %x0, -1\n%t = and i32 %n, %x2\n%s = and i32 %x0, %x1\n%y0 = or i32 %s, %t",
          lambda a, b, c: (a & b) | (~a & c)),
         ("%t = or i32 %x1, %x2\n%n = xor i32 %t, -1\n%y0 = xor i32 %n, %x0", lambda a, b, c: ~(b | c) ^ a)]


@pytest.mark.parametrize("case", range(len(LOGIC)))
def test_bitop3_truth_tables_chosen_by_llc(case):
    body, ref = LOGIC[case]
    assert "v_bitop3_b32" in mnemonics(body, 3, "i32", "gfx950")
    a, b, c = (ints(-2**31, 2**31 - 1) for _ in range(3))
    assert torch.equal(run_ir(body, [a, b, c], arch="gfx950")[0], ref(a, b, c))


def test_maximum3_minimum3_propagate_nan_and_order_signed_zeros():
    decl = "declare float @llvm.maximum.f32(float, float)\ndeclare float @llvm.minimum.f32(float, float)\n"
    x, y, z = (torch.randn(N, generator=gen) for _ in range(3))
    x[:6] = torch.tensor([float("nan"), 0.0, -0.0, 1.0, -0.0, float("-inf")])
    y[:6] = torch.tensor([1.0, -0.0, 0.0, float("nan"), -0.0, float("-inf")])
    z[:6] = torch.tensor([2.0, -0.0, -0.0, 0.0, -0.0, float("-inf")])
    for name, fn in (("maximum", torch.maximum), ("minimum", torch.minimum)):
        body = (f"%t = call float @llvm.{name}.f32(float %x0, float %x1)\n"
                f"%y0 = call float @llvm.{name}.f32(float %t, float %x2)")
        assert f"v_{name}3_f32" in mnemonics(body, 3, "float", "gfx950", decl)
        mod = llc_module(lane_ir(body, 3, 1, "float") + decl, "gfx950")
        out = torch.zeros(N)
        mod.launch("k", (N // 256, 1, 1), (256, 1, 1), [x, y, z, out])
        ref = fn(fn(x, y), z)
        zeros = (x == 0) & (y == 0) & (z == 0)  # IEEE 754-2019: -0 < +0 (torch does not order them)
        any_pos = (x.view(torch.int32) >= 0) | (y.view(torch.int32) >= 0) | (z.view(torch.int32) >= 0)
        any_neg = (x.view(torch.int32) < 0) | (y.view(torch.int32) < 0) | (z.view(torch.int32) < 0)
        pick_pos = any_pos if name == "maximum" else ~any_neg
        ref = torch.where(zeros, torch.where(pick_pos, 0.0, -0.0), ref)
        same = (out.view(torch.int32) == ref.view(torch.int32)) | (out.isnan() & ref.isnan())
        assert bool(same.all()), name


@pytest.mark.parametrize("mask", [3, 0x1F0, 0x204])
def test_cmp_class_against_torch_classification(mask):
    decl = "declare i1 @llvm.is.fpclass.f32(float, i32)\n"
    body = f"%c = call i1 @llvm.is.fpclass.f32(float %x0, i32 {mask})\n%y0 = select i1 %c, float 1.0, float 0.0"
    x = torch.randn(N, generator=gen)
    x[:10] = torch.tensor([float("nan"), float("-inf"), -1.0, -1e-40, -0.0, 0.0, 1e-40, 1.0, float("inf"), 3e38])
    x = x.view(torch.int32)
    x[10] = 0x7F800001  # signaling NaN
    x = x.view(torch.float32)
    mod = llc_module(lane_ir(body, 1, 1, "float") + decl, "gfx942")
    out = torch.zeros(N)
    mod.launch("k", (N // 256, 1, 1), (256, 1, 1), [x, out])
    bits = x.view(torch.int32)
    snan = x.isnan() & (((bits >> 22) & 1) == 0)
    sub = (x != 0) & (x.abs() < 1.1754943508222875e-38)
    neg = bits < 0
    classes = [snan, x.isnan() & ~snan, x.isinf() & neg, ~sub & x.isfinite() & (x != 0) & neg, sub & neg,
               (x == 0) & neg, (x == 0) & ~neg, sub & ~neg, ~sub & x.isfinite() & (x != 0) & ~neg, x.isinf() & ~neg]
    ref = torch.zeros(N, dtype=torch.bool)
    for k in range(10):
        if mask >> k & 1:
            ref |= classes[k]
    assert torch.equal(out.bool(), ref)


@pytest.mark.parametrize("op,fn", [("fadd", torch.add), ("fmul", torch.mul), ("fsub", torch.sub)])
def test_f16_arithmetic_rounds_like_torch(op, fn):
    x, y = (torch.randn(N, generator=gen).half() for _ in range(2))
    x[:4] = torch.tensor([65504.0, 6e-8, -0.0, float("inf")]).half()
    got = run_ir(f"%y0 = {op} half %x0, %x1", [x, y], ty="half")[0]
    ref = fn(x, y)
    assert torch.equal(got.view(torch.int16), ref.view(torch.int16))


def test_fma_mix_f32_mixes_f16_and_f32_sources():
    decl = "declare float @llvm.fma.f32(float, float, float)\n"
    body = ("%h0 = fptrunc float %x0 to half\n%h1 = fptrunc float %x1 to half\n%e0 = fpext half %h0 to float\n"
            "%e1 = fpext half %h1 to float\n%y0 = call float @llvm.fma.f32(float %e0, float %e1, float %x2)")
    assert "v_fma_mix_f32" in mnemonics(body, 3, "float", "gfx942", decl)
    x, y, z = (torch.randn(N, generator=gen) for _ in range(3))
    mod = llc_module(lane_ir(body, 3, 1, "float") + decl, "gfx942")
    out = torch.zeros(N)
    mod.launch("k", (N // 256, 1, 1), (256, 1, 1), [x, y, z, out])
    ref = (x.half().double() * y.half().double() + z.double()).float()
    assert torch.equal(out, ref)


FLAT_IR = """
define amdgpu_kernel void @lds(ptr addrspace(1) %in, ptr addrspace(1) %out) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %rev = sub i32 255, %tid
  %mine = getelementptr [256 x i32], ptr addrspace(3) @sh, i32 0, i32 %tid
  %other = getelementptr [256 x i32], ptr addrspace(3) @sh, i32 0, i32 %rev
  %gen = addrspacecast ptr addrspace(3) %mine to ptr
  %gen2 = addrspacecast ptr addrspace(3) %other to ptr
  %p = getelementptr i32, ptr addrspace(1) %in, i32 %tid
  %v = load i32, ptr addrspace(1) %p
  store i32 %v, ptr %gen
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %r = load i32, ptr %gen2
  %gout = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  %o = addrspacecast ptr addrspace(1) %gout to ptr
  store i32 %r, ptr %o
  ret void
}
define amdgpu_kernel void @stack(ptr addrspace(1) %in, ptr addrspace(1) %out) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %arr = alloca [300 x i32], align 4, addrspace(5)
  %p = getelementptr i32, ptr addrspace(1) %in, i32 %tid
  %v = load i32, ptr addrspace(1) %p
  %j = and i32 %v, 255
  %k = add i32 %j, 1
  %e = getelementptr [300 x i32], ptr addrspace(5) %arr, i32 0, i32 %j
  store i32 %tid, ptr addrspace(5) %e
  %e2 = getelementptr [300 x i32], ptr addrspace(5) %arr, i32 0, i32 %k
  store i32 %v, ptr addrspace(5) %e2
  %r = load i32, ptr addrspace(5) %e
  %r2 = load i32, ptr addrspace(5) %e2
  %s = add i32 %r, %r2
  %o = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  store i32 %s, ptr addrspace(1) %o
  ret void
}
@sh = internal addrspace(3) global [256 x i32] poison
declare i32 @llvm.amdgcn.workitem.id.x()
declare void @llvm.amdgcn.s.barrier()
"""


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_generic_pointers_into_lds_and_global_and_a_private_stack(arch):
    """HIP-style code: LDS through a generic pointer built from src_shared_base (flat_store / flat_load in
    the LDS aperture), a generic pointer to global memory, and a per-lane stack array (scratch_*): lanes
    writing the same stack index must not see each other's data."""
    mod = llc_module(FLAT_IR, arch)
    names = {i.base for i in mod.instrs}
    assert {"flat_store_dword", "flat_load_dword", "scratch_load_dword"} <= names
    assert any(n.startswith("scratch_store_") for n in names)
    assert any("src_shared_base" in i.text for i in mod.instrs)
    x = torch.randint(0, 1 << 20, (256,), dtype=torch.int32, generator=gen)
    out = torch.zeros(256, dtype=torch.int32)
    mod.launch("lds", (1, 1, 1), (256, 1, 1), [x, out])
    assert torch.equal(out, x.flip(0))
    mod.launch("stack", (1, 1, 1), (256, 1, 1), [x, out])
    assert torch.equal(out, torch.arange(256, dtype=torch.int32) + x)
