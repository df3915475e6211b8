"""Flat loads and stores (generic addresses: LDS, private or global per lane) and scratch loads and stores
(the private segment), as LLVM emits them for HIP kernels: LDS reached through a generic pointer, and
stack / spill memory on gfx94x/gfx950, whose scratch_* instructions address the private segment directly
(architected flat scratch: no prologue sets a scratch base).

A generic address in [SHARED_APERTURE, +4 GiB) is the LDS byte (address - aperture) of the wave's
workgroup; in [PRIVATE_APERTURE, +4 GiB) the lane's private byte; anything else is global memory. Every
lane has its own private segment of the descriptor's private_segment_fixed_size bytes; an access outside it
is an EmulatorError (the hardware's would read or write another lane's or wave's scratch).

Flat and scratch ops go through the VM queue (an s_waitcnt vmcnt retires them; LLVM waits for flat loads
with vmcnt(0) lgkmcnt(0)). The LDS bytes a flat op touches are bounds-checked but not race-tracked.
"""
from __future__ import annotations

import torch

from .decode import PRIVATE_APERTURE, SHARED_APERTURE, Off
from .ops_mem import LOADS, STORES, _bytes_value, _rows_of, _sub, format_load, nregs_of, read_rows, store_bytes_of, \
    write_rows
from .program import BindError, Handler, u32
from .state import Fault, first_true

APERTURE_SPAN = 1 << 32


def private_memory(m, size):
    """The private segments of the current chunk's waves: uint8 [waves * 64 * size + 16] (allocated on first
    use per chunk; the last 16 bytes take the accesses of inactive lanes)."""
    key = (id(m.vgpr), size)
    cached = getattr(m, "_private_memory", None)
    if cached is None or cached[0] != key:
        waves = m.vgpr.shape[1]
        cached = (key, torch.zeros(waves * 64 * size + 16, dtype=torch.uint8, device=m.device))
        m._private_memory = cached
    return cached[1]


def _lane_index(g):
    """Global lane number (wave row * 64 + lane) of each lane of the group [n, 64]."""
    rows = g.sel
    if isinstance(rows, slice):
        rows = torch.arange(rows.start, rows.stop, device=g.m.device)
    return rows.view(-1, 1) * 64 + torch.arange(64, device=g.m.device).view(1, 64)


class _Access:
    """Byte indices of one flat / scratch access into the three memories, computed at issue."""

    def __init__(self, g, addr, nbytes, active, write, generic, private_size, what):
        m = g.m
        n = g.n
        lane_ok = torch.ones(n, 64, dtype=torch.bool, device=m.device) if active is None else active
        if generic:
            is_lds = lane_ok & (addr >= SHARED_APERTURE) & (addr < SHARED_APERTURE + APERTURE_SPAN)
            is_priv = lane_ok & (addr >= PRIVATE_APERTURE) & (addr < PRIVATE_APERTURE + APERTURE_SPAN)
            private_off = addr - PRIVATE_APERTURE
        else:
            is_lds = torch.zeros_like(lane_ok)
            is_priv = lane_ok
            private_off = addr
        is_glob = lane_ok & ~is_lds & ~is_priv
        self.masks = (is_lds, is_priv, is_glob)
        self.glob = m.mem.translate(addr, nbytes, is_glob, write) if bool(is_glob.any()) else None
        self.lds = None
        if bool(is_lds.any()):
            off = addr - SHARED_APERTURE
            bad = is_lds & (off + nbytes > m.lds_size)
            if bool(bad.any()):
                row, lane = first_true(bad)
                raise Fault(f"{what}: generic address 0x{int(addr[row, lane]):x} is LDS byte {int(off[row, lane])}, "
                            f"outside the kernel's {m.lds_size} bytes of LDS", row, lane)
            idx = m.lds_base[g.sel].view(-1, 1) + off
            self.lds = torch.where(is_lds, idx, m.lds.dummy)
        self.priv = None
        if bool(is_priv.any()):
            bad = is_priv & ((private_off < 0) | (private_off + nbytes > private_size))
            if bool(bad.any()):
                row, lane = first_true(bad)
                raise Fault(f"{what}: private (scratch) access at byte {int(private_off[row, lane])} of a "
                            f"{private_size}-byte private segment (descriptor private_segment_fixed_size)",
                            row, lane)
            mem = private_memory(m, private_size)
            idx = _lane_index(g) * private_size + private_off
            self.priv = torch.where(is_priv, idx, mem.numel() - 16)

    def sub(self, pos):
        out = object.__new__(_Access)
        out.masks = tuple(_sub(t, pos) for t in self.masks)
        out.glob, out.lds, out.priv = _sub(self.glob, pos), _sub(self.lds, pos), _sub(self.priv, pos)
        return out

    def _memories(self, m, private_size):
        return ((self.lds, self.masks[0], lambda: m.lds.data), (self.priv, self.masks[1],
                                                                  lambda: private_memory(m, private_size)),
                (self.glob, self.masks[2], lambda: m.mem.flat))

    def load(self, m, nbytes, private_size):
        out = None
        ar = None
        for idx, mask, mem in self._memories(m, private_size):
            if idx is None:
                continue
            ar = torch.arange(nbytes, device=idx.device) if ar is None else ar
            bi = idx.unsqueeze(-1) + ar
            data = mem().index_select(0, bi.reshape(-1)).view(bi.shape)
            out = data if out is None else torch.where(mask.unsqueeze(-1), data, out)
        return out

    def store(self, m, payload, private_size):
        nbytes = payload.shape[-1]
        for idx, mask, mem in self._memories(m, private_size):
            if idx is None:
                continue
            bi = idx.unsqueeze(-1) + torch.arange(nbytes, device=idx.device)
            keep = mask.unsqueeze(-1).expand(bi.shape)
            target = mem()
            # lanes of other memories write their own bytes back (no-op) instead of this payload
            cur = target.index_select(0, bi.reshape(-1)).view(bi.shape)
            target.scatter_(0, bi.reshape(-1), torch.where(keep, payload, cur).reshape(-1))
            if target is m.mem.flat:  # lanes of other memories point at its scratch bytes
                m.mem.mark_written(bi)


def build_flat(ins, b, index):
    base = ins.base
    if base.startswith(("flat_load_", "flat_store_")):
        family, generic = "flat", True
    elif base.startswith(("scratch_load_", "scratch_store_")):
        family, generic = "scratch", False
    else:
        return None
    is_load = base.startswith(f"{family}_load_")
    fmt = base[len(f"{family}_load_" if is_load else f"{family}_store_"):]
    table = LOADS if is_load else STORES
    if fmt not in table:
        raise BindError(f"unknown {family} format {fmt!r}")
    nbytes, kind = table[fmt]
    bad = [k for k in ins.mods if k != "offset"]
    if bad:
        raise BindError(f"modifier(s) {', '.join(bad)} not supported on {base}")
    offset = int(ins.mods.get("offset", 0))
    ops = list(ins.operands)
    nreg = nregs_of(nbytes, kind)
    if is_load:
        vdata, addr_ops = ops[0], ops[1:]
    else:
        vdata, addr_ops = ops[1], [ops[0]] + ops[2:]
    private_size = b.ctx.kd.private_segment_fixed_size
    if generic:
        if len(addr_ops) != 1:
            raise BindError("expected a 64-bit vaddr")
        vaddr = b.vsrc_index(addr_ops[0], 2, "vaddr")

        def address(g):
            return (u32(g.rv(vaddr)) | (u32(g.rv(vaddr + 1)) << 32)) + offset
    else:
        if len(addr_ops) != 2:
            raise BindError("expected vaddr|off, saddr|off")
        vaddr = None if isinstance(addr_ops[0], Off) else b.vsrc_index(addr_ops[0], 1, "vaddr")
        saddr = None if isinstance(addr_ops[1], Off) else b.ssrc_index(addr_ops[1], 1, "saddr")

        def address(g):
            a = torch.full((g.n, 64), offset, dtype=torch.int64, device=g.m.device)
            if vaddr is not None:
                a = a + u32(g.rv(vaddr))
            if saddr is not None:
                a = a + g.rs(saddr).view(-1, 1)
            return a
    if is_load:
        dst = b.vdst(vdata, nreg, "vdata")
        b.defer(dst, nreg)
    else:
        data = b.vsrc_index(vdata, nreg, "vdata")

    def run(g):
        m = g.m
        ex = g.exec_mask()
        acc = _Access(g, address(g), nbytes, ex, not is_load, generic, private_size, base)
        rows = g.sel
        if is_load:
            def apply(pos):
                raw = acc.sub(pos).load(m, nbytes, private_size)
                raw = raw.contiguous().view(torch.int32) if kind == "dw" else _bytes_value(raw)
                r = _rows_of(rows, pos)
                old = read_rows(m, dst, 1, r) if kind not in ("dw", "u", "s") else None
                write_rows(m, dst, format_load(raw, kind, nbytes, old), r, _sub(ex, pos))
            m.issue(g, "vm", tuple(range(dst, dst + nreg)), (), apply)
        else:
            payload = store_bytes_of(g.rvs(data, nreg), kind, nbytes)  # captured at issue

            def apply(pos):
                acc.sub(pos).store(m, _sub(payload, pos), private_size)
            m.issue(g, "vm", (), (), apply)
    return Handler(ins, index, run, "vmem", b, queue="vm")
