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
from asm.emukit import module, srd  # noqa: E402
from tilegcn.amdgcn import isa  # noqa: E402
from tilegcn.amdgcn.arch import get_arch  # noqa: E402
from tilegcn.amdgcn.hazards import insert_hazard_nops  # noqa: E402
from tilegcn.amdgcn.isa import M0, Inst, Reg  # noqa: E402
from tilegcn.errors import HazardError  # noqa: E402
from tilegcn.toolchain import find_llvm  # noqa: E402

ARCHES = ("gfx942", "gfx950")

# LLVM's MIR opcode of each MFMA (the assembler mnemonic is the arch table's); the `_vgprcd` form writes VGPRs.
MIR_MFMA = {
    "v_mfma_f32_32x32x8_bf16": "V_MFMA_F32_32X32X8BF16_1K", "v_mfma_f32_16x16x16_bf16": "V_MFMA_F32_16X16X16BF16_1K",
    "v_mfma_f32_32x32x8_f16": "V_MFMA_F32_32X32X8F16", "v_mfma_f32_16x16x16_f16": "V_MFMA_F32_16X16X16F16",
    "v_mfma_f32_32x32x16_bf16": "V_MFMA_F32_32X32X16_BF16", "v_mfma_f32_16x16x32_bf16": "V_MFMA_F32_16X16X32_BF16",
    "v_mfma_f32_32x32x16_f16": "V_MFMA_F32_32X32X16_F16", "v_mfma_f32_16x16x32_f16": "V_MFMA_F32_16X16X32_F16",
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


def mfma(name, dst: R, a: R, b: R, c: R) -> Op:
    mir_name = MIR_MFMA[name] + ("_vgprcd_e64" if dst.file == "v" else "_e64")
    return Op(f"{name} {dst.asm}, {a.asm}, {b.asm}, {c.asm}",
              f"{dst.mir} = {mir_name} {a.mir}, {b.mir}, {c.mir}, 0, 0, 0, implicit $mode, implicit $exec",
              Inst(name, (dst.reg, a.reg, b.reg, c.reg), (dst.reg,), (a.reg, b.reg, c.reg), isa.MFMA))


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
    hz = get_arch(arch).mfma_hazards
    n_ab, n_d = shape.a_regs, shape.d_regs
    A, B = R("v", 0, n_ab), R("v", 4, n_ab)
    acc = R("a", 0, n_d)
    vacc = R("v", 8, n_d)  # the VGPR-destination form; 8..23 stays clear of ADDR and the operands
    shifted = R("a", 2, n_d)  # partially overlaps acc
    p = shape.passes
    first = mfma(name, acc, A, B, acc)
    first_v = mfma(name, vacc, A, B, vacc)
    return [
        ("vdst -> v_accvgpr_read", hz.vdst_to_read[p], first, accvgpr_read(R("v", 30), R("a", 1))),
        ("vdst -> VALU read", hz.vdst_to_read[p], first_v, valu_add(R("v", 30), R("v", 9))),
        ("vdst -> ds_write data", hz.vdst_to_read[p], first_v, ds_write(R("v", 9))),
        ("vdst -> buffer_store data", hz.vdst_to_read[p], first_v, buffer_store(R("v", 9))),
        ("vdst -> MFMA srcA", hz.vdst_to_read[p], first_v, mfma(name, acc, R("v", 8, n_ab), B, acc)),
        ("vdst -> MFMA srcB", hz.vdst_to_read[p], first_v, mfma(name, acc, A, R("v", 8, n_ab), acc)),
        ("vdst -> same srcC", 0, first, mfma(name, acc, A, B, acc)),
        ("vdst -> overlapping srcC", hz.vdst_to_srcc_overlap[p], first, mfma(name, shifted, A, B, shifted)),
        ("VALU write -> MFMA srcA", hz.valu_write_to_mfma_src, valu_mov(R("v", 1), R("v", 30)), first),
        ("VALU write -> MFMA srcB", hz.valu_write_to_mfma_src, valu_mov(R("v", 4), R("v", 30)), first),
        ("v_accvgpr_write -> MFMA srcC", hz.valu_write_to_mfma_src, accvgpr_write(R("a", 1), R("v", 30)), first),
    ]


CASES = [(arch, name, shape, *case) for arch in ARCHES for name, shape in _shapes(arch)
         for case in mfma_cases(arch, name, shape)]
IDS = [f"{c[0]}-{c[1]}-{c[3]}" for c in CASES]


# ---- the oracle -------------------------------------------------------------------------------------------------
LIVEINS = ", ".join([f"$vgpr{i}" for i in range(48)] + [f"$agpr{i}" for i in range(24)] +
                    [f"$sgpr{i}" for i in range(16)] + ["$m0"])


@functools.lru_cache(maxsize=None)
def llvm_wait_states(arch: str, first_mir: str, second_mir: str) -> int:
    """Wait states LLVM's hazard recognizer puts between the two instructions (s_nop N counts N + 1)."""
    mir = f"""---
name: hazard
tracksRegLiveness: true
body: |
  bb.0:
    liveins: {LIVEINS}
    {first_mir}
    {second_mir}
    S_ENDPGM 0
...
"""
    out = subprocess.run([_llc(), "-mtriple=amdgcn-amd-amdhsa", f"-mcpu={arch}", "-run-pass=post-RA-hazard-rec",
                          "-x", "mir", "-o", "-", "-"], input=mir, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    body = out.stdout.split("bb.0:", 1)[1]
    lines = [ln.strip().removeprefix("early-clobber ") for ln in body.splitlines()
             if ln.strip() and not ln.strip().startswith("liveins")]
    start = lines.index(first_mir.strip())
    end = lines.index(second_mir.strip(), start + 1)
    nops = [re.fullmatch(r"S_NOP (\d+)", ln) for ln in lines[start + 1:end]]
    assert all(nops), f"LLVM put something other than S_NOP between the two: {lines[start + 1:end]}"
    return sum(int(m.group(1)) + 1 for m in nops)


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


def run_on_emulator(arch: str, first: str, second: str, states: int):
    """One wave runs `first`, `states` wait states of s_nop, then `second`, all operands set up beforehand."""
    pre = ["s_load_dwordx2 s[4:5], s[0:1], 0x0", "v_and_b32 v1, 0x3ff, v0", "v_lshlrev_b32 v40, 2, v1",
           "s_waitcnt lgkmcnt(0)", *srd(8, 4, 4096).splitlines()]
    pre += [f"v_mov_b32 v{i}, 0x3f803f80" for i in range(0, 24)]  # bf16/f16 pairs and accumulators
    pre += [f"v_accvgpr_write_b32 a{i}, 0" for i in range(24)] + ["v_mov_b32 v30, 1.0", "s_nop 7", "s_nop 7"]
    body = "\n".join(pre + [first, nops(states), second, "s_endpgm"])
    mod = module(body, arch=arch, args=("ptr",), vgprs=72, accum=48, lds=4096, sgprs=24)
    mod.launch("k", (1, 1, 1), (64, 1, 1), [torch.zeros(1024, dtype=torch.int32)])


def assert_pass_and_emulator_agree_with_llvm(arch, first, second, what: str) -> int:
    """LLVM's wait states between the two (the oracle): tilegcn's hazard pass places exactly that many, and the
    emulated device rejects the pair with one fewer and runs it with that many. Returns LLVM's count."""
    want = llvm_wait_states(arch, first.mir, second.mir)
    assert tilegcn_wait_states(arch, first.inst, second.inst) == want, f"{arch} {what}: LLVM places {want}"
    if want:
        with pytest.raises(HazardError):
            run_on_emulator(arch, first.asm, second.asm, want - 1)
    run_on_emulator(arch, first.asm, second.asm, want)
    return want


@pytest.mark.parametrize("arch,name,shape,what,table,first,second", CASES, ids=IDS)
def test_mfma_hazard_matches_llvm(arch, name, shape, what, table, first, second):
    want = assert_pass_and_emulator_agree_with_llvm(arch, first, second, f"{name} {what}")
    assert table == want, f"{arch} {name} {what}: the arch table says {table} wait states, LLVM places {want}"


@pytest.mark.parametrize("arch", ARCHES)
def test_m0_write_before_lds_dma_matches_llvm(arch):
    first = "$m0 = S_MOV_B32 $sgpr4"
    second = "BUFFER_LOAD_DWORD_LDS_OFFEN $vgpr40, $sgpr8_sgpr9_sgpr10_sgpr11, $sgpr4, 0, 0, 0, implicit $exec, implicit $m0"
    want = llvm_wait_states(arch, first, second)
    assert get_arch(arch).m0_write_to_lds_dma_nops + 1 == want
    s4, v40, srd_regs = Reg("s", 4), Reg("v", 40), Reg("s", 8, 4)
    write = Inst("s_mov_b32", (M0, s4), (M0,), (s4,), isa.SALU)
    dma_inst = Inst("buffer_load_dword", (v40, srd_regs, 0), (), (v40, srd_regs, M0), isa.LDS_DMA, suffix="offen lds")
    assert tilegcn_wait_states(arch, write, dma_inst) == want
    dma = "buffer_load_dword v40, s[8:11], 0 offen lds"
    if want > 1:
        with pytest.raises(HazardError):
            run_on_emulator(arch, "s_mov_b32 m0, 0", dma, want - 1)
    with pytest.raises(HazardError, match="M0"):
        run_on_emulator(arch, "s_mov_b32 m0, 0", dma, 0)
    run_on_emulator(arch, "s_mov_b32 m0, 0", dma, want)


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
