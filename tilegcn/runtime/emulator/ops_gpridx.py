"""VGPR index mode (GFX9: s_set_gpr_idx_on / s_set_gpr_idx_off), which aiter's gfx942 int8 GEMM uses in its
epilogue loop to walk its accumulators.

Vega / CDNA3 ISA guides, "S_SET_GPR_IDX_ON": MODE.gpr_idx_en = 1; M0[7:0] = S0[7:0]; M0[15:12] = the
instruction's 4 mode bits (SRC0, SRC1, SRC2, DST; the rest of M0 is kept); while the mode is on, a VALU
instruction's VGPR operand named by a set bit is the register M0[7:0] past the one it names.
"S_SET_GPR_IDX_OFF": MODE.gpr_idx_en = 0.

The emulator binds instructions before running them, so the mode is taken statically: a region runs from an
s_set_gpr_idx_on to the next s_set_gpr_idx_off in address order and must be straight-line VALU code (no
branch, no memory, MFMA or SALU instruction, no register pair written to SGPRs); anything else in it is
refused when reached. Inside, the sources the mode names read VGPR (named + M0[7:0]) of each wave at run time;
an indexed destination is not modelled. The registers such an instruction reads for the emulator's hazard
checks and the timing model's dependencies are the named ones (the index is only known at run time), so a
dependency through an indexed register is not seen: aiter's epilogue reads accumulators finished long before.
"""
from __future__ import annotations

import re

import torch

from .decode import M0
from .program import BindError, Handler
from .state import Fault

MODE_BITS = ("SRC0", "SRC1", "SRC2", "DST")


def gpr_idx_mode(ins) -> tuple:
    """The mode names of an s_set_gpr_idx_on's gpr_idx(...) operand ('SRC0', ...)."""
    text = ins.mods.get("gpr_idx")
    if text is None:
        m = re.search(r"gpr_idx\(([A-Z0-9, ]*)\)", ins.text)
        text = m.group(1) if m else ""
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in names if x not in MODE_BITS]
    if bad:
        raise BindError(f"unknown gpr_idx mode {bad[0]!r}")
    return names


def index_regions(instrs) -> dict:
    """{instruction index: mode names or a refusal string} for the instructions between each
    s_set_gpr_idx_on and the next s_set_gpr_idx_off."""
    out, mode = {}, None
    for i, ins in enumerate(instrs):
        base = getattr(ins, "base", ins.mnemonic)
        if base == "s_set_gpr_idx_on":
            try:
                mode = gpr_idx_mode(ins)
            except BindError as exc:
                mode = str(exc)
            continue
        if base == "s_set_gpr_idx_off":
            mode = None
            continue
        if mode is None:
            continue
        if isinstance(mode, tuple) and not ins.mnemonic.startswith("v_"):
            out[i] = f"{ins.mnemonic} inside a VGPR index mode region (only straight-line VALU code is modelled)"
        else:
            out[i] = mode
    return out


def build_gpr_idx(ins, b, index):
    """Handlers of s_set_gpr_idx_on (writes M0's index and mode fields) and s_set_gpr_idx_off (no state: the
    regions are bound statically), or None."""
    if ins.base == "s_set_gpr_idx_off":
        return Handler(ins, index, lambda g: None, "salu", b)
    if ins.base != "s_set_gpr_idx_on":
        return None
    bits = sum(1 << MODE_BITS.index(x) for x in gpr_idx_mode(ins))
    src = b.ssrc_index(ins.operands[0], 1, "index")
    b.write_s(M0)

    def run(g):
        g.ws(M0, (g.rs(M0) & ~0xF0FF) | (g.rs(src) & 0xFF) | (bits << 12))
    return Handler(ins, index, run, "salu", b)


def indexed_vreader(r: int, n_vgpr: int, text: str):
    """Reader of VGPR r + M0[7:0] per wave (int32 [n, 64])."""
    def read(g):
        regs = r + (g.rs(M0).to(torch.int64) & 0xFF)
        if int(regs.max()) >= n_vgpr:
            raise Fault(f"{text} indexed by M0 reaches v{int(regs.max())}, beyond the kernel's {n_vgpr} VGPRs")
        waves = torch.tensor(g.waves, dtype=torch.int64, device=regs.device)
        return g.m.vgpr[regs, waves]
    return read


def check_indexed(ins, b):
    """After binding an instruction inside a region: every VGPR source the mode names was read indexed."""
    if "DST" in b.gpr_index:
        raise BindError("an M0-indexed destination (gpr_idx(DST)) is not modelled")
    if b.sw:
        raise BindError("VGPR index mode on an instruction that writes SGPRs is not modelled")
    for k, name in enumerate(MODE_BITS[:3]):
        op = ins.operands[k + 1] if k + 1 < len(ins.operands) else None
        if name in b.gpr_index and getattr(op, "kind", "") == "v" and k not in b.gpr_indexed:
            raise BindError(f"VGPR index mode on {name} of this instruction is not modelled")
