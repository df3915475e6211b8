"""What the timing model needs to know about each instruction, decided once per pc from the decoded
instruction and its bound handler: the issue category (S11: per 4-clk slot a SIMD issues at most one
instruction per category: VALU (MFMA included), VMEM, SALU/SMEM, LDS, branch; waits, nops, barriers and
s_setprio are handled by the sequencer and use none), MFMA passes, memory widths, wait counts."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..amdgcn.arch import f8f6f4_passes
from ..runtime.emulator.tracing import Const
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
    coexec: bool = True  # MFMA: other VALU ops may issue while it runs (not the f32/f64 MFMAs, S9)
    flops: int = 0  # MFMA: 2*M*N*K per wave instruction
    bytes_per_lane: int = 0  # vmem, ds
    store: bool = False
    lds_dma: bool = False
    vmcnt: int | None = None  # s_waitcnt
    lgkmcnt: int | None = None
    nops: int = 0  # s_nop N: N + 1 wait states
    prio: int = 0  # s_setprio


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
        return Op("mfma", "valu", passes=passes, coexec="_f32_" not in base[6:] and "f64" not in base, flops=flops)
    if cls == "valu":
        return Op("trans" if TRANSCENDENTAL.match(base) else "valu", "valu")
    if cls == "vmem":
        n = width(base)
        return Op("vmem", "vmem", bytes_per_lane=n, store="store" in base, lds_dma="lds" in ins.mods)
    if cls == "ds":
        n = width(base) * (2 if "read2" in base or "write2" in base else 1)
        return Op("ds", "lds", bytes_per_lane=n, store="write" in base)
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


def _lowp_mfma(ins, lowp) -> Op:
    """An MFMA of arch.lowp_mfmas: an f8f6f4 one takes the passes of the formats cbsz / blgp name (16 on two 8-bit
    operands, 8 on 6/4-bit ones: arch.f8f6f4_passes, checked against llc)."""
    passes = lowp.passes
    if lowp.a_type == "f8f6f4":
        passes = f8f6f4_passes(lowp, int(ins.mods.get("cbsz", 0)), int(ins.mods.get("blgp", 0)))
    flops = 0 if _is_fill(ins.operands) else 2 * lowp.M * lowp.N * lowp.K
    base = ins.base  # co-issue as classify's rule for the other MFMAs says
    return Op("mfma", "valu", passes=passes, coexec="_f32_" not in base[6:] and "f64" not in base, flops=flops)


def _passes_from_name(base):
    m = re.search(r"_(\d+)x(\d+)x(\d+)", base)
    if not m:
        return 4
    return 8 if int(m.group(1)) >= 32 else 4
