"""Lane exchanges that go through the LDS unit without touching LDS memory: ds_bpermute_b32, ds_permute_b32,
ds_swizzle_b32. Like every DS op they count in LGKM_CNT: the data is read at issue, the destination is
written when an s_waitcnt lgkmcnt retires the op.

Semantics (CDNA3 guide pseudo-code):
  * ds_bpermute_b32 vdst, vaddr, vdata: lane i reads vdata of lane ((vaddr[i] + offset) / 4) % 64; a
    source lane disabled in EXEC gives 0.
  * ds_permute_b32: active lane i sends vdata[i] to lane ((vaddr[i] + offset) / 4) % 64; when several send
    to one lane the highest-numbered wins; lanes nobody sent to get 0.
  * ds_swizzle_b32 vdst, vdata offset:X: offset[15] = 1: quad permute, lane i reads lane
    (i & ~3) | X[2*(i%4)+1 : 2*(i%4)]; offset[15] = 0: bit-mask mode within 32-lane halves, lane i reads
    ((i & and_mask) | or_mask) ^ xor_mask with the masks in offset[4:0], [9:5], [14:10]. As for
    bpermute, a source lane disabled in EXEC gives 0 (the guide does not say; we do what bpermute does).
The offset of ds_swizzle comes from the encoding (objdump prints it as a swizzle(...) macro).
"""
from __future__ import annotations

import torch

from .ops_mem import _rows_of, _sub, write_rows
from .program import BindError, Handler, u32

LANES = torch.arange(64)


def swizzle_source_lanes(offset: int) -> torch.Tensor:
    if offset & 0x8000:
        return (LANES & ~3) | ((offset >> (2 * (LANES & 3))) & 3)
    and_mask, or_mask, xor_mask = offset & 0x1F, (offset >> 5) & 0x1F, (offset >> 10) & 0x1F
    return (LANES & 0x20) | ((((LANES & 0x1F) & and_mask) | or_mask) ^ xor_mask)


def _gather_lanes(d, src, ex):
    """d [n, 64] read at source lanes src ([n, 64] or [64]); disabled source lanes read 0."""
    idx = src if src.dim() == 2 else src.view(1, 64).expand(d.shape[0], 64)
    val = d.gather(1, idx)
    if ex is not None:
        val = torch.where(ex.gather(1, idx), val, 0)
    return val


def _scatter_lanes(d, dst, ex):
    """ds_permute: lane i sends d[i] to lane dst[i]; the highest sender wins; unreached lanes get 0."""
    n = d.shape[0]
    sender = LANES.to(d.device).view(1, 64).expand(n, 64)
    if ex is not None:
        sender = torch.where(ex, sender, -1)
    winner = torch.full((n, 64), -1, dtype=torch.int64, device=d.device)
    winner.scatter_reduce_(1, dst, sender, "amax")
    val = d.gather(1, winner.clamp(min=0))
    return torch.where(winner >= 0, val, 0)


def build_dslane(ins, b, index):
    base, ops = ins.base, ins.operands
    if base not in ("ds_bpermute_b32", "ds_permute_b32", "ds_swizzle_b32"):
        return None
    bad = [k for k in ins.mods if k != "offset"]
    if bad:
        raise BindError(f"modifier(s) {', '.join(bad)} not supported on {base}")
    dst = b.vdst(ops[0], 1, "vdst")
    b.defer(dst, 1)
    if base == "ds_swizzle_b32":
        if len(ops) != 2:
            raise BindError("expected vdst, vdata")
        data = b.vsrc_index(ops[1], 1, "vdata")
        static_src = swizzle_source_lanes(ins.words[0] & 0xFFFF)
        addr = None
    else:
        if len(ops) != 3:
            raise BindError("expected vdst, vaddr, vdata")
        addr = b.vsrc_index(ops[1], 1, "vaddr")
        data = b.vsrc_index(ops[2], 1, "vdata")
        offset = int(ins.mods.get("offset", 0))
    forward = base == "ds_permute_b32"

    def run(g):
        m = g.m
        ex = g.exec_mask()
        d = g.rv(data)
        if addr is None:
            val = _gather_lanes(d, static_src.to(d.device), ex)
        else:
            lanes = ((u32(g.rv(addr)) + offset) >> 2) & 63
            val = _scatter_lanes(d, lanes, ex) if forward else _gather_lanes(d, lanes, ex)
        val = val.unsqueeze(0)  # computed now: the operands are read at issue
        rows = g.sel

        def apply(pos):
            write_rows(m, dst, _sub(val.squeeze(0), pos).unsqueeze(0), _rows_of(rows, pos), _sub(ex, pos))
        m.issue(g, "ds", (dst,), (), apply)
    return Handler(ins, index, run, "ds", b, queue="ds")
