"""What the timing model needs to know about each instruction, decided once per pc from the decoded
instruction and its bound handler: the issue category (S11: per 4-clk slot a SIMD issues at most one
instruction per category: VALU (MFMA included), VMEM, SALU/SMEM, LDS, branch; waits, nops, barriers and
s_setprio are handled by the sequencer and use none), MFMA passes, memory widths, wait counts."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..amdgcn.arch import PACKED_F32_VALU, f8f6f4_passes, mfma_valu_holds
from ..runtime.emulator.tracing import Const, Reg
from ..runtime.emulator.tracing import mfma_shape as shape_of

_WIDTH = [
    (re.compile(r"dwordx(\d)"), lambda m: 4 * int(m.group(1))),
    (re.compile(r"_b(\d+)$|_b(\d+)_"), lambda m: int(m.group(1) or m.group(2)) // 8),
    (re.compile(r"dword"), lambda m: 4),
    (re.compile(r"short|_u16|_i16|d16"), lambda m: 2),
    (re.compile(r"byte|_u8|_i8"), lambda m: 1),
]
TRANSCENDENTAL = re.compile(r"^v_(exp|log|rcp|rsq|sqrt|sin|cos)_")


@dataclass(frozen=True)
class Op:
    kind: str  # valu, trans, mfma, salu, smem, vmem, ds, branch, waitcnt, nop, barrier, setprio, end, other
    category: str | None  # issue category, None for sequencer-only instructions
    passes: int = 0  # MFMA
    valu_hold: int = 0  # MFMA: clk after its issue before any VALU op of its SIMD may issue (S9, S33)
    pk_hold: int = 0  # MFMA: the same for packed-f32 VALU ops and dot products (S33)
    packed_f32: bool = False  # VALU: v_pk_{add,fma,mul}_f32, v_pk_mov_b32 or a v_dot*: held longer by an MFMA
    flops: int = 0  # MFMA: 2*M*N*K per wave instruction
    bytes_per_lane: int = 0  # vmem, ds
    store: bool = False
    lds_dma: bool = False
    vmcnt: int | None = None  # s_waitcnt
    lgkmcnt: int | None = None
    nops: int = 0  # s_nop N: N + 1 wait states
    prio: int = 0  # s_setprio
    vreads: frozenset = frozenset()  # vector ops: the VGPRs they read (a transcendental's result is waited for)
    vwrites: frozenset = frozenset()  # trans: the VGPRs it writes


def width(mnemonic: str) -> int:
    for rx, f in _WIDTH:
        m = rx.search(mnemonic)
        if m:
            return f(m)
    return 4


def _is_fill(operands) -> bool:
    """An MFMA that multiplies a register tuple by itself onto an inline-constant srcC: tilegcn's accumulator fill
    (D = 0 * 0 + c, passes/elementwise.py), which sets registers and computes none of the launch's FLOPs."""
    return len(operands) == 4 and operands[1] == operands[2] and isinstance(operands[3], Const)


def classify(ins, handler, arch) -> Op:
    cls, base = handler.cls, ins.base
    if cls == "mfma" or base.startswith("v_mfma"):
        lowp = arch.lowp_mfmas.get(base)
        if lowp is not None:  # fp8 / int8 / f32 / f8f6f4: passes and shape from the arch's table (T.gemm's 8-bit too)
            return _lowp_mfma(ins, lowp)
        info = shape_of(base)
        passes = handler.mfma.passes if handler.mfma is not None else info.passes if info else _passes_from_name(base)
        flops = 2 * info.M * info.N * info.K if info and not _is_fill(ins.operands) else 0
        return _mfma(ins, passes, flops)
    if cls == "valu":
        if TRANSCENDENTAL.match(base):
            return Op("trans", "valu", vreads=_vgprs(ins.operands[1:]), vwrites=_vgprs(ins.operands[:1]))
        return Op("valu", "valu", vreads=_vgprs(ins.operands[1:]), packed_f32=bool(PACKED_F32_VALU.match(base)))
    if cls == "vmem":
        n = width(base)
        return Op("vmem", "vmem", bytes_per_lane=n, store="store" in base, lds_dma="lds" in ins.mods,
                  vreads=_vgprs(ins.operands if "store" in base else ins.operands[1:]))
    if cls == "ds":
        n = width(base) * (2 if "read2" in base or "write2" in base else 1)
        return Op("ds", "lds", bytes_per_lane=n, store="write" in base,
                  vreads=_vgprs(ins.operands if "write" in base else ins.operands[1:]))
    if cls == "smem":
        return Op("smem", "salu")
    if cls == "salu":
        return Op("salu", "salu")
    if cls == "branch":
        return Op("branch", "branch")
    if cls == "waitcnt":
        vm, lgkm = ins.mods.get("vmcnt"), ins.mods.get("lgkmcnt")
        vm = None if vm is None or vm >= arch.max_vmcnt else vm
        lgkm = None if lgkm is None or lgkm >= arch.max_lgkmcnt else lgkm
        return Op("waitcnt", None, vmcnt=vm, lgkmcnt=lgkm)
    if cls == "barrier":
        return Op("barrier", None)
    if base == "s_setprio":
        return Op("setprio", None, prio=ins.operands[0].value if ins.operands else 0)
    if cls == "nop":
        return Op("nop", None, nops=handler.ws)
    if base == "s_endpgm":
        return Op("end", None)
    return Op("other", "salu")


def coexecutes(base: str) -> bool:
    """Whether other VALU ops may issue while MFMA `base` runs: all but those whose *inputs* are f32 or f64
    (S9, the Matrix Instruction Calculator's CDNA3 table: v_mfma_f32_32x32x2_f32, v_mfma_f64_16x16x4_f64, ...;
    xf32 co-executes). The f32 of v_mfma_f32_* is the accumulator type: it was read as the input type, so every
    f32-accumulating MFMA held VALU off and aiter's FAv3 could not overlap its softmax with its MFMAs."""
    name = base.removesuffix("_1k")  # the input type ends the name: ..._32x32x2_f32, ..._32x32x2f32
    return name.endswith("xf32") or not name.endswith(("f32", "f64"))


def _mfma(ins, passes, flops) -> Op:
    """An MFMA's Op. What it holds off on its SIMD's VALU (in 4-clk issue slots from its issue, S33: LLVM's
    rules fitted to ATT thread traces of MI308X and MI350X): an f32/f64-input MFMA every VALU op until passes + 2;
    any other one a VALU op until 1 + (its widest A/B source, bytes a lane) / 16 (S9 agrees for CDNA3's 8-byte
    sources: a co-execution delay of 4 clk), and a packed-f32 op or dot until passes + 2, one more with a
    16-byte A source."""
    base, ops = ins.base, ins.operands
    src = [op.count * 4 for op in ops[1:3] if isinstance(op, Reg)] or [8]
    hold, pk = mfma_valu_holds(passes, max(src), src[0], coexecutes(base))
    return Op("mfma", "valu", passes=passes, flops=flops, vreads=_vgprs(ops[1:]), valu_hold=4 * hold, pk_hold=4 * pk)


def _vgprs(operands) -> frozenset:
    """The VGPR numbers that register operands `operands` name."""
    return frozenset(r for op in operands if isinstance(op, Reg) and op.kind == "v"
                     for r in range(op.index, op.index + op.count))


def _lowp_mfma(ins, lowp) -> Op:
    """An MFMA of arch.lowp_mfmas: an f8f6f4 one takes the passes of the formats cbsz / blgp name (16 on two 8-bit
    operands, 8 on 6/4-bit ones: arch.f8f6f4_passes, checked against llc)."""
    passes = lowp.passes
    if lowp.a_type == "f8f6f4":
        passes = f8f6f4_passes(lowp, int(ins.mods.get("cbsz", 0)), int(ins.mods.get("blgp", 0)))
    flops = 0 if _is_fill(ins.operands) else 2 * lowp.M * lowp.N * lowp.K
    base = ins.base  # co-issue as classify's rule for the other MFMAs says
    return _mfma(ins, passes, flops)


def _passes_from_name(base):
    m = re.search(r"_(\d+)x(\d+)x(\d+)", base)
    if not m:
        return 4
    return 8 if int(m.group(1)) >= 32 else 4
