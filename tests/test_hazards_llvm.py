"""The hazard table, checked against LLVM instead of against itself.

For every MFMA shape tilegcn emits and every hazard class in the arch table, a two-instruction snippet is
written as MIR with physical registers and run through `llc -run-pass=post-RA-hazard-rec` (LLVM's own
GCNHazardRecognizer): the wait states LLVM places between the two instructions are the oracle. Then

  * the arch table's entry for that class equals LLVM's count;
  * tilegcn's hazard pass (`insert_hazard_nops`) puts exactly that many wait states between the same pair;
  * the emulated device rejects the pair with one wait state fewer (HazardError) and runs it with LLVM's count.

An earlier table was one wait state short everywhere and 420 tests passed, because the compiler and the
emulator both read the same table. These tests cannot be satisfied by editing the table alone.
"""
import functools
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from asm.emukit import build, kernels_asm, srd  # noqa: E402
from tilegcn.amdgcn import isa  # noqa: E402
from tilegcn.amdgcn.arch import TRANS_OPS, get_arch  # noqa: E402
from tilegcn.amdgcn.isa_table import ops_with_role  # noqa: E402
from tilegcn.amdgcn.hazards import insert_hazard_nops  # noqa: E402
from tilegcn.amdgcn.isa import EXEC, M0, VCC, Inst, Reg  # noqa: E402
from tilegcn.errors import HazardError  # noqa: E402
from tilegcn.toolchain import find_llvm  # noqa: E402

ARCHES = ("gfx942", "gfx950")

# LLVM's MIR opcode of each MFMA (the assembler mnemonic is the arch table's); the `_vgprcd` form writes VGPRs.
MIR_MFMA = {
    "v_mfma_f32_32x32x8_bf16": "V_MFMA_F32_32X32X8BF16_1K", "v_mfma_f32_16x16x16_bf16": "V_MFMA_F32_16X16X16BF16_1K",
    "v_mfma_f32_32x32x8_f16": "V_MFMA_F32_32X32X8F16", "v_mfma_f32_16x16x16_f16": "V_MFMA_F32_16X16X16F16",
    "v_mfma_f32_32x32x16_bf16": "V_MFMA_F32_32X32X16_BF16", "v_mfma_f32_16x16x32_bf16": "V_MFMA_F32_16X16X32_BF16",
    "v_mfma_f32_32x32x16_f16": "V_MFMA_F32_32X32X16_F16", "v_mfma_f32_16x16x32_f16": "V_MFMA_F32_16X16X32_F16",
    # the 8-bit MFMAs T.gemm emits (issue 22): arch.mfma_shapes takes them, passes included, from arch.lowp_mfmas
    "v_mfma_f32_32x32x16_fp8_fp8": "V_MFMA_F32_32X32X16_FP8_FP8",
    "v_mfma_f32_16x16x32_fp8_fp8": "V_MFMA_F32_16X16X32_FP8_FP8",
    "v_mfma_f32_32x32x16_bf8_bf8": "V_MFMA_F32_32X32X16_BF8_BF8",
    "v_mfma_f32_16x16x32_bf8_bf8": "V_MFMA_F32_16X16X32_BF8_BF8",
    "v_mfma_i32_32x32x16_i8": "V_MFMA_I32_32X32X16I8", "v_mfma_i32_16x16x32_i8": "V_MFMA_I32_16X16X32I8",
    "v_mfma_i32_32x32x32_i8": "V_MFMA_I32_32X32X32_I8", "v_mfma_i32_16x16x64_i8": "V_MFMA_I32_16X16X64_I8",
    # gfx950's f8f6f4 on two 8-bit operands (MIR: the operand widths in the name, cbsz / blgp as immediates)
    "v_mfma_f32_32x32x64_f8f6f4": "V_MFMA_F32_32X32X64_F8F6F4_f8_f8",
    "v_mfma_f32_16x16x128_f8f6f4": "V_MFMA_F32_16X16X128_F8F6F4_f8_f8",
}


def _shapes(arch):
    a = get_arch(arch)
    return sorted({(s.name(dt), s) for dt, shapes in a.mfma_shapes.items() for s in shapes}, key=lambda x: x[0])


@functools.lru_cache(maxsize=None)
def _llc():
    llc = find_llvm("gfx950").tool("llc")
    if llc is None:
        pytest.skip("this LLVM has no llc")  # LLVM packages ship llc beside llvm-mc; ROCm's too
    return llc


# ---- operands in the three spellings: assembly, MIR, and tilegcn's Reg ---------------------------------------
@dataclass(frozen=True)
class R:
    file: str  # "v" or "a"
    first: int
    count: int = 1

    @property
    def asm(self):
        return f"{self.file}{self.first}" if self.count == 1 else f"{self.file}[{self.first}:{self.first + self.count - 1}]"

    @property
    def mir(self):
        name = {"v": "vgpr", "a": "agpr"}[self.file]
        return "$" + "_".join(f"{name}{self.first + i}" for i in range(self.count))

    @property
    def reg(self):
        return Reg(self.file, self.first, self.count)


@dataclass(frozen=True)
class Op:
    asm: str
    mir: str
    inst: Inst


def mfma(name, dst: R, a: R, b: R, c: R, modifiers: str = "") -> Op:
    """The MFMA `name` with `modifiers` (an f8f6f4's "cbsz:1 blgp:1"; its MIR takes them as two immediates)."""
    mods = dict(m.split(":") for m in modifiers.split())
    mir_name = MIR_MFMA[name]
    if "f8f6f4" in name:  # MIR names the operand widths: fp4 operands (cbsz / blgp 4) are 4 VGPRs, _f4
        width = {**dict.fromkeys("01", "f8"), **dict.fromkeys("23", "f6"), "4": "f4"}
        mir_name = mir_name.removesuffix("_f8_f8") + f"_{width[mods.get('cbsz', '0')]}_{width[mods.get('blgp', '0')]}"
    mir_name += "_vgprcd_e64" if dst.file == "v" else "_e64"
    imms = f"{mods.get('cbsz', 0)}, {mods.get('blgp', 0)}" if "f8f6f4" in name else "0, 0, 0"
    return Op(f"{name} {dst.asm}, {a.asm}, {b.asm}, {c.asm}" + (f" {modifiers}" if modifiers else ""),
              f"{dst.mir} = {mir_name} {a.mir}, {b.mir}, {c.mir}, {imms}, implicit $mode, implicit $exec",
              Inst(name, (dst.reg, a.reg, b.reg, c.reg), (dst.reg,), (a.reg, b.reg, c.reg), isa.MFMA, modifiers))


def accvgpr_read(dst: R, src: R) -> Op:
    return Op(f"v_accvgpr_read_b32 {dst.asm}, {src.asm}", f"{dst.mir} = V_ACCVGPR_READ_B32_e64 {src.mir}, implicit $exec",
              Inst("v_accvgpr_read_b32", (dst.reg, src.reg), (dst.reg,), (src.reg,), isa.VALU))


def accvgpr_write(dst: R, src: R) -> Op:
    return Op(f"v_accvgpr_write_b32 {dst.asm}, {src.asm}", f"{dst.mir} = V_ACCVGPR_WRITE_B32_e64 {src.mir}, implicit $exec",
              Inst("v_accvgpr_write_b32", (dst.reg, src.reg), (dst.reg,), (src.reg,), isa.VALU))


def valu_add(dst: R, src: R) -> Op:
    return Op(f"v_add_f32 {dst.asm}, {src.asm}, {src.asm}",
              f"{dst.mir} = V_ADD_F32_e32 {src.mir}, {src.mir}, implicit $mode, implicit $exec",
              Inst("v_add_f32", (dst.reg, src.reg, src.reg), (dst.reg,), (src.reg, src.reg), isa.VALU))


def valu_mov(dst: R, src: R) -> Op:
    return Op(f"v_mov_b32 {dst.asm}, {src.asm}", f"{dst.mir} = V_MOV_B32_e32 {src.mir}, implicit $exec",
              Inst("v_mov_b32", (dst.reg, src.reg), (dst.reg,), (src.reg,), isa.VALU))


ADDR = R("v", 40)  # 4 * lane, set up by the prologue; LDS / buffer byte offset


def ds_write(data: R) -> Op:
    return Op(f"ds_write_b32 {ADDR.asm}, {data.asm}", f"DS_WRITE_B32_gfx9 {ADDR.mir}, {data.mir}, 0, 0, implicit $exec",
              Inst("ds_write_b32", (ADDR.reg, data.reg), (), (ADDR.reg, data.reg), isa.DS_WRITE))


def buffer_store(data: R) -> Op:
    return Op(f"buffer_store_dword {data.asm}, {ADDR.asm}, s[8:11], 0 offen",
              f"BUFFER_STORE_DWORD_OFFEN {data.mir}, {ADDR.mir}, $sgpr8_sgpr9_sgpr10_sgpr11, 0, 0, 0, 0, implicit $exec",
              Inst("buffer_store_dword", (data.reg, ADDR.reg), (), (data.reg, ADDR.reg), isa.VMEM_STORE,
                   suffix="offen"))


# ---- the cases: (hazard class, the table entry it checks, first op, second op) -------------------------------
def mfma_cases(arch, name, shape):
    hz = get_arch(arch).every_mfma_hazard  # the compiler's table (the 16-pass f8f6f4 rows are the emulator's too)
    n_ab, n_d = shape.a_regs, shape.d_regs
    A, B = R("v", 0, n_ab), R("v", 4 if n_ab <= 4 else 24, n_ab)  # 8-VGPR operands: B clear of A and vacc
    acc = R("a", 0, n_d)
    vacc = R("v", 8, n_d)  # the VGPR-destination form; 8..23 stays clear of ADDR and the operands
    shifted = R("a", 2, n_d)  # partially overlaps acc
    p = shape.passes
    mf = functools.partial(mfma, modifiers=shape.modifiers)  # this shape's cbsz / blgp
    first = mf(name, acc, A, B, acc)
    first_v = mf(name, vacc, A, B, vacc)
    return [
        ("vdst -> v_accvgpr_read", hz.vdst_to_read[p], first, accvgpr_read(R("v", 30), R("a", 1))),
        ("vdst -> VALU read", hz.vdst_to_read[p], first_v, valu_add(R("v", 30), R("v", 9))),
        ("vdst -> ds_write data", hz.vdst_to_read[p], first_v, ds_write(R("v", 9))),
        ("vdst -> buffer_store data", hz.vdst_to_read[p], first_v, buffer_store(R("v", 9))),
        ("vdst -> MFMA srcA", hz.vdst_to_read[p], first_v, mf(name, acc, R("v", 8, n_ab), B, acc)),
        ("vdst -> MFMA srcB", hz.vdst_to_read[p], first_v, mf(name, acc, A, R("v", 8, n_ab), acc)),
        ("vdst -> same srcC", 0, first, mf(name, acc, A, B, acc)),
        ("vdst -> overlapping srcC", hz.vdst_to_srcc_overlap[p], first, mf(name, shifted, A, B, shifted)),
        ("VALU write -> MFMA srcA", hz.valu_write_to_mfma_src, valu_mov(R("v", 1), R("v", 30)), first),
        ("VALU write -> MFMA srcB", hz.valu_write_to_mfma_src, valu_mov(R("v", 4), R("v", 30)), first),
        ("v_accvgpr_write -> MFMA srcC", hz.valu_write_to_mfma_src, accvgpr_write(R("a", 1), R("v", 30)), first),
    ]


# the 8-bit MFMAs: one case per row of the table (the rows are keyed by passes; these check each MFMA has the passes
# and pipe the table gives it) rather than every spelling of a read, which the 16-bit MFMAs cover: the file stays cheap
EIGHT_BIT_CASES = ("vdst -> VALU read", "vdst -> overlapping srcC", "VALU write -> MFMA srcA")
CASES = [(arch, name, shape, *case) for arch in ARCHES for name, shape in _shapes(arch)
         for case in mfma_cases(arch, name, shape) if shape.elem_bytes == 2 or case[0] in EIGHT_BIT_CASES]
IDS = [f"{c[0]}-{c[1]}{'-' + c[2].modifiers.replace(' ', '-') if c[2].modifiers else ''}-{c[3]}" for c in CASES]


# ---- the oracle -------------------------------------------------------------------------------------------------
LIVEINS = ", ".join([f"$vgpr{i}" for i in range(128)] + [f"$agpr{i}" for i in range(48)] +
                    [f"$sgpr{i}" for i in range(24)] + ["$m0"])


def _mir_function(name: str, first_mir: str, second_mir: str) -> str:
    return f"""---
name: {name}
tracksRegLiveness: true
body: |
  bb.0:
    liveins: {LIVEINS}
    {first_mir}
    {second_mir}
    S_ENDPGM 0
...
"""


def _wait_states_in(body: str, first_mir: str, second_mir: str) -> int:
    """The wait states of the S_NOPs between the pair in one function of llc's output (s_nop N counts N + 1)."""
    lines = [ln.strip().removeprefix("early-clobber ") for ln in body.split("bb.0:", 1)[1].splitlines()
             if ln.strip() and not ln.strip().startswith("liveins")]
    start = lines.index(first_mir.strip())
    end = lines.index(second_mir.strip(), start + 1)
    nops = [re.fullmatch(r"S_NOP (\d+)", ln) for ln in lines[start + 1:end]]
    assert all(nops), f"LLVM put something other than S_NOP between the two: {lines[start + 1:end]}"
    return sum(int(m.group(1)) + 1 for m in nops)


def llc_wait_states(arch: str, pairs: list) -> dict:
    """LLVM's hazard recognizer on each (first_mir, second_mir) pair, one machine function each, in one llc run."""
    mir = "".join(_mir_function(f"hazard{k}", f, s) for k, (f, s) in enumerate(pairs))
    out = subprocess.run([_llc(), "-mtriple=amdgcn-amd-amdhsa", f"-mcpu={arch}", "-run-pass=post-RA-hazard-rec",
                          "-x", "mir", "-o", "-", "-"], input=mir, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    bodies = {m.group(1): doc for doc in out.stdout.split("\n---\n")
              if (m := re.search(r"^name:\s+(hazard\d+)$", doc, re.M))}
    return {(f, s): _wait_states_in(bodies[f"hazard{k}"], f, s) for k, (f, s) in enumerate(pairs)}


def parametrized_pairs(arch: str) -> list:
    """Every (first, second) Op pair of this file's parametrized cases for `arch` (each case holds exactly two)."""
    pairs = {}
    for case in CASES + FILL_CASES + VALU_CASES + CROSS_LANE_CASES:
        ops = [x for x in case if isinstance(x, Op)]
        if case[0] == arch and len(ops) == 2:
            pairs[(ops[0].mir, ops[1].mir)] = tuple(ops)
    return list(pairs.values())


@functools.lru_cache(maxsize=None)
def _batched_llc(arch: str) -> dict:
    """llc's answer for every parametrized pair of `arch`, asked once (one llc process instead of one a pair)."""
    return llc_wait_states(arch, [(f.mir, s.mir) for f, s in parametrized_pairs(arch)])


@functools.lru_cache(maxsize=None)
def llvm_wait_states(arch: str, first_mir: str, second_mir: str) -> int:
    """Wait states LLVM's hazard recognizer puts between the two instructions (s_nop N counts N + 1)."""
    batched = _batched_llc(arch)
    if (first_mir, second_mir) in batched:
        return batched[(first_mir, second_mir)]
    return llc_wait_states(arch, [(first_mir, second_mir)])[(first_mir, second_mir)]


def tilegcn_wait_states(arch: str, first: Inst, second: Inst) -> int:
    out = insert_hazard_nops([first, second], get_arch(arch))
    between = out[out.index(first) + 1:out.index(second)]
    assert all(i.op == "s_nop" for i in between)
    return sum(int(i.operands[0]) + 1 for i in between)


def nops(states: int) -> str:
    lines = []
    while states > 0:
        n = min(states, 8)
        lines.append(f"s_nop {n - 1}")
        states -= n
    return "\n".join(lines)


EMULATOR_SETUP = dict(args=("ptr",), vgprs=96, accum=48, lds=4096, sgprs=24)


def emulator_body(first: str, second: str, states: int) -> str:
    """One wave runs `first`, `states` wait states of s_nop, then `second`, all operands set up beforehand."""
    pre = ["s_load_dwordx2 s[4:5], s[0:1], 0x0", "v_and_b32 v1, 0x3ff, v0", "v_lshlrev_b32 v40, 2, v1",
           "s_waitcnt lgkmcnt(0)", *srd(8, 4, 4096).splitlines()]
    pre += [f"v_mov_b32 v{i}, 0x3f803f80" for i in range(0, 24)]  # bf16/f16 pairs and accumulators
    pre += [f"v_accvgpr_write_b32 a{i}, 0" for i in range(24)] + ["v_mov_b32 v30, 1.0", "s_mov_b32 m0, 0", "s_nop 7",
                                                                   "s_nop 7"]
    return "\n".join(pre + [first, nops(states), second, "s_endpgm"])


def snippet_module(arch: str, first: str, second: str, counts: tuple):
    """A code object with a kernel `k<n>` for each wait-state count n of `counts` (one wave runs `first`, n wait
    states of s_nop, then `second`): one assembly and one decode for the counts a case runs."""
    bodies = {f"k{n}": emulator_body(first, second, n) for n in counts}
    return build(kernels_asm(bodies, arch=arch, **EMULATOR_SETUP), arch)


def launch_one_wave(mod, name: str):
    mod.launch(name, (1, 1, 1), (64, 1, 1), [torch.zeros(1024, dtype=torch.int32)])


def run_on_emulator(arch: str, first: str, second: str, states: int):
    """One wave runs `first`, `states` wait states of s_nop, then `second`, all operands set up beforehand."""
    launch_one_wave(snippet_module(arch, first, second, (states,)), f"k{states}")


def assert_pass_and_emulator_agree_with_llvm(arch, first, second, what: str) -> int:
    """LLVM's wait states between the two (the oracle): tilegcn's hazard pass places exactly that many, and the
    emulated device rejects the pair with one fewer and runs it with that many. Returns LLVM's count."""
    want = llvm_wait_states(arch, first.mir, second.mir)
    assert tilegcn_wait_states(arch, first.inst, second.inst) == want, f"{arch} {what}: LLVM places {want}"
    mod = snippet_module(arch, first.asm, second.asm, (want - 1, want) if want else (want,))
    if want:
        with pytest.raises(HazardError):
            launch_one_wave(mod, f"k{want - 1}")
    launch_one_wave(mod, f"k{want}")
    return want


@pytest.mark.parametrize("arch,name,shape,what,table,first,second", CASES, ids=IDS)
def test_mfma_hazard_matches_llvm(arch, name, shape, what, table, first, second):
    want = assert_pass_and_emulator_agree_with_llvm(arch, first, second, f"{name} {what}")
    assert table == want, f"{arch} {name} {what}: the arch table says {table} wait states, LLVM places {want}"


M0_WRITE_MIR = "$m0 = S_MOV_B32 $sgpr4"
MUBUF_LDS_MIR = "BUFFER_LOAD_DWORD_LDS_OFFEN $vgpr40, $sgpr8_sgpr9_sgpr10_sgpr11, $sgpr4, 0, 0, 0, implicit $exec, implicit $m0"
GLOBAL_LDS_MIR = "GLOBAL_LOAD_LDS_DWORD $vgpr50_vgpr51, 0, 0, implicit $exec, implicit $m0"


@pytest.mark.parametrize("arch", ARCHES)
def test_m0_write_before_lds_dma_matches_llvm(arch):
    """tilegcn's pass places LLVM's wait states between a SALU write of M0 and a MUBUF LDS DMA. The emulated device
    runs the pair without them: the ISA guide's wait-state table does not name MUBUF loads into LDS, and AMD's
    hand-written aiter FAv3 issues `buffer_load_dword ... lds` right after `s_add_u32 m0` (docs/hazards.md)."""
    want = llvm_wait_states(arch, M0_WRITE_MIR, MUBUF_LDS_MIR)
    assert get_arch(arch).m0_write_to_lds_dma_nops + 1 == want
    s4, v40, srd_regs = Reg("s", 4), Reg("v", 40), Reg("s", 8, 4)
    write = Inst("s_mov_b32", (M0, s4), (M0,), (s4,), isa.SALU)
    dma_inst = Inst("buffer_load_dword", (v40, srd_regs, 0), (), (v40, srd_regs, M0), isa.LDS_DMA, suffix="offen lds")
    assert tilegcn_wait_states(arch, write, dma_inst) == want
    for m0_write in ("s_mov_b32 m0, 0", "s_add_u32 m0, 0x100, m0"):
        run_on_emulator(arch, m0_write, "buffer_load_dword v40, s[8:11], 0 offen lds", 0)


def test_m0_write_before_global_lds_dma_is_refused_without_llvm_wait_states():
    """gfx950's `global_load_lds_dword` is "global with LDS = 1", named in the ISA guide's table: the emulated device
    refuses it directly after a SALU write of M0 and runs it after LLVM's count; the pass places that count."""
    arch = "gfx950"
    want = llvm_wait_states(arch, M0_WRITE_MIR, GLOBAL_LDS_MIR)
    assert want == get_arch(arch).m0_write_to_lds_dma_nops + 1
    v50, s4 = Reg("v", 50, 2), Reg("s", 4)
    write = Inst("s_mov_b32", (M0, s4), (M0,), (s4,), isa.SALU)
    dma_inst = Inst("global_load_lds_dword", (v50, "off"), (), (v50, M0), isa.LDS_DMA)
    assert tilegcn_wait_states(arch, write, dma_inst) == want
    address = "v_mov_b32 v50, s4\nv_mov_b32 v51, s5\ns_nop 7\n"  # the kernel's buffer, set up before M0's write
    dma = "global_load_lds_dword v[50:51], off"
    with pytest.raises(HazardError, match="M0"):
        run_on_emulator(arch, address + "s_add_u32 m0, 0x100, m0", dma, want - 1)
    run_on_emulator(arch, address + "s_add_u32 m0, 0x100, m0", dma, want)


# ---- the accumulator fill: D = 0 * 0 + c (passes/elementwise.py `lower_fill`) ----------------------------------
def fill_mfma(name, dst: R, zeros: R) -> Op:
    """The MFMA that sets `dst` to the inline constant 0: srcA = srcB = `zeros`, srcC the constant."""
    mir_name = MIR_MFMA[name] + "_e64"
    return Op(f"{name} {dst.asm}, {zeros.asm}, {zeros.asm}, 0",
              f"{dst.mir} = {mir_name} {zeros.mir}, {zeros.mir}, 0, 0, 0, 0, implicit $mode, implicit $exec",
              Inst(name, (dst.reg, zeros.reg, zeros.reg, 0.0), (dst.reg,), (zeros.reg, zeros.reg), isa.MFMA))


def fill_cases(arch):
    """The sequence a cleared accumulator goes through: VALU zeros -> fill MFMA -> the gemm's first MFMA reading
    the fill as srcC (the same tuple, or a 16x16 shape's tuple inside it), an epilogue's v_accvgpr_read of it;
    and a fill after an earlier tile's MFMA wrote the same tuple."""
    a = get_arch(arch)
    fill_name, fill = a.acc_fill_mfmas()[0]
    zeros = R("v", 0, fill.a_regs)
    acc = R("a", 0, fill.d_regs)
    shapes = a.mfma_shapes["bf16"]
    big = next(s for s in shapes if s.d_regs == fill.d_regs)
    small = next(s for s in shapes if s.d_regs < fill.d_regs)
    A, B = R("v", 8, big.a_regs), R("v", 12, big.a_regs)
    a_small, b_small = R("v", 8, small.a_regs), R("v", 12, small.a_regs)
    inside = R("a", 4, small.d_regs)
    gemm_mfma = mfma(big.name("bf16"), acc, A, B, acc)
    return [
        ("VALU zero -> fill srcA/B", valu_mov(R("v", 1), R("v", 30)), fill_mfma(fill_name, acc, zeros)),
        ("fill -> gemm MFMA same srcC", fill_mfma(fill_name, acc, zeros), gemm_mfma),
        ("fill -> gemm MFMA srcC inside", fill_mfma(fill_name, acc, zeros),
         mfma(small.name("bf16"), inside, a_small, b_small, inside)),
        ("fill -> v_accvgpr_read", fill_mfma(fill_name, acc, zeros), accvgpr_read(R("v", 30), R("a", 1))),
        ("gemm MFMA -> fill same vdst", gemm_mfma, fill_mfma(fill_name, acc, zeros)),
    ]


FILL_CASES = [(arch, *case) for arch in ARCHES for case in fill_cases(arch)]


@pytest.mark.parametrize("arch,what,first,second", FILL_CASES, ids=[f"{c[0]}-{c[1]}" for c in FILL_CASES])
def test_accumulator_fill_hazards_match_llvm(arch, what, first, second):
    assert_pass_and_emulator_agree_with_llvm(arch, first, second, what)


@pytest.mark.parametrize("arch", ARCHES)
def test_only_issued_instructions_between_count_as_wait_states(arch):
    """The hazards above with k independent VALU instructions between the two, and comments around them: each
    instruction is one wait state and a comment none, so the pass adds table - k of them (none once k reaches the
    table), however far apart the comments put the two in the list (and in the middle of a longer block)."""
    name, shape = _shapes(arch)[0]
    far = [Inst("s_mov_b32", (Reg("s", 20), 0), (Reg("s", 20),), (), isa.SALU) for _ in range(24)]
    for what, table, first, second in mfma_cases(arch, name, shape):
        for k in range(table + 2):
            between = [Inst("", kind=isa.COMMENT, comment="far") for _ in range(3)]
            for j in range(k):
                filler = Reg("v", 44 + j % 4)
                between += [Inst("v_mov_b32", (filler, 0), (filler,), (), isa.VALU),
                            Inst("", kind=isa.COMMENT, comment="apart")]
            out = insert_hazard_nops([*far, first.inst, *between, second.inst, *far], get_arch(arch))
            states = sum(int(i.operands[0]) + 1 for i in out[out.index(first.inst):out.index(second.inst)]
                         if i.op == "s_nop")
            assert states == max(table - k, 0), f"{arch} {what}, {k} instructions between"


# ---- the VALU-side rules (arch.valu_hazards; MfmaHazards' write-after-write / write-after-read rows) -------------
# docs/hazards.md lists every class of LLVM's hazard recognizer for gfx942/gfx950 and which of them tilegcn's code
# can reach; these are the reachable ones, each pair as tilegcn emits it (and a few pairs that need nothing).
def v(i, n=1):
    return R("v", i, n)


def s_(i, n=1):
    return Reg("s", i, n)


def s_mir(i, n=1):
    return "$" + "_".join(f"sgpr{i + k}" for k in range(n))


def s_asm(i, n=1):
    return f"s{i}" if n == 1 else f"s[{i}:{i + n - 1}]"


def vop1(op, dst: R, src: R) -> Op:
    mir = f"{dst.mir} = {op.upper()}_e32 {src.mir}, implicit $mode, implicit $exec"
    return Op(f"{op} {dst.asm}, {src.asm}", mir, Inst(op, (dst.reg, src.reg), (dst.reg,), (src.reg,), isa.VALU))


def mul_by_3(dst: R, src: R) -> Op:  # T.exp2(x) * 3: the literal in src0
    return Op(f"v_mul_f32 {dst.asm}, 0x40400000, {src.asm}",
              f"{dst.mir} = V_MUL_F32_e32 1077936128, {src.mir}, implicit $mode, implicit $exec",
              Inst("v_mul_f32", (dst.reg, 3.0, src.reg), (dst.reg,), (src.reg,), isa.VALU))


def fma(dst: R, a: R, b: R, c: R) -> Op:
    return Op(f"v_fma_f32 {dst.asm}, {a.asm}, {b.asm}, {c.asm}",
              f"{dst.mir} = V_FMA_F32_e64 0, {a.mir}, 0, {b.mir}, 0, {c.mir}, 0, 0, implicit $mode, implicit $exec",
              Inst("v_fma_f32", (dst.reg, a.reg, b.reg, c.reg), (dst.reg,), (a.reg, b.reg, c.reg), isa.VALU))


def cmp_vcc(a: R, b: R) -> Op:
    return Op(f"v_cmp_nge_f32 vcc, {a.asm}, {b.asm}",
              f"V_CMP_NGE_F32_e32 {a.mir}, {b.mir}, implicit-def $vcc, implicit $mode, implicit $exec",
              Inst("v_cmp_nge_f32", (VCC, a.reg, b.reg), (VCC,), (a.reg, b.reg), isa.VALU))


def cmp_pair(pair: int, a: R, b: R) -> Op:
    return Op(f"v_cmp_gt_i32_e64 {s_asm(pair, 2)}, {a.asm}, {b.asm}",
              f"{s_mir(pair, 2)} = V_CMP_GT_I32_e64 {a.mir}, {b.mir}, implicit $exec",
              Inst("v_cmp_gt_i32_e64", (s_(pair, 2), a.reg, b.reg), (s_(pair, 2),), (a.reg, b.reg), isa.VALU))


def cndmask_vcc(dst: R, a: R, b: R) -> Op:
    return Op(f"v_cndmask_b32 {dst.asm}, {a.asm}, {b.asm}, vcc",
              f"{dst.mir} = V_CNDMASK_B32_e32 {a.mir}, {b.mir}, implicit $vcc, implicit $exec",
              Inst("v_cndmask_b32", (dst.reg, a.reg, b.reg, VCC), (dst.reg,), (a.reg, b.reg, VCC), isa.VALU))


def cndmask_pair(dst: R, a: R, b: R, pair: int) -> Op:
    return Op(f"v_cndmask_b32_e64 {dst.asm}, {a.asm}, {b.asm}, {s_asm(pair, 2)}",
              f"{dst.mir} = V_CNDMASK_B32_e64 0, {a.mir}, 0, {b.mir}, {s_mir(pair, 2)}, implicit $exec",
              Inst("v_cndmask_b32_e64", (dst.reg, a.reg, b.reg, s_(pair, 2)), (dst.reg,), (a.reg, b.reg, s_(pair, 2)),
                   isa.VALU))


def readfirstlane(sdst: int, src: R) -> Op:
    return Op(f"v_readfirstlane_b32 {s_asm(sdst)}, {src.asm}",
              f"{s_mir(sdst)} = V_READFIRSTLANE_B32 {src.mir}, implicit $exec",
              Inst("v_readfirstlane_b32", (s_(sdst), src.reg), (s_(sdst),), (src.reg,), isa.VALU))


def add_sgpr(dst: R, sgpr: int, src: R) -> Op:
    return Op(f"v_add_u32 {dst.asm}, {s_asm(sgpr)}, {src.asm}",
              f"{dst.mir} = V_ADD_U32_e32 {s_mir(sgpr)}, {src.mir}, implicit $exec",
              Inst("v_add_u32", (dst.reg, s_(sgpr), src.reg), (dst.reg,), (s_(sgpr), src.reg), isa.VALU))


def salu_add(dst: int, sgpr: int) -> Op:
    return Op(f"s_add_u32 {s_asm(dst)}, {s_asm(sgpr)}, 64",
              f"{s_mir(dst)} = S_ADD_U32 {s_mir(sgpr)}, 64, implicit-def $scc",
              Inst("s_add_u32", (s_(dst), s_(sgpr), 64), (s_(dst),), (s_(sgpr),), isa.SALU))


def div_scale_vcc(dst: R, a: R, b: R) -> Op:
    return Op(f"v_div_scale_f32 {dst.asm}, vcc, {a.asm}, {b.asm}, {a.asm}",
              f"{dst.mir}, $vcc = V_DIV_SCALE_F32_e64 0, {a.mir}, 0, {b.mir}, 0, {a.mir}, 0, 0, implicit $mode, "
              "implicit $exec",
              Inst("v_div_scale_f32", (dst.reg, VCC, a.reg, b.reg, a.reg), (dst.reg, VCC), (a.reg, b.reg), isa.VALU))


def div_fmas(dst: R, a: R, b: R, c: R) -> Op:
    return Op(f"v_div_fmas_f32 {dst.asm}, {a.asm}, {b.asm}, {c.asm}",
              f"{dst.mir} = V_DIV_FMAS_F32_e64 0, {a.mir}, 0, {b.mir}, 0, {c.mir}, 0, 0, implicit $mode, "
              "implicit $vcc, implicit $exec",
              Inst("v_div_fmas_f32", (dst.reg, a.reg, b.reg, c.reg), (dst.reg,), (a.reg, b.reg, c.reg, VCC), isa.VALU))


def buffer_store_wide(data: R, soffset: int | None = None) -> Op:
    """buffer_store_dword{x2,x3,x4} of `data`, soffset the literal 0 (tilegcn's usual) or SGPR `soffset`."""
    op = {1: "buffer_store_dword", 2: "buffer_store_dwordx2", 3: "buffer_store_dwordx3", 4: "buffer_store_dwordx4"}
    so_asm, so_mir = ("0", "0") if soffset is None else (s_asm(soffset), s_mir(soffset))
    so = 0 if soffset is None else s_(soffset)
    return Op(f"{op[data.count]} {data.asm}, {ADDR.asm}, s[8:11], {so_asm} offen",
              f"{op[data.count].upper()}_OFFEN {data.mir}, {ADDR.mir}, $sgpr8_sgpr9_sgpr10_sgpr11, {so_mir}, 0, 0, 0, "
              "implicit $exec",
              Inst(op[data.count], (data.reg, ADDR.reg, Reg("s", 8, 4), so), (),
                   (data.reg, ADDR.reg, Reg("s", 8, 4)) + ((so,) if soffset is not None else ()), isa.VMEM_STORE,
                   suffix="offen"))


def cvt_f16_high(dst: R, src: R) -> Op:
    """v_cvt_f16_f32 into the high half of dst, the low half kept (SDWA dst_sel WORD_1, UNUSED_PRESERVE: MIR's
    sel 5, unused 2, src0_sel DWORD 6, the old dst a tied use): the second half of gfx942's fp16 pack."""
    sdwa = "dst_sel:WORD_1 dst_unused:UNUSED_PRESERVE src0_sel:DWORD"
    return Op(f"v_cvt_f16_f32_sdwa {dst.asm}, {src.asm} {sdwa}",
              f"{dst.mir} = V_CVT_F16_F32_sdwa 0, {src.mir}, 0, 0, 5, 2, 6, implicit $mode, implicit $exec, "
              f"implicit {dst.mir}(tied-def 0)",
              Inst("v_cvt_f16_f32_sdwa", (dst.reg, src.reg), (dst.reg,), (src.reg, dst.reg), isa.VALU, suffix=sdwa))


def valu_cases(arch):
    vh = get_arch(arch).valu_hazards
    x, y, t, u = v(1), v(2), v(3), v(30)
    return [
        ("v_exp_f32 -> v_mul_f32 (T.exp2(x) * 3)", vh.trans_to_valu_read, vop1("v_exp_f32", y, x), mul_by_3(x, y)),
        ("v_rcp_f32 -> v_fma_f32 (a division)", vh.trans_to_valu_read, vop1("v_rcp_f32", y, x), fma(t, y, x, x)),
        ("v_exp_f32 -> v_exp_f32 (TRANS reader)", 0, vop1("v_exp_f32", y, x), vop1("v_exp_f32", t, y)),
        ("v_exp_f32 -> buffer_store (not a VALU)", 0, vop1("v_exp_f32", y, x), buffer_store_wide(y)),
        ("v_cmp vcc -> v_cndmask vcc", vh.valu_sgpr_to_valu_read, cmp_vcc(x, y), cndmask_vcc(t, x, y)),
        ("v_cmp_e64 SGPR pair -> v_cndmask_e64", vh.valu_sgpr_to_valu_read, cmp_pair(16, x, y),
         cndmask_pair(t, x, y, 16)),
        ("v_readfirstlane -> VALU reading the SGPR", vh.valu_sgpr_to_valu_read, readfirstlane(16, ADDR),
         add_sgpr(t, 16, x)),
        ("v_readfirstlane -> SALU reading the SGPR", 0, readfirstlane(16, ADDR), salu_add(17, 16)),
        ("v_readfirstlane -> VMEM soffset", vh.valu_sgpr_to_vmem_read, readfirstlane(16, ADDR),
         buffer_store_wide(x, soffset=16)),
        ("v_div_scale vcc -> v_div_fmas", vh.valu_vcc_to_div_fmas, div_scale_vcc(t, x, y), div_fmas(v(4), t, x, y)),
        ("VALU -> v_readfirstlane source", vh.valu_to_readlane_src, valu_mov(v(41), u), readfirstlane(16, v(41))),
        ("buffer_store_dwordx3 -> VALU overwriting its data", vh.wide_store_to_valu_write, buffer_store_wide(v(0, 3)),
         valu_mov(v(2), u)),
        ("buffer_store_dwordx4 -> v_accvgpr_read overwriting its data", vh.wide_store_to_valu_write,
         buffer_store_wide(v(0, 4)), accvgpr_read(x, R("a", 1))),
        ("buffer_store_dwordx2 -> VALU overwriting its data", 0, buffer_store_wide(v(0, 2)), valu_mov(x, u)),
        ("buffer_store_dwordx4 soffset SGPR -> VALU overwriting", 0, buffer_store_wide(v(0, 4), soffset=16),
         valu_mov(x, u)),
        ("SDWA dst_sel:WORD_1 -> VALU reading it", vh.dst_sel_to_valu_read, cvt_f16_high(y, x), valu_mov(t, y)),
        ("v_cvt_f16_f32 -> SDWA high half of the same VGPR (the pack)", 0, vop1("v_cvt_f16_f32", y, x),
         cvt_f16_high(y, u)),
    ]


def mfma_overwrite_cases(arch):
    hz = get_arch(arch).mfma_hazards
    out = []
    seen = set()
    for name, shape in _shapes(arch):
        if not name.endswith("bf16") or shape.passes in seen:
            continue  # the rows depend on the passes only: one shape each
        seen.add(shape.passes)
        n_ab, n_d, p = shape.a_regs, shape.d_regs, shape.passes
        A, B = R("v", 0, n_ab), R("v", 4, n_ab)
        acc, other = R("a", 0, n_d), R("a", 24, n_d)
        out += [
            (f"{name} -> v_accvgpr_write of its result", hz.vdst_to_valu_write[p], mfma(name, acc, A, B, other),
             accvgpr_write(R("a", 1), R("v", 30))),
            (f"{name} -> v_accvgpr_write of its srcC", hz.srcc_to_valu_write[p], mfma(name, acc, A, B, other),
             accvgpr_write(R("a", 25), R("v", 30))),
            (f"{name} -> v_accvgpr_write of its accumulator", hz.vdst_to_valu_write[p], mfma(name, acc, A, B, acc),
             accvgpr_write(R("a", 1), R("v", 30))),
        ]
    return out


VALU_CASES = [(arch, *case) for arch in ARCHES for case in valu_cases(arch) + mfma_overwrite_cases(arch)]


@pytest.mark.parametrize("arch,what,table,first,second", VALU_CASES, ids=[f"{c[0]}-{c[1]}" for c in VALU_CASES])
def test_valu_side_hazard_matches_llvm(arch, what, table, first, second):
    want = assert_pass_and_emulator_agree_with_llvm(arch, first, second, what)
    assert table == want, f"{arch} {what}: the arch table says {table} wait states, LLVM places {want}"


def llvm_wait_states_between(arch: str, lines: tuple) -> list:
    """Wait states LLVM puts before each of `lines` (MIR instructions in one block), in order."""
    mir = "---\nname: hazard\ntracksRegLiveness: true\nbody: |\n  bb.0:\n    liveins: " + LIVEINS + "\n" + \
        "".join(f"    {ln}\n" for ln in lines) + "    S_ENDPGM 0\n...\n"
    out = subprocess.run([_llc(), "-mtriple=amdgcn-amd-amdhsa", f"-mcpu={arch}", "-run-pass=post-RA-hazard-rec",
                          "-x", "mir", "-o", "-", "-"], input=mir, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    body = [ln.strip().removeprefix("early-clobber ") for ln in out.stdout.split("bb.0:", 1)[1].splitlines()]
    states, pending = [], 0
    for ln in body:
        m = re.fullmatch(r"S_NOP (\d+)", ln)
        if m:
            pending += int(m.group(1)) + 1
        elif ln in lines:
            states.append(pending)
            pending = 0
    assert len(states) == len(lines), body
    return states


@pytest.mark.parametrize("arch", ARCHES)
def test_transcendental_ops_are_those_llvm_forwards_late(arch):
    """Every op of arch.TRANS_OPS, and the VALU ops tilegcn's builder emits that are not in it, followed by a
    v_mov_b32 reading the result: LLVM puts the transcendental wait state after exactly the TRANS_OPS ones (one
    llc run; each pair's registers are its own)."""
    others = ("v_mov_b32", "v_cvt_f32_f16", "v_cvt_f16_f32", "v_cvt_i32_f32", "v_cvt_f32_i32", "v_rndne_f32")
    ops = sorted(TRANS_OPS) + list(others)
    lines = []
    for i, op in enumerate(ops):
        wide = op.endswith("f64")
        src, dst = (f"$vgpr{4 * i}_vgpr{4 * i + 1}", f"$vgpr{4 * i + 2}_vgpr{4 * i + 3}") if wide else \
            (f"$vgpr{4 * i}", f"$vgpr{4 * i + 2}")
        mode = "" if op == "v_mov_b32" else ", implicit $mode"
        lines.append(f"{dst} = {op.upper()}_e32 {src}{mode}, implicit $exec")
        lines.append(f"$vgpr{4 * i + 3} = V_MOV_B32_e32 $vgpr{4 * i + 2}, implicit $exec")
    states = llvm_wait_states_between(arch, tuple(lines))[1::2]
    want = get_arch(arch).valu_hazards.trans_to_valu_read
    assert dict(zip(ops, states)) == {op: want if op in TRANS_OPS else 0 for op in ops}


@pytest.mark.parametrize("arch", ARCHES)
def test_valu_side_rules_count_issued_instructions_and_see_the_loop_back_edge(arch):
    """The VALU-side and cross-lane pairs with k independent instructions (and comments) between: the pass adds
    table - k wait states. And a producer at the end of a loop body meets the consumer at the loop head through the
    back edge (the branch is one wait state), as LLVM's search through predecessors does."""
    a = get_arch(arch)
    for what, table, first, second in valu_cases(arch) + cross_lane_cases(arch):
        for k in range(table + 2):
            between = [Inst("", kind=isa.COMMENT, comment="apart")]
            for j in range(k):
                between += [Inst("s_mov_b32", (Reg("s", 20 + j % 2), 0), (Reg("s", 20 + j % 2),), (), isa.SALU),
                            Inst("", kind=isa.COMMENT, comment="apart")]
            out = insert_hazard_nops([first.inst, *between, second.inst], a)
            states = sum(int(i.operands[0]) + 1 for i in out[out.index(first.inst):out.index(second.inst)]
                         if i.op == "s_nop")
            assert states == max(table - k, 0), f"{arch} {what}, {k} instructions between"
        head, branch = Inst(".Lhead", kind=isa.LABEL), Inst("s_cbranch_scc1", (".Lhead",), kind=isa.BRANCH)
        out = insert_hazard_nops([head, second.inst, first.inst, branch, Inst("s_endpgm", kind=isa.SOPP)], a)
        states = sum(int(i.operands[0]) + 1 for i in out[out.index(head):out.index(second.inst)] if i.op == "s_nop")
        assert states == max(table - 1, 0), f"{arch} {what} across the back edge"


# ---- the cross-lane rules (DPP, v_readlane / v_writelane / v_readfirstlane, v_permlane*_swap on gfx950): the
# instructions reductions emit (docs/hazards.md). A DPP `Inst` is built as passes/xlane.py emits one (the destination
# in defs only); the pass counts the destination among the registers it reads (the lanes it does not write keep the
# old value; LLVM's MIR has that old value as a tied use and its rule counts it), and the "destination" case checks.
DPP_QUAD_SWAP = "quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf"  # MIR dpp_ctrl 177 (0xb1)


def mov_dpp(dst: R, src: R) -> Op:
    return Op(f"v_mov_b32_dpp {dst.asm}, {src.asm} {DPP_QUAD_SWAP}",
              f"{dst.mir} = V_MOV_B32_dpp {dst.mir}, {src.mir}, 177, 15, 15, -1, implicit $exec",
              Inst("v_mov_b32_dpp", (dst.reg, src.reg), (dst.reg,), (src.reg,), isa.VALU, suffix=DPP_QUAD_SWAP))


DPP_ROW_HALF_MIRROR = "row_half_mirror row_mask:0xf bank_mask:0xf"  # MIR dpp_ctrl 321 (0x141)


def add_dpp(dst: R, a: R, b: R, control: str = DPP_QUAD_SWAP) -> Op:
    """dst = a (from another lane of the DPP control) + b (this lane's)."""
    code = {DPP_QUAD_SWAP: 177, DPP_ROW_HALF_MIRROR: 321}[control]
    return Op(f"v_add_f32_dpp {dst.asm}, {a.asm}, {b.asm} {control}",
              f"{dst.mir} = V_ADD_F32_dpp {dst.mir}, 0, {a.mir}, 0, {b.mir}, {code}, 15, 15, -1, implicit $mode, "
              "implicit $exec",
              Inst("v_add_f32_dpp", (dst.reg, a.reg, b.reg), (dst.reg,), (a.reg, b.reg), isa.VALU, suffix=control))


def readlane(sdst: int, src: R, lane: Reg, lane_asm: str, lane_mir: str) -> Op:
    return Op(f"v_readlane_b32 {s_asm(sdst)}, {src.asm}, {lane_asm}",
              f"{s_mir(sdst)} = V_READLANE_B32 {src.mir}, {lane_mir}",
              Inst("v_readlane_b32", (s_(sdst), src.reg, lane), (s_(sdst),), (src.reg, lane), isa.VALU))


def writelane(dst: R, value: int, lane: int) -> Op:
    """Lane s`lane` of dst = the constant `value` (an SGPR value would take the constant bus twice)."""
    return Op(f"v_writelane_b32 {dst.asm}, {value}, {s_asm(lane)}",
              f"{dst.mir} = V_WRITELANE_B32 {value}, {s_mir(lane)}, {dst.mir}",
              Inst("v_writelane_b32", (dst.reg, value, s_(lane)), (dst.reg,), (s_(lane), dst.reg), isa.VALU))


def writelane_value(dst: R, sgpr: int) -> Op:
    """Lane M0 of dst = SGPR `sgpr` (the value operand, not the lane select)."""
    return Op(f"v_writelane_b32 {dst.asm}, {s_asm(sgpr)}, m0",
              f"{dst.mir} = V_WRITELANE_B32 {s_mir(sgpr)}, $m0, {dst.mir}",
              Inst("v_writelane_b32", (dst.reg, s_(sgpr), M0), (dst.reg,), (s_(sgpr), M0, dst.reg), isa.VALU))


def cmp_e64_vcc(a: R, b: R) -> Op:
    return Op(f"v_cmp_eq_u32_e64 vcc, {a.asm}, {b.asm}", f"$vcc = V_CMP_EQ_U32_e64 {a.mir}, {b.mir}, implicit $exec",
              Inst("v_cmp_eq_u32_e64", (VCC, a.reg, b.reg), (VCC,), (a.reg, b.reg), isa.VALU))


def cmpx(a: R) -> Op:
    """v_cmpx of a with itself (true in every lane: EXEC stays all ones), a VALU write of EXEC (and VCC)."""
    return Op(f"v_cmpx_eq_u32 vcc, {a.asm}, {a.asm}",
              f"V_CMPX_EQ_U32_e32 {a.mir}, {a.mir}, implicit-def $exec, implicit-def $vcc, implicit $exec",
              Inst("v_cmpx_eq_u32", (VCC, a.reg, a.reg), (VCC, EXEC), (a.reg,), isa.VALU))


def salu_exec() -> Op:
    return Op("s_mov_b64 exec, -1", "$exec = S_MOV_B64 -1", Inst("s_mov_b64", (EXEC, -1), (EXEC,), (), isa.SALU))


def salu_m0() -> Op:
    return Op("s_mov_b32 m0, s4", "$m0 = S_MOV_B32 $sgpr4", Inst("s_mov_b32", (M0, s_(4)), (M0,), (s_(4),), isa.SALU))


def permlane_swap(op: str, x: R, y: R) -> Op:
    return Op(f"{op} {x.asm}, {y.asm}",
              f"{x.mir}, {y.mir} = {op.upper()}_e32 {x.mir}, {y.mir}, implicit $exec",
              Inst(op, (x.reg, y.reg), (x.reg, y.reg), (x.reg, y.reg), isa.VALU))


def ds_swizzle(dst: R, src: R) -> Op:
    return Op(f"ds_swizzle_b32 {dst.asm}, {src.asm} offset:swizzle(SWAP,1)",
              f"{dst.mir} = DS_SWIZZLE_B32 {src.mir}, 1055, 0, implicit $exec",
              Inst("ds_swizzle_b32", (dst.reg, src.reg), (dst.reg,), (src.reg,), isa.DS_READ,
                   suffix="offset:swizzle(SWAP,1)"))


def ds_bpermute(dst: R, addr: R, data: R) -> Op:
    return Op(f"ds_bpermute_b32 {dst.asm}, {addr.asm}, {data.asm}",
              f"{dst.mir} = DS_BPERMUTE_B32 {addr.mir}, {data.mir}, 0, implicit $exec",
              Inst("ds_bpermute_b32", (dst.reg, addr.reg, data.reg), (dst.reg,), (addr.reg, data.reg), isa.DS_READ))


def cross_lane_cases(arch):
    vh = get_arch(arch).valu_hazards
    x, y, d = v(1), v(2), v(3)
    lane = (s_(16), "s16", "$sgpr16")
    vcc_lo = (Reg("vcc", 0, 1), "vcc_lo", "$vcc_lo")
    cases = [
        ("VALU -> v_mov_b32_dpp source", vh.vgpr_write_to_dpp_read, valu_mov(x, v(30)), mov_dpp(d, x)),
        ("VALU -> v_add_f32_dpp second source", vh.vgpr_write_to_dpp_read, valu_mov(y, v(30)), add_dpp(d, x, y)),
        ("VALU -> v_mov_b32_dpp destination (old value)", vh.vgpr_write_to_dpp_read, valu_mov(d, v(30)),
         mov_dpp(d, x)),
        ("v_exp_f32 -> v_mov_b32_dpp (DPP outlasts TRANS)", vh.vgpr_write_to_dpp_read, vop1("v_exp_f32", x, v(30)),
         mov_dpp(d, x)),
        ("VALU VCC write -> DPP", 0, cmp_e64_vcc(x, y), mov_dpp(d, v(4))),
        ("v_cmpx (EXEC) -> DPP", vh.valu_exec_to_dpp, cmpx(v(30)), mov_dpp(d, x)),
        ("SALU EXEC write -> DPP", 0, salu_exec(), mov_dpp(d, x)),
        ("v_readfirstlane -> v_readlane lane select", vh.valu_sgpr_to_lane_select, readfirstlane(16, ADDR),
         readlane(17, v(4), *lane)),
        ("v_readfirstlane -> v_writelane lane select", vh.valu_sgpr_to_lane_select, readfirstlane(16, ADDR),
         writelane(v(4), 7, 16)),
        ("v_cmp_e64 VCC -> v_readlane lane select vcc_lo", vh.valu_sgpr_to_lane_select, cmp_e64_vcc(x, y),
         readlane(17, v(4), *vcc_lo)),
        ("v_readfirstlane -> v_writelane value", vh.valu_sgpr_to_valu_read, readfirstlane(16, ADDR),
         writelane_value(v(4), 16)),
        ("SALU -> v_readlane lane select", 0, salu_add(16, 4), readlane(17, v(4), *lane)),
        ("VALU -> v_readlane lane source", vh.valu_to_readlane_src, valu_mov(x, v(30)), readlane(17, x, *lane)),
        ("VALU -> v_writelane destination", 0, valu_mov(v(4), v(30)), writelane(v(4), 7, 16)),
        ("v_cmpx (EXEC) -> v_readfirstlane", vh.valu_exec_to_lane_op, cmpx(v(30)), readfirstlane(16, ADDR)),
        ("v_cmpx (EXEC) -> v_readlane", vh.valu_exec_to_lane_op, cmpx(v(30)), readlane(17, v(4), *lane)),
        ("v_cmpx (EXEC) -> v_writelane", vh.valu_exec_to_lane_op, cmpx(v(30)), writelane(v(4), 7, 16)),
        ("v_readlane SGPR -> VALU reading it", vh.valu_sgpr_to_valu_read, readlane(16, v(4), s_(18), "s18", "$sgpr18"),
         add_sgpr(d, 16, x)),
        ("v_writelane -> DPP reading its result", vh.vgpr_write_to_dpp_read, writelane(v(4), 7, 16),
         mov_dpp(d, v(4))),
        ("v_add_f32_dpp -> v_add_f32_dpp of its result (a butterfly's next step)", vh.vgpr_write_to_dpp_read,
         add_dpp(x, x, x), add_dpp(x, x, x, DPP_ROW_HALF_MIRROR)),
        ("v_mov_b32_dpp -> VALU reading its result", 0, mov_dpp(d, x), valu_add(v(4), d)),
        ("VALU -> ds_swizzle source", 0, valu_mov(x, v(30)), ds_swizzle(v(5), x)),
        ("VALU -> ds_bpermute address and data", 0, valu_mov(x, v(30)), ds_bpermute(v(5), x, x)),
        ("SALU write of M0 -> v_readlane lane select m0", 0, salu_m0(), readlane(17, v(4), M0, "m0", "$m0")),
        ("SALU write of M0 -> ds_bpermute (reads no M0 on gfx9)", 0, salu_m0(), ds_bpermute(v(5), x, x)),
    ]
    name, shape = next((n, s) for n, s in _shapes(arch) if s.elem_bytes == 2)
    acc = R("a", 0, shape.d_regs)
    cases.append(("v_cmpx (EXEC) -> MFMA", vh.valu_exec_to_mfma, cmpx(v(30)),
                  mfma(name, acc, R("v", 0, shape.a_regs), R("v", 4, shape.a_regs), acc)))
    if arch == "gfx950":  # gfx942 has no permlane swaps
        for op in sorted(ops_with_role("permlane_swap")):
            cases += [
                (f"VALU -> {op} first operand", vh.valu_to_permlane_swap, valu_mov(x, v(30)), permlane_swap(op, x, y)),
                (f"VALU -> {op} second operand", vh.valu_to_permlane_swap, valu_mov(y, v(30)),
                 permlane_swap(op, x, y)),
                (f"v_cmpx (EXEC) -> {op}", vh.valu_exec_to_permlane_swap, cmpx(v(30)), permlane_swap(op, x, y)),
                (f"{op} -> VALU reading its result", 0, permlane_swap(op, x, y), valu_add(d, y)),
                (f"{op} -> DPP reading its result", vh.vgpr_write_to_dpp_read, permlane_swap(op, x, y),
                 mov_dpp(d, x)),
            ]
    return cases


CROSS_LANE_CASES = [(arch, *case) for arch in ARCHES for case in cross_lane_cases(arch)]


@pytest.mark.parametrize("arch,what,table,first,second", CROSS_LANE_CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CROSS_LANE_CASES])
def test_cross_lane_hazard_matches_llvm(arch, what, table, first, second):
    want = assert_pass_and_emulator_agree_with_llvm(arch, first, second, what)
    assert table == want, f"{arch} {what}: the arch table says {table} wait states, LLVM places {want}"


def buffer_load(dst: R) -> Op:
    return Op(f"buffer_load_dword {dst.asm}, {ADDR.asm}, s[8:11], 0 offen",
              f"{dst.mir} = BUFFER_LOAD_DWORD_OFFEN {ADDR.mir}, $sgpr8_sgpr9_sgpr10_sgpr11, 0, 0, 0, 0, implicit $exec",
              Inst("buffer_load_dword", (dst.reg, ADDR.reg, Reg("s", 8, 4), 0), (dst.reg,), (ADDR.reg, Reg("s", 8, 4)),
                   isa.VMEM_LOAD, suffix="offen"))


WAITS = {"lgkmcnt(0)": 49279, "vmcnt(0)": 3952}  # gfx9 s_waitcnt immediates (the other counters at their maximum)


def load_then_cross_lane_cases(arch):
    """A load's (or ds_swizzle's) result read by a DPP instruction after the s_waitcnt that waits for it: LLVM's DPP
    rule counts from the load's issue, whatever the instruction, so the waitcnt's one wait state leaves one to
    place; a permlane swap's rule is for VALU writes only."""
    vh, x, d = get_arch(arch).valu_hazards, v(5), v(3)
    cases = [("ds_swizzle -> DPP", vh.vgpr_write_to_dpp_read - 1, ds_swizzle(x, v(2)), "lgkmcnt(0)", mov_dpp(d, x)),
             ("buffer_load -> DPP", vh.vgpr_write_to_dpp_read - 1, buffer_load(x), "vmcnt(0)", mov_dpp(d, x))]
    if arch == "gfx950":
        cases.append(("ds_swizzle -> v_permlane32_swap", 0, ds_swizzle(x, v(2)), "lgkmcnt(0)",
                      permlane_swap("v_permlane32_swap_b32", x, d)))
    return cases


@pytest.mark.parametrize("arch", ARCHES)
def test_load_then_waitcnt_then_cross_lane_matches_llvm(arch):
    a = get_arch(arch)
    for what, table, load, wait, reader in load_then_cross_lane_cases(arch):
        want = llvm_wait_states_between(arch, (load.mir, f"S_WAITCNT {WAITS[wait]}", reader.mir))[2]
        assert table == want, f"{arch} {what}: the arch table gives {table} after the waitcnt, LLVM places {want}"
        waitcnt = Inst("s_waitcnt", (wait,), kind=isa.WAIT)
        out = insert_hazard_nops([load.inst, waitcnt, reader.inst], a)
        between = out[out.index(waitcnt) + 1:out.index(reader.inst)]
        assert sum(int(i.operands[0]) + 1 for i in between) == want, f"{arch} {what}: LLVM places {want}"
        load_and_wait = f"{load.asm}\ns_waitcnt {wait}"
        if want:
            with pytest.raises(HazardError, match="through DPP"):
                run_on_emulator(arch, load_and_wait, reader.asm, want - 1)
        run_on_emulator(arch, load_and_wait, reader.asm, want)


# ---- compiled kernels: each transcendental's first reader, as the compiler emitted the pair, asked of llc --------
import tilegcn  # noqa: E402
from tilegcn import language as T  # noqa: E402


@tilegcn.jit
def exp2_times_3(X, Y, *, block=16):
    """The issue's case: `T.exp2(x) * 3` is v_exp_f32 then a v_mul_f32 reading its result."""
    M, N = X.shape
    with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=64) as (bx, by):
        x = T.alloc_fragment((block, block), "float32")
        T.copy(X[by * block, bx * block], x)
        for i, j in T.Parallel(block, block):
            x[i, j] = T.exp2(x[i, j]) * 3
        T.copy(x, Y[by * block, bx * block])


@tilegcn.jit
def divide(X, Y, Z, *, block=16):
    """a / b: v_rcp_f32 of the scaled divisor, then the FMAs refining it."""
    M, N = X.shape
    with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=64) as (bx, by):
        x = T.alloc_fragment((block, block), "float32")
        y = T.alloc_fragment((block, block), "float32")
        T.copy(X[by * block, bx * block], x)
        T.copy(Y[by * block, bx * block], y)
        for i, j in T.Parallel(block, block):
            x[i, j] = x[i, j] / y[i, j]
        T.copy(x, Z[by * block, bx * block])


_MIR_INLINE = {"1.0": 0x3F800000, "-1.0": 0xBF800000, "0.5": 0x3F000000, "2.0": 0x40000000, "0": 0}


def _mir_source(text: str) -> str:
    if re.fullmatch(r"v\d+", text):
        return f"$vgpr{text[1:]}"
    if text.startswith("0x"):
        return str(int(text, 16))
    return str(_MIR_INLINE[text])


def asm_to_mir(line: str) -> str:
    """The MIR of one VALU line of a compiled kernel, in the two forms a transcendental and its reader take here:
    VOP1 / VOP2 (`v_exp_f32 v1, v2`, `v_mul_f32 v2, 0x40400000, v1`) and VOP3 with negated sources
    (`v_fma_f32 v12, -v1, v11, 1.0`)."""
    op, _, rest = line.partition(" ")
    dst, *srcs = [o.strip() for o in rest.split(",")]
    implicit = "implicit $mode, implicit $exec"
    if op in ("v_fma_f32", "v_div_fixup_f32", "v_div_fmas_f32"):
        mods = ", ".join(f"{int(s.startswith('-'))}, {_mir_source(s.lstrip('-'))}" for s in srcs)
        return f"$vgpr{dst[1:]} = {op.upper()}_e64 {mods}, 0, 0, {implicit}"
    return f"$vgpr{dst[1:]} = {op.upper()}_e32 {', '.join(map(_mir_source, srcs))}, {implicit}"


def transcendental_pairs(asm: str) -> list:
    """(producer line, lines issued between, first reader line) for each TRANS_OPS instruction of `asm`."""
    lines = [ln.split("//")[0].strip() for ln in asm.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith((".", ";")) and not ln.endswith(":")]
    out = []
    for k, ln in enumerate(lines):
        if ln.split()[0] not in TRANS_OPS:
            continue
        dst = ln.split()[1].rstrip(",")
        for end in range(k + 1, len(lines)):
            if dst in [o.strip().lstrip("-") for o in lines[end].partition(" ")[2].split(",")[1:]]:
                out.append((ln, lines[k + 1:end], lines[end]))
                break
    return out


def issued_wait_states(lines: list) -> int:
    return sum(int(ln.split()[1]) + 1 if ln.startswith("s_nop") else 1 for ln in lines)


COMPILED = [(arch, kernel) for arch in ARCHES for kernel in ("exp2_times_3", "divide")]


@pytest.mark.parametrize("arch,kernel", COMPILED, ids=[f"{a}-{k}" for a, k in COMPILED])
def test_compiled_transcendental_reader_gets_llcs_wait_states(arch, kernel):
    """In the compiled kernel, between each transcendental and its first reader (a non-TRANS VALU), exactly the wait
    states llc places between that pair (no fewer: the hazard; no more: the lowering emits them back to back and
    the pass pads), and they are the pass's s_nop: a lowering that hid the pair behind other work would fail here."""
    x, y = torch.linspace(-4, 4, 256).reshape(16, 16), torch.linspace(1, 3, 256).reshape(16, 16)
    args = (x, torch.empty_like(x)) if kernel == "exp2_times_3" else (x, y, torch.empty_like(x))
    k = globals()[kernel].compile(*args, arch=arch)
    pairs = transcendental_pairs(k.asm)
    assert pairs, f"no transcendental in {kernel}"
    for producer, between, reader in pairs:
        want = llvm_wait_states(arch, asm_to_mir(producer), asm_to_mir(reader))
        assert want == get_arch(arch).valu_hazards.trans_to_valu_read
        assert issued_wait_states(between) == want and [ln.split()[0] for ln in between] == ["s_nop"], \
            f"{arch} {kernel}: {producer} -> {between} -> {reader}; llc places {want}"


@pytest.mark.parametrize("kernel", ["exp2_times_3", "divide"])
def test_emulator_refuses_the_compiled_kernel_one_wait_state_short(kernel, tmp_path, monkeypatch):
    """The issue's case on gfx942 (and a division's v_rcp_f32): the compiled kernel runs on the emulated device and
    matches torch; with the s_nop after one transcendental removed (one wait state fewer than llc's) it is refused."""
    monkeypatch.setenv("TILEGCN_DEVICE", "emulator")
    x, y = torch.linspace(-4, 4, 256).reshape(16, 16), torch.linspace(1, 3, 256).reshape(16, 16)
    args = (x, torch.empty_like(x)) if kernel == "exp2_times_3" else (x, y, torch.empty_like(x))
    k = globals()[kernel].compile(*args, arch="gfx942")
    k(*args)
    torch.testing.assert_close(args[-1], torch.exp2(x) * 3 if kernel == "exp2_times_3" else x / y, rtol=2e-6, atol=0)
    edited, n = re.subn(r"(v_(?:exp|rcp)_f32 v\d+, v\d+\n)\s*s_nop 0\n", r"\1", k.asm, count=1)
    assert n == 1, "no s_nop after a transcendental to remove"
    path = tmp_path / "edited.s"
    path.write_text(edited)
    with pytest.raises(HazardError, match=r"the result of the transcendental .* 0 wait states before; gfx942 needs 1"):
        k.with_asm(path)(*args)
