"""The low-precision MFMAs, MODE and the scaled conversions of the emulated device (issue 22), each against an
oracle outside tilegcn:

  * operand and accumulator layouts of the CDNA3 fp8 and f32 MFMAs: AMD's Matrix Instruction Calculator
    (tests/data/mfma_layouts_cdna3.json), registers packed and D read back through its (lane, register, bits)
    entries alone; integer-valued data, so any layout mistake shows as an inexact result;
  * the gfx950 f8f6f4 layouts and E8M0 scales: Triton's code objects in tests/corpus (test_corpus.py);
  * wait states after each new MFMA: llc's hazard recognizer (as tests/test_hazards_llvm.py for tilegcn's own);
  * the 6/4-bit element values: the OCP Microscaling spec's tables (largest / smallest values);
  * MODE.FP16_OVFL and the scaled fp8 conversions: torch's float8 conversions.
"""
from __future__ import annotations

import json
import pathlib
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import test_hazards_llvm as llvm_hz  # noqa: E402
from asm.emukit import run_lanes  # noqa: E402
from tilegcn.amdgcn.arch import get_arch  # noqa: E402
from tilegcn.errors import EmulatorError, HazardError  # noqa: E402
from tilegcn.runtime.emulator import mfma_lowp  # noqa: E402

CALC = json.loads((pathlib.Path(__file__).parent / "data" / "mfma_layouts_cdna3.json").read_text())["instructions"]


# ---- layouts: the calculator's CDNA3 tables --------------------------------------------------------------------
def _pack(table, rows, cols, values, regs, width):
    """Registers [64, regs] (int32 bits) holding values[r][c] where the calculator puts them."""
    bits = torch.zeros(64, regs, dtype=torch.int64)
    for key, (lane, reg, lo, hi) in table.items():
        r, c = (int(x) for x in key.split(","))
        assert hi - lo + 1 == width
        field = int(values[r][c]) & ((1 << width) - 1)
        bits[lane, reg] |= field << lo
    return ((bits + 2**31) % 2**32 - 2**31).to(torch.int32)


@pytest.mark.parametrize("name", ["v_mfma_f32_16x16x32_fp8_fp8", "v_mfma_f32_32x32x16_fp8_fp8",
                                  "v_mfma_f32_16x16x4_f32", "v_mfma_f32_32x32x2_f32"])
def test_cdna3_layouts_are_the_calculators(name):
    arch = get_arch("gfx942")
    info, calc = mfma_lowp.lookup(name, arch), CALC[name]
    M, N, K = calc["M"], calc["N"], calc["K"]
    gen = torch.Generator().manual_seed(7)
    a = torch.randint(-4, 5, (M, K), generator=gen).float()
    b = torch.randint(-4, 5, (K, N), generator=gen).float()
    c = torch.randint(-50, 50, (M, N), generator=gen).float()
    if "fp8" in name:  # the code of each small integer in gfx942's fp8 (e4m3 FNUZ), from torch
        fmt, width, encode = "fp8", 8, lambda t: t.to(torch.float8_e4m3fnuz).view(torch.uint8).int()
    else:
        fmt, width, encode = "f32", 32, lambda t: t.view(torch.int32)
    regs = mfma_lowp.operand_regs(info, "a", fmt)
    A = _pack(calc["A"], M, K, encode(a), regs, width)
    B = _pack(calc["B"], K, N, encode(b), regs, width)
    C = _pack(calc["D"], M, N, c.view(torch.int32), M * N // 64, 32)
    D = mfma_lowp.execute(info, "gfx942", A[None], B[None], C[None], fmt, fmt)[0].view(torch.float32)
    got = torch.zeros(M, N)
    for key, (lane, reg, _, _) in calc["D"].items():
        i, j = (int(x) for x in key.split(","))
        got[i, j] = D[lane, reg]
    torch.testing.assert_close(got, a @ b + c, atol=0, rtol=0)


def test_int8_mfma_accumulates_in_int32_with_wraparound():
    """int8 products summed exactly, C added as int32 (a sum past 2**31 wraps, as an int32 adder does)."""
    arch = get_arch("gfx942")
    info = mfma_lowp.lookup("v_mfma_i32_16x16x32_i8", arch)
    a = torch.full((64, 2), 0x7F7F7F7F, dtype=torch.int32)  # every element 127
    b = torch.full((64, 2), -0x7F7F7F80, dtype=torch.int32)  # bytes 0x80: every element -128
    c = torch.full((64, 4), -2**31, dtype=torch.int32)
    d = mfma_lowp.execute(info, "gfx942", a[None], b[None], c[None], "i8", "i8")
    want = (32 * 127 * -128 - 2**31 + 2**32)  # below -2**31: wraps to a positive int32
    assert bool((d == want).all()), d.unique()


# ---- 6 / 4-bit element values: the OCP MX spec ------------------------------------------------------------------
@pytest.mark.parametrize("fmt,largest,smallest", [("fp4", 6.0, 0.5), ("fp6", 7.5, 0.125), ("bf6", 28.0, 0.0625)])
def test_mx_element_formats_match_the_ocp_spec(fmt, largest, smallest):
    """One k of A set to the largest code (then the smallest subnormal, then the most negative), one of B to 1.0: D
    is that value (OCP MX spec v1.0, tables of E2M1, E2M3 and E3M2). Only element 0 (bits 0 up) is set, so no
    packing beyond the first element is assumed."""
    arch = get_arch("gfx950")
    info = mfma_lowp.lookup("v_mfma_f32_32x32x64_f8f6f4", arch)
    ebits, mbits, _ = {"fp4": (2, 1, 1), "fp6": (2, 3, 1), "bf6": (3, 2, 3)}[fmt]
    one = ((1 << (ebits - 1)) - 1) << mbits  # exponent field = bias (1 or 3), fraction 0: 1.0
    top = (1 << (ebits + mbits)) - 1
    regs = mfma_lowp.operand_regs(info, "a", fmt)
    for code, want in ((top, largest), (1, smallest), (top | (1 << (ebits + mbits)), -largest)):
        a = torch.zeros(1, 64, regs, dtype=torch.int32)
        b = torch.zeros(1, 64, regs, dtype=torch.int32)
        a[0, 0, 0] = code  # A[0][0]: lane 0, element 0
        b[0, :32, 0] = one  # B[0][j] = 1.0 for every column j
        d = mfma_lowp.execute(info, "gfx950", a, b, torch.zeros(1, 64, 16, dtype=torch.int32), fmt, fmt)
        d = d[0].view(torch.float32)
        assert d[0, 0].item() == want and d[1, 0].item() == want  # D[0][0], D[0][1]


def test_f8f6f4_format_codes_outside_the_table_are_refused():
    info = mfma_lowp.lookup("v_mfma_f32_16x16x128_f8f6f4", get_arch("gfx950"))
    with pytest.raises(EmulatorError, match="cbsz:5"):
        mfma_lowp.formats(info, 5, 0)


# ---- wait states: llc's hazard recognizer -------------------------------------------------------------------------
R, Op = llvm_hz.R, llvm_hz.Op


def _mfma(asm_name, mir_name, dst: R, a: R, b: R, c: R, asm_mods="", mir_imms="0, 0, 0") -> Op:
    mir = mir_name + ("_vgprcd_e64" if dst.file == "v" else "_e64")
    return Op(f"{asm_name} {dst.asm}, {a.asm}, {b.asm}, {c.asm}{asm_mods}",
              f"{dst.mir} = {mir} {a.mir}, {b.mir}, {c.mir}, {mir_imms}, implicit $mode, implicit $exec", None)


# (arch, mnemonic, MIR opcode, srcA/srcB registers, accumulator registers, assembler modifiers, MIR immediates): one
# MFMA per hazard key (the rows depend on the pipe and the passes only), the f8f6f4 ones for the doubling rule
LOWP = [
    ("gfx942", "v_mfma_f32_32x32x2_f32", "V_MFMA_F32_32X32X2F32", 1, 16, "", "0, 0, 0"),
    ("gfx942", "v_mfma_f32_16x16x4_f32", "V_MFMA_F32_16X16X4F32", 1, 4, "", "0, 0, 0"),
    ("gfx942", "v_mfma_i32_32x32x16_i8", "V_MFMA_I32_32X32X16I8", 2, 16, "", "0, 0, 0"),
    ("gfx942", "v_mfma_f32_16x16x32_bf8_fp8", "V_MFMA_F32_16X16X32_BF8_FP8", 2, 4, "", "0, 0, 0"),
    ("gfx950", "v_mfma_f32_32x32x2_f32", "V_MFMA_F32_32X32X2F32", 1, 16, "", "0, 0, 0"),
    ("gfx950", "v_mfma_f32_32x32x64_f8f6f4", "V_MFMA_F32_32X32X64_F8F6F4_f8_f8", 8, 16, "", "0, 0"),
    ("gfx950", "v_mfma_f32_16x16x128_f8f6f4", "V_MFMA_F32_16X16X128_F8F6F4_f8_f8", 8, 4, "", "0, 0"),
    ("gfx950", "v_mfma_f32_16x16x128_f8f6f4", "V_MFMA_F32_16X16X128_F8F6F4_f4_f4", 4, 4, " cbsz:4 blgp:4", "4, 4"),
]


def _lowp_cases():
    for arch, name, mir, n_ab, n_d, mods, imms in LOWP:
        # run_on_emulator's kernel has v0..v47 (v40 its store address) and a0..a47
        A, B = R("v", 0, n_ab), R("v", 8, n_ab)
        vacc, other = R("v", 16, n_d), R("v", 32, n_d)
        acc, shifted = R("a", 0, n_d), R("a", 2, n_d)

        def mf(dst, c):
            return _mfma(name, mir, dst, A, B, c, mods, imms)
        first = mf(vacc, vacc)
        tag = f"{arch}-{name}{mods.replace(' ', '-')}"
        yield tag + "-vdst->VALU read", arch, first, llvm_hz.valu_add(R("v", 44), R("v", 17))
        yield tag + "-vdst->overlapping srcC", arch, mf(acc, acc), mf(shifted, shifted)
        yield tag + "-vdst->VALU write", arch, first, llvm_hz.valu_mov(R("v", 17), R("v", 44))
        yield tag + "-srcC->VALU write", arch, mf(vacc, other), llvm_hz.valu_mov(R("v", 33), R("v", 44))


CASES = list(_lowp_cases())


def _run(arch, first, second, states):
    llvm_hz.run_on_emulator(arch, first.asm, second.asm, states)


@pytest.mark.parametrize("tag,arch,first,second", CASES, ids=[c[0] for c in CASES])
def test_lowp_mfma_wait_states_are_llcs(tag, arch, first, second):
    """The emulated device rejects the pair one wait state short of llc's count and runs it with llc's count."""
    want = llvm_hz.llvm_wait_states(arch, first.mir, second.mir)
    if want:
        with pytest.raises(HazardError):
            _run(arch, first, second, want - 1)
    _run(arch, first, second, want)


# ---- MODE and the scaled fp8 conversions ----------------------------------------------------------------------
CVT = """
s_setreg_imm32_b32 hwreg(HW_REG_MODE, 23, 1), {ovfl}
v_cvt_scalef32_pk_fp8_f32 v20, v10, v11, v12
v_cvt_scalef32_pk_f32_fp8 v[26:27], v20, v12
v_mov_b32 v21, v26
v_mov_b32 v22, v27
s_getreg_b32 s96, hwreg(HW_REG_MODE, 23, 1)
v_mov_b32 v23, s96
"""


def _convert(x, y, scale, ovfl):
    out = run_lanes(CVT.format(ovfl=ovfl), [x, y, scale], n_out=4, arch="gfx950", block=64)
    return out[0], out[1].view(torch.float32), out[2].view(torch.float32), out[3]


def test_scaled_fp8_conversion_rounds_as_torch_and_back():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(64, generator=gen) * 10  # within e4m3's +-448 after the scale: no saturation in play
    y = torch.randn(64, generator=gen) / 50  # down to e4m3's subnormals
    scale = torch.exp2(torch.randint(-1, 4, (64,), generator=gen).float())
    packed, back_x, back_y, ovfl = _convert(x, y, scale, 0)
    qx, qy = (x / scale).to(torch.float8_e4m3fn), (y / scale).to(torch.float8_e4m3fn)
    want = qx.view(torch.uint8).int() | (qy.view(torch.uint8).int() << 8)
    assert torch.equal(packed & 0xFFFF, want)
    torch.testing.assert_close(back_x, qx.float() * scale, atol=0, rtol=0)
    torch.testing.assert_close(back_y, qy.float() * scale, atol=0, rtol=0)
    assert bool((ovfl == 0).all())


def test_fp16_ovfl_saturates_fp8_and_without_it_overflow_is_refused():
    x = torch.tensor([1000.0, -5000.0, 448.0, 460.0] * 16)
    y = torch.ones(64)
    packed, back_x, _, ovfl = _convert(x, y, torch.ones(64), 1)
    assert bool((ovfl == 1).all())  # s_getreg reads the field back
    assert torch.equal(back_x, x.clamp(-448, 448).to(torch.float8_e4m3fn).float())
    with pytest.raises(EmulatorError, match="FP16_OVFL clear"):
        _convert(x, y, torch.ones(64), 0)


def test_a_scale_that_is_not_a_power_of_two_is_refused():
    with pytest.raises(EmulatorError, match="power of two"):
        _convert(torch.ones(64), torch.ones(64), torch.full((64,), 3.0), 0)


def test_setreg_of_the_rounding_mode_is_refused():
    with pytest.raises(EmulatorError, match="only FP16_OVFL"):
        run_lanes("s_setreg_imm32_b32 hwreg(HW_REG_MODE, 0, 4), 3\nv_mov_b32 v20, v10", [torch.ones(64)],
                  arch="gfx942", block=64)


def test_fp6_operands_are_refused_with_the_reason():
    """No compiler's code object shows how 32 six-bit values fill 6 VGPRs: the emulator says so instead of guessing."""
    from asm.emukit import module
    mod = module("v_mfma_f32_32x32x64_f8f6f4 v[0:15], v[16:21], v[24:29], 0 cbsz:2 blgp:2\ns_endpgm", arch="gfx950",
                 vgprs=32)
    with pytest.raises(EmulatorError, match="fp6 operands .* not modelled"):
        mod.launch("k", (1, 1, 1), (64, 1, 1), [torch.zeros(4)])


def test_fp16_ovfl_starts_as_the_descriptor_sets_it():
    """.amdhsa_fp16_overflow 1 (COMPUTE_PGM_RSRC1 bit 26) starts every wave with MODE.FP16_OVFL set."""
    from asm.emukit import lane_kernel, build
    body = "s_getreg_b32 s96, hwreg(HW_REG_MODE, 23, 1)\nv_mov_b32 v20, s96"
    for flag in (0, 1):
        mod = build(lane_kernel(body, 1, 1, "gfx950", 64, extra=f"  .amdhsa_fp16_overflow {flag}"), "gfx950")
        out = torch.zeros(64, dtype=torch.int32)
        mod.launch("k", grid=(1, 1, 1), block=(64, 1, 1), args=[torch.zeros(64, dtype=torch.int32), out])
        assert bool((out == flag).all())


def test_scaled_fp4_conversions_pick_the_byte_op_sel_names():
    """v_cvt_scalef32_pk_{f32,f16}_fp4 on byte op_sel[0] | op_sel[1] << 1 (how llc 22 prints the intrinsics'
    selector 2), against the e2m1 table of tests/corpus/reference.py times the scale."""
    from corpus.reference import decode_e2m1
    gen = torch.Generator().manual_seed(11)
    src = torch.randint(-2**31, 2**31 - 1, (64,), generator=gen, dtype=torch.int64).to(torch.int32)
    scale = torch.exp2(torch.randint(-4, 5, (64,), generator=gen).float())
    body = """v_cvt_scalef32_pk_f32_fp4 v[26:27], v10, v11 op_sel:[0,1,0]
v_mov_b32 v20, v26
v_mov_b32 v21, v27
v_cvt_scalef32_pk_f16_fp4 v22, v10, v11 op_sel:[0,1,0]"""
    f32_lo, f32_hi, f16_pair = run_lanes(body, [src, scale], n_out=3, arch="gfx950", block=64)
    byte2 = ((src.to(torch.int64) >> 16) & 0xFF).to(torch.uint8).view(64, 1)
    want = torch.from_numpy(decode_e2m1(byte2)).float() * scale.view(64, 1)  # [64, 2]: low nibble first
    assert torch.equal(f32_lo.view(torch.float32), want[:, 0]) and torch.equal(f32_hi.view(torch.float32), want[:, 1])
    halves = torch.stack([(f16_pair & 0xFFFF), (f16_pair >> 16) & 0xFFFF], 1).to(torch.int16).view(torch.float16)
    assert torch.equal(halves, want.half())


def test_values_that_round_down_to_the_largest_fp8_need_no_saturation():
    """Up to the midpoint above 448 (464, a tie that goes to 448's even code) e4m3 rounds to 448: no overflow, so no
    FP16_OVFL needed; NaN converts to a NaN (the other half of a pair Triton drops may hold anything)."""
    x = torch.tensor([460.0, -464.0, 400.0, float("nan")] * 16)
    packed, back_x, _, _ = _convert(x, torch.ones(64), torch.ones(64), 0)
    want = x[:3].to(torch.float8_e4m3fn).float()
    assert torch.equal(back_x.view(16, 4)[:, :3], want.expand(16, 3)) and bool(back_x.view(16, 4)[:, 3].isnan().all())
    assert want.tolist() == [448.0, -448.0, 384.0]
