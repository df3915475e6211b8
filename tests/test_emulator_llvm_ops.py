"""The other instructions Triton 3.9's kernels stop the emulator at (issue 22): f64 arithmetic, division and
comparisons, frexp, f16 / 16-bit comparisons (VOP3 and SDWA), v_div_fixup_f16, v_sad_u32, s_ff1_i32_b64 and
ds_add_u32. Each kernel is LLVM IR compiled by llc (what LLVM emits is the oracle for the instruction sequences)
and its results are compared with torch's (or with exact rational arithmetic for the f64 fma). Every test also
checks that the instructions it is about are in the compiled code, so that it cannot pass without them.
"""
from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from asm.emukit import lane_ir, llc_module, run_ir  # noqa: E402

pytestmark = pytest.mark.parametrize("arch", ["gfx942", "gfx950"])


def _mnemonics(ir, arch):
    return {ins.base for ins in llc_module(ir, arch).instrs}


def _assert_emitted(ir, arch, *names):
    found = _mnemonics(ir, arch)
    missing = [n for n in names if n not in found]
    assert not missing, f"llc did not emit {missing} (emitted: {sorted(found)})"


def _doubles(n=256, seed=0):
    """Random doubles over many binades, with the special values every division path must handle."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=gen, dtype=torch.float64) * torch.exp2(
        torch.randint(-60, 60, (n,), generator=gen).double())
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 5e-324, -2.5e-310, 1e308,
                            -1e-300, 1.0, 3.0, 2.0**1000], dtype=torch.float64)
    x[:len(special)] = special
    return x


F64_IR = """
%y0 = fadd double %x0, %x1
%y1 = fmul double %x0, %x1
%y2 = fdiv double %x0, %x1
%c = fcmp olt double %x0, %x1
%y3 = select i1 %c, double 1.0, double %x2
"""


def test_f64_arithmetic_division_and_compare_match_torch(arch):
    x0, x1, x2 = _doubles(seed=1), _doubles(seed=2).flip(0), _doubles(seed=3)
    ir = lane_ir(F64_IR, 3, 4, "double")
    _assert_emitted(ir, arch, "v_add_f64", "v_mul_f64", "v_div_scale_f64", "v_rcp_f64", "v_fma_f64",
                    "v_fmac_f64", "v_div_fmas_f64", "v_div_fixup_f64", "v_cmp_nlt_f64")
    add, mul, div, sel = run_ir(F64_IR, [x0, x1, x2], n_out=4, ty="double", arch=arch)
    for got, want in ((add, x0 + x1), (mul, x0 * x1), (div, x0 / x1), (sel, torch.where(x0 < x1, 1.0, x2))):
        torch.testing.assert_close(got, want, atol=0, rtol=0, equal_nan=True)


FMA_IR = """
%y0 = call double @llvm.fma.f64(double %x0, double %x1, double %x2)
%y1 = fpext float %f to double
%t = fptrunc double %x0 to float
%y2 = fpext float %t to double
"""


def _exact_fma(a, b, c):
    return torch.tensor([float(Fraction(x) * Fraction(y) + Fraction(z)) for x, y, z in
                         zip(a.tolist(), b.tolist(), c.tolist())], dtype=torch.float64)


def test_f64_fma_rounds_once_and_f32_conversions_match_torch(arch):
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(256, generator=gen, dtype=torch.float64)
    b = torch.randn(256, generator=gen, dtype=torch.float64)
    c = -(a * b) * (1 + torch.randn(256, generator=gen, dtype=torch.float64) * 1e-12)  # cancellation: fma != a*b+c
    body = "%f = fptrunc double %x1 to float\n" + FMA_IR
    ir = lane_ir(body, 3, 3, "double").replace("declare i32 @llvm.amdgcn.workitem.id.x()",
                                                "declare double @llvm.fma.f64(double, double, double)\n"
                                                "declare i32 @llvm.amdgcn.workitem.id.x()")
    _assert_emitted(ir, arch, "v_fmac_f64", "v_cvt_f64_f32", "v_cvt_f32_f64")
    mod = llc_module(ir, arch)
    outs = [torch.zeros(256, dtype=torch.float64) for _ in range(3)]
    mod.launch("k", grid=(1, 1, 1), block=(256, 1, 1), args=[a, b, c] + outs)
    fused = _exact_fma(a, b, c)
    assert not torch.equal(fused, a * b + c)  # the data tells a fused from an unfused result
    torch.testing.assert_close(outs[0], fused, atol=0, rtol=0)
    torch.testing.assert_close(outs[1], b.float().double(), atol=0, rtol=0)
    torch.testing.assert_close(outs[2], a.float().double(), atol=0, rtol=0)


FREXP_IR = """
%m = call {float, i32} @llvm.frexp.f32.i32(float %x0)
%y0 = extractvalue {float, i32} %m, 0
%e = extractvalue {float, i32} %m, 1
%y1 = bitcast i32 %e to float
"""


def test_frexp_matches_torch(arch):
    x = torch.cat([torch.randn(244) * 1e3, torch.tensor([0.0, -0.0, 1e-40, -3e-39, float("inf"), -float("inf"),
                                                          float("nan"), 1.0, 0.5, -2.0, 3.4e38, 1.5])]).float()
    ir = lane_ir(FREXP_IR, 1, 2, "float").replace("declare i32 @llvm.amdgcn.workitem.id.x()",
                                                  "declare {float, i32} @llvm.frexp.f32.i32(float)\n"
                                                  "declare i32 @llvm.amdgcn.workitem.id.x()")
    _assert_emitted(ir, arch, "v_frexp_mant_f32", "v_frexp_exp_i32_f32")
    mod = llc_module(ir, arch)
    mant, exp = torch.zeros(256), torch.zeros(256)
    mod.launch("k", grid=(1, 1, 1), block=(256, 1, 1), args=[x, mant, exp])
    want_m, want_e = torch.frexp(x)
    finite = torch.isfinite(x)
    torch.testing.assert_close(mant[finite], want_m[finite], atol=0, rtol=0)
    assert torch.equal(exp.view(torch.int32)[finite], want_e[finite])


HALF_IR = """
%a16 = trunc i32 %x0 to i16
%b16 = trunc i32 %x1 to i16
%ah = bitcast i16 %a16 to half
%bh = bitcast i16 %b16 to half
%q = fdiv half %ah, %bh
%qi = bitcast half %q to i16
%y0 = zext i16 %qi to i32
%o = fcmp ord half %ah, %bh
%y1 = zext i1 %o to i32
%hi = lshr i32 %x0, 16
%hi16 = trunc i32 %hi to i16
%eq = icmp eq i16 %hi16, %b16
%y2 = zext i1 %eq to i32
%d0 = sub i32 %x0, %x1
%d1 = sub i32 %x1, %x0
%gt = icmp ugt i32 %x0, %x1
%ad = select i1 %gt, i32 %d0, i32 %d1
%y3 = add i32 %ad, %x2
"""


def _halves(seed):
    gen = torch.Generator().manual_seed(seed)
    h = (torch.randn(256, generator=gen) * 4).half()
    h[:8] = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 6e-8, 65504.0, 1.0]).half()
    return h


def test_half_division_comparisons_and_sad_match_torch(arch):
    a, b = _halves(7), _halves(8).flip(0)
    hi = torch.where(torch.arange(256) % 3 == 0, b.view(torch.int16), a.view(torch.int16)).int() & 0xFFFF
    x0 = (a.view(torch.int16).int() & 0xFFFF) | (hi << 16)
    x1 = b.view(torch.int16).int() & 0xFFFF
    x2 = torch.arange(256, dtype=torch.int32) * 1000
    ir = lane_ir(HALF_IR, 3, 4)
    _assert_emitted(ir, arch, "v_div_fixup_f16", "v_cmp_o_f16", "v_cmp_eq_u16", "v_sad_u32")
    q, ordered, eq, sad = run_ir(HALF_IR, [x0, x1, x2], n_out=4, arch=arch)
    want_q = (a.float() / b.float()).half()
    torch.testing.assert_close((q & 0xFFFF).to(torch.int16).view(torch.float16), want_q, atol=0, rtol=0,
                               equal_nan=True)
    assert torch.equal(ordered, (~(a.isnan() | b.isnan())).int())
    assert torch.equal(eq, (hi == x1).int())
    assert torch.equal(sad, ((x0.long() & 0xFFFFFFFF) - (x1.long() & 0xFFFFFFFF)).abs().int() + x2)


FF1_IR = """
define amdgpu_kernel void @k(ptr addrspace(1) %in, ptr addrspace(1) %out) {
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %first = icmp eq i32 %tid, 0
  br i1 %first, label %init, label %go
init:
  store i32 0, ptr addrspace(3) @lds
  br label %go
go:
  call void @llvm.amdgcn.s.barrier()
  %v = load i64, ptr addrspace(1) %in
  %z = call i64 @llvm.cttz.i64(i64 %v, i1 false)
  %z32 = trunc i64 %z to i32
  %p = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  %bit = and i32 %tid, 31
  %m = shl i32 1, %bit
  %old = atomicrmw add ptr addrspace(3) @lds, i32 %m monotonic
  call void @llvm.amdgcn.s.barrier()
  %sum = load i32, ptr addrspace(3) @lds
  %r = add i32 %z32, %sum
  store i32 %r, ptr addrspace(1) %p
  ret void
}
@lds = internal addrspace(3) global i32 poison
declare i32 @llvm.amdgcn.workitem.id.x()
declare i64 @llvm.cttz.i64(i64, i1)
declare void @llvm.amdgcn.s.barrier()
"""


@pytest.mark.parametrize("value", [0, 1 << 40, 1 << 63, 0x50])
def test_s_ff1_i32_b64_and_ds_add_u32(arch, value):
    """cttz of a uniform 64-bit value (s_ff1_i32_b64; 64 for 0, as llvm.cttz says), plus every lane's bit added into
    one LDS word with ds_add_u32 (two waves of 64 lanes: each of bits 0..31 four times), read back after the barrier."""
    ir = FF1_IR
    _assert_emitted(ir, arch, "s_ff1_i32_b64", "ds_add_u32")
    mod = llc_module(ir, arch)
    src = torch.tensor([value - (1 << 64) if value >= 1 << 63 else value], dtype=torch.int64)
    out = torch.zeros(128, dtype=torch.int32)
    mod.launch("k", grid=(1, 1, 1), block=(128, 1, 1), args=[src, out])
    tz = 64 if value == 0 else (value & -value).bit_length() - 1
    lds_sum = (4 * 0xFFFFFFFF + 2**31) % 2**32 - 2**31  # 128 lanes: 2**0 .. 2**31 four times; wraps at 32 bits
    assert torch.equal(out, torch.full((128,), tz + lds_sum, dtype=torch.int32)), out.unique()
