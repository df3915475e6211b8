"""DPP and SDWA forms of VOP1/VOP2/VOPC instructions: the plain instruction, bound with transforms of its
sources (Binder.src_hooks) and of how its result lands in the destination.

DPP (CDNA3 guide, "Data Parallel Processing"): src0 is read from another lane of the same wave. A source
lane outside the row (row_shl/shr, row_bcast) or the wave (wave_shl/shr), or one disabled in EXEC, is
invalid: with bound_ctrl:1 the lane reads 0, with bound_ctrl:0 the destination lane is not written.
row_mask bit r enables lanes 16r..16r+15, bank_mask bit k the lanes whose (lane % 16) // 4 is k; disabled
lanes are not written. row_bcast:15 reads lane 15 of the previous row (row 0 has none: invalid), row_bcast:31
lane 31 for rows 2 and 3 (rows 0 and 1 invalid) - the guide names only the rows that receive data, we
treat the others as invalid sources. row_newbcast:N (gfx90a and later, dpp_ctrl 0x150 + N) gives every lane of a
row lane N of that row: LLVM's modifier syntax doc ("broadcast a thread within a row to the whole row"), the
encoding gfx10 spells row_share:N (llc lowers one 64-bit row share to row_newbcast:1 on gfx90a and to two
row_share:1 on gfx10); aiter's gfx942 int8 GEMM broadcasts its per-token scales with it.

SDWA (CDNA3 guide, "Sub-Dword Addressing"): src*_sel picks a byte, word or the dword of a source,
zero-extended (sign-extended with sext()); dst_sel places the low bits of the result in a byte / word of
the destination and dst_unused says what the other bits become (UNUSED_PAD: 0, UNUSED_SEXT: the field's
sign, UNUSED_PRESERVE: the old register's bits).
"""
from __future__ import annotations

import dataclasses

import torch

from .decode import Reg
from .program import BindError

LANE = torch.arange(64)
DPP_MODS = ("quad_perm", "row_shl", "row_shr", "row_ror", "wave_shl", "wave_rol", "wave_shr", "wave_ror",
            "row_mirror", "row_half_mirror", "row_bcast", "row_newbcast", "row_mask", "bank_mask", "bound_ctrl",
            "fi")
SDWA_MODS = ("src0_sel", "src1_sel", "dst_sel", "dst_unused")
SEL = {"BYTE_0": (0, 8), "BYTE_1": (8, 8), "BYTE_2": (16, 8), "BYTE_3": (24, 8), "WORD_0": (0, 16),
       "WORD_1": (16, 16), "DWORD": (0, 32)}


def dpp_source_lanes(mods: dict):
    """(source lane [64], source lane exists [64]) of a DPP control."""
    lane, row_base, in_row = LANE, LANE & ~15, LANE & 15
    valid = torch.ones(64, dtype=torch.bool)
    if "quad_perm" in mods:
        perm = torch.tensor(mods["quad_perm"])
        src = (lane & ~3) | perm[lane & 3]
    elif "row_shl" in mods:
        src, valid = lane + mods["row_shl"], in_row + mods["row_shl"] <= 15
    elif "row_shr" in mods:
        src, valid = lane - mods["row_shr"], in_row - mods["row_shr"] >= 0
    elif "row_ror" in mods:
        src = row_base | ((in_row - mods["row_ror"]) & 15)
    elif "wave_shl" in mods:
        src, valid = lane + 1, lane < 63
    elif "wave_rol" in mods:
        src = (lane + 1) & 63
    elif "wave_shr" in mods:
        src, valid = lane - 1, lane > 0
    elif "wave_ror" in mods:
        src = (lane - 1) & 63
    elif "row_mirror" in mods:
        src = row_base | (15 - in_row)
    elif "row_half_mirror" in mods:
        src = (lane & ~7) | (7 - (lane & 7))
    elif "row_bcast" in mods:
        width = mods["row_bcast"]
        if width == 15:
            src, valid = row_base - 1, lane >= 16
        elif width == 31:
            src, valid = torch.full_like(lane, 31), lane >= 32
        else:
            raise BindError(f"row_bcast:{width} is not a DPP control")
    elif "row_newbcast" in mods:
        src = row_base | (mods["row_newbcast"] & 15)
    else:
        raise BindError("DPP instruction without a known dpp control")
    for name in ("wave_shl", "wave_rol", "wave_shr", "wave_ror"):
        if mods.get(name, 1) != 1:
            raise BindError(f"{name}:{mods[name]} is not a DPP control (only 1)")
    return src.clamp(0, 63), valid


def dpp_lane_enable(mods: dict):
    """Lanes row_mask / bank_mask allow to be written [64] bool."""
    row_mask, bank_mask = mods.get("row_mask", 0xF), mods.get("bank_mask", 0xF)
    return (((row_mask >> (LANE // 16)) & 1) == 1) & (((bank_mask >> ((LANE % 16) // 4)) & 1) == 1)


def _plain(ins, drop):
    return dataclasses.replace(ins, mods={k: v for k, v in ins.mods.items() if k not in drop}, suffix="")


def _first_vsrc(ins, what):
    """src0: the first operand after the destination that is not an SGPR (carry-out / VOPC destinations)."""
    for op in ins.operands[1:]:
        if isinstance(op, Reg) and op.kind == "s":
            continue
        return op
    raise BindError(f"{what}: no source operand")


def build_dpp(ins, b, index, build_plain):
    mods = ins.mods
    if mods.get("fi"):
        raise BindError("DPP fetch-inactive (fi:1) is not modelled")
    src_lane, exists = dpp_source_lanes(mods)
    enable = dpp_lane_enable(mods)
    bound_zero = bool(mods.get("bound_ctrl", 0))
    state = {}

    src0 = _first_vsrc(ins, "DPP")
    if not (isinstance(src0, Reg) and src0.kind == "v"):
        raise BindError(f"DPP src0 must be a VGPR, got {getattr(src0, 'text', src0)}")

    def hook(read):
        state["read"] = read
        return lambda g: state["val"]

    b.src_hooks.append(hook)
    inner = build_plain(_plain(ins, DPP_MODS), b, index)
    if inner is None:
        return None
    if b.src_hooks or "read" not in state:
        raise BindError("DPP on this instruction is not modelled")
    if b.sw and not (bound_zero and bool(enable.all())):
        raise BindError("DPP with masked lanes on an instruction that writes SGPRs is not modelled")
    read = state["read"]
    plain_run = inner.run
    dsts = sorted(b.vw)
    always = bound_zero and bool(enable.all()) and bool(exists.all())
    src_lane_dev, exists_dev, enable_dev = {}, {}, {}

    def on(dev, cache, t):
        c = cache.get(dev)
        if c is None:
            c = cache[dev] = t.to(dev)
        return c

    def run(g):
        v = read(g)
        dev = v.device
        idx = on(dev, src_lane_dev, src_lane)
        val = v.index_select(1, idx)
        valid = on(dev, exists_dev, exists).view(1, 64)
        ex = g.exec_mask()
        if ex is not None:
            valid = valid & ex.index_select(1, idx)
        if bound_zero:
            val = torch.where(valid, val, 0)
        state["val"] = val
        if always:
            plain_run(g)
            return
        write = on(dev, enable_dev, enable).view(1, 64)
        if not bound_zero:
            write = write & valid
        old = [g.rv(r).clone() for r in dsts]
        plain_run(g)
        keep = (~write).expand(g.n, 64)
        for r, o in zip(dsts, old):
            g.wv(r, o, mask=keep)
    inner.run = run
    return inner


def _sel_hook(sel, sext):
    shift, width = SEL[sel]
    if width == 32:
        return None

    def hook(read):
        if sext:
            up = 32 - width - shift
            return lambda g: (read(g) << up) >> (32 - width)
        mask = (1 << width) - 1
        return lambda g: (read(g) >> shift) & mask
    return hook


def _s32(v):
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


def build_sdwa(ins, b, index, build_plain):
    mods = ins.mods
    for k in ("src0_sel", "src1_sel", "dst_sel"):
        if mods.get(k, "DWORD") not in SEL:
            raise BindError(f"{k}:{mods[k]} is not an SDWA select")
    plain = _plain(ins, SDWA_MODS)
    srcs = ins.operands[1:]  # after the destination (a VGPR, or the SGPR pair / vcc of a VOPC)
    hooks = []
    for i, op in enumerate(srcs[:2]):
        h = _sel_hook(mods.get(f"src{i}_sel", "DWORD"), isinstance(op, Reg) and op.sext)
        hooks.append(h or (lambda read: read))
    b.src_hooks.extend(hooks)
    inner = build_plain(plain, b, index)
    if inner is None:
        return None
    if b.src_hooks:
        raise BindError("SDWA on this instruction is not modelled")
    shift, width = SEL[mods.get("dst_sel", "DWORD")]
    unused = mods.get("dst_unused", "UNUSED_PAD")
    if width == 32 or not b.vw:
        return inner
    if unused not in ("UNUSED_PAD", "UNUSED_SEXT", "UNUSED_PRESERVE"):
        raise BindError(f"dst_unused:{unused} is not an SDWA mode")
    (dst,) = sorted(b.vw)
    if unused == "UNUSED_PRESERVE":  # the bits dst_sel leaves are the old value's: a read (the hazard checks see it)
        inner.vr = inner.vr | {dst}
        inner.vrw = inner.vrw | {dst}
    plain_run = inner.run
    keep_bits = _s32(~(((1 << width) - 1) << shift))

    def run(g):
        old = g.rv(dst).clone()
        plain_run(g)
        r = (g.rv(dst) & ((1 << width) - 1)) << shift
        if unused == "UNUSED_PRESERVE":
            r = r | (old & keep_bits)
        elif unused == "UNUSED_SEXT":
            r = (r << (32 - width - shift)) >> (32 - width - shift)
        g.wv(dst, r)
    inner.run = run
    return inner
