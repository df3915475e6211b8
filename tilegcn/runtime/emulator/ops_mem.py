"""Vector memory (MUBUF buffer_*, global_*), LDS DMA (buffer_load_* ... lds) and DS instructions.

Every one of them is asynchronous: at issue the addresses are formed and checked (a fault, an LDS
access outside the workgroup's allocation, a read of LDS bytes that a DMA still writes) and the store
data is captured; the memory access itself, and the write of the destination registers, happen when
an s_waitcnt retires the op (`Machine.wait`).

Raw buffer range checking (docs/isa-notes.md): with STRIDE = 0 a dword i of a lane is in range iff
offset + 4*(i+1) <= NUM_RECORDS (offset + size for sub-dword accesses), where offset is
voffset + inst_offset; out-of-range loads return 0 (LDS DMA writes 0), out-of-range stores are
dropped. Whether soffset counts toward the check is left open by the sources: the CDNA3 guide's range-check
text names only the offset, and LLVM's AMDGPU dialect documents the SGPR offset as one that "may or may not
be considered in bounds checks" (chipset dependent). The emulator's choice is `SOFFSET_IN_RANGE_CHECK`;
a lane whose outcome would differ under the other reading is an EmulatorError rather than a guess
(`_soffset_decides`). With STRIDE != 0 (structured buffers) a lane is in range iff its index
(idxen) < NUM_RECORDS.
SWIZZLE_ENABLE (V# bit 63) with an access that has no index (no idxen, ADD_TID_ENABLE clear) addresses
linearly, base + soffset + offset, the STRIDE field (bits 48-61) then being the cache-swizzle stride (bit 62):
HipKittens' gfx950 GEMM and attention kernels set both bits on their raw `buffer_load ... lds` and match torch
on MI355X in their benchmarks (docs/isa-notes.md). Its range check stays the STRIDE != 0 rule above (index 0:
always in range; those kernels load in range). An indexed access to such a resource (the ISA's AoS swizzle)
is refused.
"""
from __future__ import annotations

import torch

from .decode import M0, Const, Off
from .program import BindError, Handler, u32
from .state import Fault, M32, first_true
from .stats import bank_conflicts

# Our one choice for the uncertain case: soffset is part of the base, not of the range-checked offset.
SOFFSET_IN_RANGE_CHECK = False

# name suffix after buffer_load_/global_load_ -> (bytes per lane, result kind)
LOADS = {
    "dword": (4, "dw"), "dwordx2": (8, "dw"), "dwordx3": (12, "dw"), "dwordx4": (16, "dw"),
    "ubyte": (1, "u"), "sbyte": (1, "s"), "ushort": (2, "u"), "sshort": (2, "s"),
    "ubyte_d16": (1, "u_lo"), "ubyte_d16_hi": (1, "u_hi"), "sbyte_d16": (1, "s_lo"), "sbyte_d16_hi": (1, "s_hi"),
    "short_d16": (2, "u_lo"), "short_d16_hi": (2, "u_hi"),
}
STORES = {
    "dword": (4, "dw"), "dwordx2": (8, "dw"), "dwordx3": (12, "dw"), "dwordx4": (16, "dw"),
    "byte": (1, "lo"), "short": (2, "lo"), "byte_d16_hi": (1, "hi"), "short_d16_hi": (2, "hi"),
}
DS_READS = {
    "ds_read_b32": (4, "dw"), "ds_read_b64": (8, "dw"), "ds_read_b96": (12, "dw"), "ds_read_b128": (16, "dw"),
    "ds_read_u8": (1, "u"), "ds_read_i8": (1, "s"), "ds_read_u16": (2, "u"), "ds_read_i16": (2, "s"),
    "ds_read_u8_d16": (1, "u_lo"), "ds_read_u8_d16_hi": (1, "u_hi"), "ds_read_i8_d16": (1, "s_lo"),
    "ds_read_i8_d16_hi": (1, "s_hi"), "ds_read_u16_d16": (2, "u_lo"), "ds_read_u16_d16_hi": (2, "u_hi"),
    "ds_read_b64_tr_b16": (8, "dw"), "ds_read_b64_tr_b8": (8, "dw"),  # gfx950 transposing reads
}
# element width of the transposing reads (objdump decodes them only for arches that have them)
DS_TRANSPOSE = {"ds_read_b64_tr_b16": 16, "ds_read_b64_tr_b8": 8}
DS_WRITES = {
    "ds_write_b32": (4, "dw"), "ds_write_b64": (8, "dw"), "ds_write_b96": (12, "dw"), "ds_write_b128": (16, "dw"),
    "ds_write_b8": (1, "lo"), "ds_write_b16": (2, "lo"), "ds_write_b8_d16_hi": (1, "hi"),
    "ds_write_b16_d16_hi": (2, "hi"),
}
DS_PAIRS = {"ds_read2_b32": (4, False, "r"), "ds_read2_b64": (8, False, "r"), "ds_read2st64_b32": (4, True, "r"),
            "ds_read2st64_b64": (8, True, "r"), "ds_write2_b32": (4, False, "w"), "ds_write2_b64": (8, False, "w"),
            "ds_write2st64_b32": (4, True, "w"), "ds_write2st64_b64": (8, True, "w")}
# LDS atomics without a return value, and the bytes each lane adds to. They are DS writes
# for the queue and the address checks; lanes of one instruction hitting the same word all count (index_add).
# They stay out of the race tracker: atomics from several waves to one word are the point of them.
DS_ATOMICS = {"ds_add_u32": 4}
_CACHE_OK = ("offset", "offen", "idxen", "lds")
# cache write-back / invalidate: one coherent memory here, so they only occupy a slot of the VM queue
CACHE_CONTROL = ("buffer_wbl2", "buffer_inv", "buffer_wbinvl1", "buffer_wbinvl1_vol")


def lane_transpose(raw: torch.Tensor, bits: int) -> torch.Tensor:
    """ds_read_b64_tr_b*: within each group of 16 lanes the 8 bytes each lane addressed, E = 64 / bits elements
    a lane, form a matrix M[16][E]; lane j receives element j % E of the lanes k * (16 / E) + j // E
    (k = 0..E-1). With 16-bit elements: lanes 4k..4k+3 read row k of a 4 x 16 tile in 4 chunks and lane j gets
    column j. The CDNA4 guide describes the result as the transposed tile; this lane order is the one under
    which 16 lanes' contiguous 8-byte reads can form it, and Triton's gfx950 matmuls (which load MFMA B
    operands this way) match torch with it."""
    rows = raw.shape[0]
    e = 64 // bits
    dt = torch.int16 if bits == 16 else torch.int8
    x = raw.contiguous().view(dt).view(rows, 4, 16, e)
    j = torch.arange(16, device=raw.device).view(16, 1)
    k = torch.arange(e, device=raw.device).view(1, e)
    out = x[:, :, k * (16 // e) + j // e, (j % e).expand(16, e)]
    return out.reshape(rows, 64, e).contiguous().view(torch.int32)


def nregs_of(nbytes, kind):
    return nbytes // 4 if kind == "dw" else 1


def _rows_of(rows, pos):
    if pos is None:
        return rows
    if isinstance(rows, slice):
        return pos + rows.start
    return rows.index_select(0, pos)


def _sub(t, pos):
    return t if (pos is None or t is None) else t.index_select(0, pos)


def write_rows(m, dst, vals, rows, mask):
    """Write int32 [k, rows, 64] into VGPRs dst.. of global rows `rows` where `mask` [rows, 64] (None = all)."""
    k = vals.shape[0]
    if isinstance(rows, slice):
        view = m.vgpr[dst:dst + k, rows]
        view.copy_(vals if mask is None else torch.where(mask, vals, view))
    else:
        old = m.vgpr[dst:dst + k].index_select(1, rows)
        new = vals if mask is None else torch.where(mask, vals, old)
        m.vgpr[dst:dst + k].index_copy_(1, rows, new.contiguous())


def read_rows(m, r, k, rows):
    if isinstance(rows, slice):
        return m.vgpr[r:r + k, rows]
    return m.vgpr[r:r + k].index_select(1, rows)


def format_load(raw, kind, nbytes, old):
    """Register values [k, rows, 64] from loaded data: raw int32 [rows, 64, k] for 'dw', else an int64
    [rows, 64] little-endian value of `nbytes` bytes; `old` [1, rows, 64] is the register for d16 forms."""
    if kind == "dw":
        return raw.permute(2, 0, 1)
    bits = 8 * nbytes
    v = raw
    if kind.startswith("s"):
        v = v - ((v >> (bits - 1)) & 1) * (1 << bits)  # sign-extend
    if kind in ("u", "s"):
        return (v & M32).to(torch.int32).unsqueeze(0)
    half = (v & 0xFFFF).to(torch.int32)  # d16 forms fill one 16-bit half and keep the other
    o = old[0]
    if kind.endswith("_hi"):
        return ((o & 0xFFFF) | (half << 16)).unsqueeze(0)
    return ((o & -65536) | half).unsqueeze(0)


def store_bytes_of(regs, kind, nbytes):
    """Bytes [rows, 64, nbytes] to store, from register values [k, rows, 64]."""
    if kind == "dw":
        k, n = regs.shape[0], regs.shape[1]
        out = torch.empty((n, 64, k), dtype=torch.int32, device=regs.device)
        out.copy_(regs.permute(1, 2, 0))
        return out.view(torch.uint8)
    v = regs[0]
    if kind == "hi":
        v = v >> 16
    b = torch.stack([(v >> (8 * i)) & 0xFF for i in range(nbytes)], dim=-1)
    return b.to(torch.uint8)


def _bytes_value(raw_bytes):
    """uint8 [..., n] -> int64 little-endian value."""
    v = raw_bytes[..., 0].to(torch.int64)
    for i in range(1, raw_bytes.shape[-1]):
        v = v | (raw_bytes[..., i].to(torch.int64) << (8 * i))
    return v


# ---------------------------------------------------------------------------------------------------------------
DS_ATOMIC_PREFIXES = ("ds_add_", "ds_pk_add_", "ds_max_", "ds_min_", "ds_cmpst_b32", "ds_cmpst_rtn_b32")


def build_memory(ins, b, index):
    base = ins.base
    if base.startswith(("buffer_load_", "buffer_store_")):
        return _buffer(ins, b, index)
    if base.startswith(("global_load_", "global_store_")):
        return _global(ins, b, index)
    # the modules below build on this one's helpers, so they are imported when first needed
    if base.startswith(("flat_", "scratch_")) and "_atomic_" not in base:
        from .ops_flat import build_flat
        return build_flat(ins, b, index)
    if "_atomic_" in base or base in CACHE_CONTROL or base.startswith(DS_ATOMIC_PREFIXES):
        from .ops_atomic import build_atomic
        return build_atomic(ins, b, index)
    if base in DS_READS or base in DS_WRITES or base in DS_PAIRS or base in DS_ATOMICS:
        return _ds(ins, b, index)
    from .ops_dslane import build_dslane
    return build_dslane(ins, b, index)


def _check_mods(ins, allowed):
    bad = [k for k in ins.mods if k not in allowed]
    if bad:
        raise BindError(f"modifier(s) {', '.join(bad)} not supported on {ins.base}")


def _memory_format(ins, family: str):
    """(is_load, bytes per lane, kind) of a `<family>_load_<fmt>` / `<family>_store_<fmt>` instruction."""
    is_load = ins.base.startswith(f"{family}_load_")
    fmt = ins.base[len(f"{family}_load_" if is_load else f"{family}_store_"):]
    table = LOADS if is_load else STORES
    if fmt not in table:
        raise BindError(f"unknown {family} format {fmt!r}")
    nbytes, kind = table[fmt]
    return is_load, nbytes, kind


def buffer_addresses(ins, b, ops, ndw, elem):
    """Binds vaddr / srsrc / soffset (ops) of a MUBUF instruction; returns addresses(g) -> (address of each
    element [n, 64, ndw] int64, in range [n, 64, ndw] bool) under the raw / structured buffer rules above."""
    offen, idxen = bool(ins.mods.get("offen")), bool(ins.mods.get("idxen"))
    inst_offset = int(ins.mods.get("offset", 0))
    vaddr_op, srd_op, soff_op = ops
    naddr = int(offen) + int(idxen)
    if naddr == 0:
        if not isinstance(vaddr_op, Off):
            raise BindError("vaddr given without offen/idxen")
        vaddr = None
    else:
        vaddr = b.vsrc_index(vaddr_op, naddr, "vaddr")
    srd = b.ssrc_index(srd_op, 4, "resource descriptor")
    if isinstance(soff_op, Const):
        soff_const, soff = soff_op.value & M32, None
    else:
        soff_const, soff = 0, b.ssrc_index(soff_op, 1, "soffset")

    def addresses(g):
        """(address of each element [n, 64, ndw] int64, in range [n, 64, ndw] bool)."""
        w0, w1, w2 = g.rs(srd), g.rs(srd + 1), g.rs(srd + 2)
        if bool(((w1 >> 31) & 1).any()) and (idxen or bool(((g.rs(srd + 3) >> 23) & 1).any())):
            raise Fault("buffer resource with SWIZZLE_ENABLE is not modelled for an indexed (idxen / "
                        "ADD_TID_ENABLE) access")
        base = (w0 | ((w1 & 0xFFFF) << 32)).view(-1, 1)
        stride = ((w1 >> 16) & 0x3FFF).view(-1, 1)
        nrec = w2.view(-1, 1)
        so = g.rs(soff).view(-1, 1) if soff is not None else soff_const
        voff = u32(g.rv(vaddr + int(idxen))) if offen else 0
        vidx = u32(g.rv(vaddr)) if idxen else 0
        off = (voff + inst_offset) & M32
        if not isinstance(off, torch.Tensor):
            off = torch.full((g.n, 64), off, dtype=torch.int64, device=base.device)
        addr = base + so + off + vidx * stride
        checked = off + so if SOFFSET_IN_RANGE_CHECK else off
        k = torch.arange(ndw, device=base.device, dtype=torch.int64)
        raw_ok = (checked.unsqueeze(-1) + (k + 1) * elem) <= nrec.unsqueeze(-1)
        if soff is not None or soff_const:
            _soffset_decides(g, off, so, k, elem, nrec, raw_ok, stride)
        struct_ok = ((vidx if isinstance(vidx, torch.Tensor) else torch.zeros_like(off)) < nrec).unsqueeze(-1)
        ok = torch.where((stride == 0).unsqueeze(-1), raw_ok, struct_ok)
        return addr.unsqueeze(-1) + k * elem, ok
    return addresses


def _soffset_decides(g, off, so, k, elem, nrec, raw_ok, stride):
    """Refuse an access whose in-range verdict depends on whether soffset counts (see the module docstring)."""
    other = off if SOFFSET_IN_RANGE_CHECK else off + so
    other_ok = (other.unsqueeze(-1) + (k + 1) * elem) <= nrec.unsqueeze(-1)
    differs = (other_ok != raw_ok).any(-1) & (stride == 0)
    ex = g.exec_mask()
    if ex is not None:
        differs &= ex
    if bool(differs.any()):
        row, lane = first_true(differs)
        raise Fault(f"buffer access at offset {int(off[row, lane])} with soffset {int(so if not isinstance(so, torch.Tensor) else so.view(-1)[row])} "
                    f"is in range of NUM_RECORDS {int(nrec.view(-1)[row])} under one reading of the ISA and out of "
                    f"range under the other (whether soffset counts in the range check is not specified); the "
                    f"emulator does not guess", row, lane)


def _buffer(ins, b, index):
    ctx = b.ctx
    ops = list(ins.operands)
    is_load, nbytes, kind = _memory_format(ins, "buffer")
    _check_mods(ins, _CACHE_OK)
    lds = bool(ins.mods.get("lds"))
    inst_offset = int(ins.mods.get("offset", 0))
    if lds:
        if not is_load:
            raise BindError("only buffer loads can target LDS")
        if nbytes not in ctx.arch.lds_dma_bytes:
            raise BindError(f"{ins.base} ... lds ({nbytes} bytes per lane) is not legal on {ctx.arch.name}; "
                            f"legal LDS DMA widths there: {ctx.arch.lds_dma_bytes} bytes")
        vdata = None
    else:
        vdata = ops.pop(0)
    if len(ops) != 3:
        raise BindError("expected vaddr, srsrc, soffset")
    nreg = nregs_of(nbytes, kind)
    if vdata is not None:
        if is_load:
            dst = b.vdst(vdata, nreg, "vdata")
            b.defer(dst, nreg)  # written (d16 forms: merged into) when the load retires
        else:
            data = b.vsrc_index(vdata, nreg, "vdata")
    if lds:
        b.read_s(M0)
    ndw = nbytes // 4 if kind == "dw" else 1
    elem = 4 if kind == "dw" else nbytes
    addresses = buffer_addresses(ins, b, ops, ndw, elem)

    if lds:
        return Handler(ins, index, _dma_run(ins, addresses, nbytes, inst_offset), "vmem", b, queue="vm")
    if is_load:
        return Handler(ins, index, _load_run(addresses, nbytes, kind, dst, nreg, ndw, elem), "vmem", b,
                       queue="vm")
    return Handler(ins, index, _store_run(addresses, nbytes, kind, data, nreg, ndw, elem), "vmem", b,
                   queue="vm")


def _element_masks(g, ok):
    ex = g.exec_mask()
    act = ok if ex is None else (ok & ex.unsqueeze(-1))
    return ex, act


def _translate_elems(m, addr, act, elem, write):
    n, _, k = addr.shape
    if m.tracer is not None:
        m.tracer.global_access(addr, act, write)
    try:
        flat = m.mem.translate(addr.reshape(n, 64 * k), elem, act.reshape(n, 64 * k), write)
    except Fault as f:
        if f.lane is not None:
            f.lane //= k
        raise
    return flat.view(n, 64, k)


def _load_run(addresses, nbytes, kind, dst, nreg, ndw, elem):
    def run(g):
        m = g.m
        addr, ok = addresses(g)
        ex, act = _element_masks(g, ok)
        flat = _translate_elems(m, addr, act, elem, False)
        m.stats.bytes_global_to_vgpr += int(act.sum()) * elem
        rows = g.sel

        def apply(pos):
            f, a, e = _sub(flat, pos), _sub(act, pos), _sub(ex, pos)
            r = _rows_of(rows, pos)
            if kind == "dw":
                raw = torch.where(a, m.mem.load_dwords(f, 1).squeeze(-1), 0)
            else:
                raw = torch.where(a[..., 0], _bytes_value(m.mem.load_bytes(f[..., 0], nbytes)), 0)
            old = read_rows(m, dst, 1, r) if kind not in ("dw", "u", "s") else None
            write_rows(m, dst, format_load(raw, kind, nbytes, old), r, e)
        m.issue(g, "vm", tuple(range(dst, dst + nreg)), (), apply)
    return run


def _store_run(addresses, nbytes, kind, data, nreg, ndw, elem):
    def run(g):
        m = g.m
        addr, ok = addresses(g)
        ex, act = _element_masks(g, ok)
        flat = _translate_elems(m, addr, act, elem, True)
        payload = store_bytes_of(g.rvs(data, nreg), kind, nbytes)  # captured at issue
        m.stats.bytes_vgpr_to_global += int(act.sum()) * elem

        def apply(pos):
            f, a, p = _sub(flat, pos), _sub(act, pos), _sub(payload, pos)
            if kind == "dw":
                m.mem.store_dwords(f, p.view(torch.int32).unsqueeze(-1), a)
            else:
                m.mem.store_bytes(f[..., 0], p, a[..., 0])
        m.issue(g, "vm", (), (), apply)
    return run


def _reads_m0_late(ins, arch) -> bool:
    """Whether this LDS DMA is one the ISA guide's wait-state table names after a SALU write of M0 (global /
    scratch with LDS = 1, buffer_store_lds_dword). A MUBUF load into LDS is not among them: LLVM's recognizer
    places a wait state before it too, but AMD's hand-written kernels (aiter FAv3) issue it right after
    `s_add_u32 m0` (docs/hazards.md, "M0 and LDS DMA")."""
    return ins.base.startswith(arch.m0_write_hazard_lds_dma)


def _dma_run(ins, addresses, nbytes, inst_offset):
    def run(g):
        m = g.m
        lds = m.lds
        dev = m.device
        need = m.arch.m0_write_to_lds_dma_nops + 1
        since = g.t - 1 - g.m0_t  # wait states between the last M0 write and this instruction
        if m.check and since < need and _reads_m0_late(ins, m.arch):
            raise Fault(f"reads M0 {since} wait states after it was written; {m.arch.name} needs {need} between a "
                        f"write of M0 and an LDS DMA (s_nop {need - 1})", 0, None, "HazardError")
        addr, ok = addresses(g)
        ex, act = _element_masks(g, ok)
        elem = 4 if nbytes >= 4 else nbytes
        flat = _translate_elems(m, addr, act, elem, False)  # [n, 64, ndw]
        # every EXEC lane writes its bytes; lanes (dwords) out of range write zeros
        writes = torch.ones(g.n, 64, dtype=torch.bool, device=dev) if ex is None else ex
        lane = torch.arange(64, dtype=torch.int64, device=dev)
        start = g.rs(M0).view(-1, 1) + inst_offset + lane.view(1, 64) * nbytes  # [n, 64]
        bad = writes & ((start + nbytes > m.lds_size) | (start < 0))
        if bool(bad.any()):
            row, ln = first_true(bad)
            raise Fault(f"LDS DMA writes LDS bytes [{int(start[row, ln])}, {int(start[row, ln]) + nbytes}) outside "
                        f"the kernel's {m.lds_size} bytes (M0 + offset + lane * {nbytes})", row, ln)
        if not m.lds_dma_data:  # a run that reads no LDS (the timing model's footprint run): only the addresses
            m.issue(g, "vm", (), (), _moves_nothing)
            return
        wg_base = m.lds_base[g.sel].view(-1, 1)
        idx = (wg_base + start).unsqueeze(-1) + torch.arange(nbytes, device=dev)  # [n, 64, nbytes]
        idx = torch.where(writes.unsqueeze(-1), idx, lds.dummy)
        m.stats.bytes_global_to_lds += int(act.sum()) * elem
        rows = g.sel
        track = lds.track
        if track:
            flat_idx = idx.reshape(-1)
            lds.dma_pending.index_add_(0, flat_idx, _ONE16.to(dev).expand(flat_idx.numel()))
            lds.dma_in_flight_ops += 1
        me = m.wave_in_wg[rows].view(-1, 1).to(torch.int8)
        waves = g.waves
        if track:  # the write may land any time from issue on: it conflicts with this epoch's accesses too
            lds.races.access(idx[..., 0], nbytes, me, None if ex is None else writes, list(waves), True)

        def apply(pos):
            f, a, w, ix = _sub(flat, pos), _sub(act, pos), _sub(writes, pos), _sub(idx, pos)
            data = m.mem.load_bytes(f, elem)  # [rows, 64, ndw, elem]
            data = torch.where(a.unsqueeze(-1), data, 0).reshape(ix.shape)
            flat_ix = ix.reshape(-1)
            lds.data.scatter_(0, flat_ix, data.reshape(-1))
            if track:
                lds.dma_pending.index_add_(0, flat_ix, _MINUS16.to(dev).expand(flat_ix.numel()))
                if pos is None:
                    lds.dma_in_flight_ops -= 1
                row_waves = list(waves) if pos is None else [waves[i] for i in pos.tolist()]
                lds.races.access(ix[..., 0], nbytes, _sub(me, pos), None if ex is None else w, row_waves, True)
        m.issue(g, "vm", (), (), apply)
    return run


def _moves_nothing(pos):
    pass


_ONE16 = torch.ones(1, dtype=torch.int16)
_MINUS16 = -torch.ones(1, dtype=torch.int16)


def global_addresses(b, vaddr_op, saddr_op, offset, ndw, elem):
    """Binds the address operands of a global_* instruction (64-bit vaddr, or 32-bit vaddr + 64-bit saddr);
    returns addresses(g) -> (address of each element [n, 64, ndw] int64, all True)."""
    if isinstance(saddr_op, Off):
        vaddr, saddr = b.vsrc_index(vaddr_op, 2, "vaddr"), None
    else:
        vaddr, saddr = b.vsrc_index(vaddr_op, 1, "vaddr"), b.ssrc_index(saddr_op, 2, "saddr")

    def addresses(g):
        if saddr is None:
            a = u32(g.rv(vaddr)) | (u32(g.rv(vaddr + 1)) << 32)
        else:
            a = (g.rs(saddr) | (g.rs(saddr + 1) << 32)).view(-1, 1) + u32(g.rv(vaddr))
        a = a + offset
        k = torch.arange(ndw, dtype=torch.int64, device=a.device)
        return a.unsqueeze(-1) + k * elem, torch.ones(1, 1, 1, dtype=torch.bool, device=a.device).expand(g.n, 64, ndw)
    return addresses


def _global(ins, b, index):
    ops = list(ins.operands)
    _check_mods(ins, ("offset",))
    offset = int(ins.mods.get("offset", 0))
    if ins.base.startswith("global_load_lds_"):
        # gfx950 LDS DMA from a global address: LDS byte M0 + offset + lane * size, like buffer_load ... lds
        fmt = ins.base[len("global_load_lds_"):]
        if fmt not in LOADS or LOADS[fmt][1] not in ("dw", "u"):
            raise BindError(f"unknown global_load_lds format {fmt!r}")
        nbytes = LOADS[fmt][0]
        if nbytes not in b.ctx.arch.lds_dma_bytes:
            raise BindError(f"{ins.base} ({nbytes} bytes per lane) is not legal on {b.ctx.arch.name}")
        if len(ops) != 2:
            raise BindError("expected vaddr, saddr")
        b.read_s(M0)
        elem = min(nbytes, 4)
        addresses = global_addresses(b, ops[0], ops[1], offset, max(1, nbytes // 4), elem)
        return Handler(ins, index, _dma_run(ins, addresses, nbytes, offset), "vmem", b, queue="vm")
    is_load, nbytes, kind = _memory_format(ins, "global")
    nreg = nregs_of(nbytes, kind)
    if is_load:
        vdata, vaddr_op, saddr_op = ops
        dst = b.vdst(vdata, nreg, "vdata")
        b.defer(dst, nreg)
    else:
        vaddr_op, vdata, saddr_op = ops
        data = b.vsrc_index(vdata, nreg, "vdata")
    ndw = nbytes // 4 if kind == "dw" else 1
    elem = 4 if kind == "dw" else nbytes
    addresses = global_addresses(b, vaddr_op, saddr_op, offset, ndw, elem)
    if is_load:
        return Handler(ins, index, _load_run(addresses, nbytes, kind, dst, nreg, ndw, elem), "vmem", b,
                       queue="vm")
    return Handler(ins, index, _store_run(addresses, nbytes, kind, data, nreg, ndw, elem), "vmem", b,
                   queue="vm")


# ---------------------------------------------------------------------------------------------------------------
def _ds(ins, b, index):
    ctx = b.ctx
    base, ops = ins.base, list(ins.operands)
    _check_mods(ins, ("offset", "offset0", "offset1"))
    if base in DS_PAIRS:
        size, st64, rw = DS_PAIRS[base]
        unit = size * (64 if st64 else 1)
        offsets = [int(ins.mods.get("offset0", 0)) * unit, int(ins.mods.get("offset1", 0)) * unit]
        kind, is_read = "dw", rw == "r"
        nreg_each = size // 4
        if is_read:
            dst = b.vdst(ops[0], 2 * nreg_each)
            b.defer(dst, 2 * nreg_each)
            vaddr = b.vsrc_index(ops[1], 1, "vaddr")
            regs = [dst, dst + nreg_each]
        else:
            vaddr = b.vsrc_index(ops[0], 1, "vaddr")
            regs = [b.vsrc_index(ops[1], nreg_each, "data0"), b.vsrc_index(ops[2], nreg_each, "data1")]
    else:
        is_read = base in DS_READS
        size, kind = (DS_ATOMICS[base], "dw") if base in DS_ATOMICS else (DS_READS if is_read else DS_WRITES)[base]
        offsets = [int(ins.mods.get("offset", 0))]
        nreg_each = nregs_of(size, kind)
        if is_read:
            regs = [b.vdst(ops[0], nreg_each)]
            vaddr = b.vsrc_index(ops[1], 1, "vaddr")
            b.defer(regs[0], nreg_each)
        else:
            vaddr = b.vsrc_index(ops[0], 1, "vaddr")
            regs = [b.vsrc_index(ops[1], nreg_each, "data")]
    atomic = base in DS_ATOMICS
    align = 16 if size == 16 else (4 if atomic else 1)
    ndw = size // 4 if kind == "dw" else 0
    transpose = DS_TRANSPOSE.get(base)
    conflict_cache = [[] for _ in offsets]  # per access: recent (addresses, exec mask, extra cycles)

    def run(g):
        m = g.m
        lds = m.lds
        dev = m.device
        ex = g.exec_mask()
        base_addr = u32(g.rv(vaddr))
        wg_base = m.lds_base[g.sel].view(-1, 1)
        firsts = []
        for k, off in enumerate(offsets):
            # the 32-bit sum wraps: LLVM folds a constant into the offset field whatever the sign of the base
            # (AMDGPUDAGToDAGISel::isDSOffsetLegal on CI and later), as Triton's masked fills of LDS rely on
            addr = (base_addr + off) & 0xFFFFFFFF
            bad = addr + size > m.lds_size
            if ex is not None:
                bad &= ex
            if bool(bad.any()):
                row, ln = first_true(bad)
                raise Fault(f"LDS access [{int(addr[row, ln])}, {int(addr[row, ln]) + size}) is outside the kernel's "
                            f"{m.lds_size} bytes of LDS", row, ln)
            if align > 1:
                mis = (addr % align) != 0
                if ex is not None:
                    mis &= ex
                if bool(mis.any()):
                    row, ln = first_true(mis)
                    raise Fault(f"{base} needs a {align}-byte aligned LDS address, got {int(addr[row, ln])}", row, ln)
            _count_conflicts(m, conflict_cache[k], addr, ex, size, is_read)
            first = wg_base + addr
            if ex is not None:
                first = torch.where(ex, first, lds.dummy)
            firsts.append(first)
        moved = g.exec_active() * size * len(offsets)
        if is_read:
            m.stats.bytes_lds_to_vgpr += moved
        else:
            m.stats.bytes_vgpr_to_lds += moved
        if is_read and lds.track and lds.dma_in_flight_ops:
            byte_ar = torch.arange(size, device=dev)
            for first in firsts:
                bi = first.unsqueeze(-1) + byte_ar
                busy = lds.dma_pending.index_select(0, bi.reshape(-1)).view(bi.shape) > 0
                if ex is not None:
                    busy &= ex.unsqueeze(-1)
                if bool(busy.any()):
                    row, ln = first_true(busy)
                    byte = int(bi[row, ln][busy[row, ln]][0]) - int(wg_base[row, 0])
                    raise Fault(f"reads LDS byte {byte} while an LDS DMA (buffer_load ... lds) that writes it is still "
                                f"in flight; s_waitcnt vmcnt first (and s_barrier if another wave issued it)", row, ln,
                                "HazardError")
        payload = None
        if not is_read:
            # the data is read now, at issue: the register may be reused before the write retires
            # (a view of the register file would store whatever it holds at retirement)
            payload = [g.rvs(r, nreg_each).permute(1, 2, 0).clone() if kind == "dw"
                       else store_bytes_of(g.rvs(r, nreg_each), kind, size) for r in regs]
        rows = g.sel
        waves = g.waves
        me = m.wave_in_wg[rows].view(-1, 1).to(torch.int8)

        def apply(pos):
            r = _rows_of(rows, pos)
            act = _sub(ex, pos)
            row_waves = None
            for k, first in enumerate(firsts):
                first = _sub(first, pos)
                if lds.track and not atomic:
                    if row_waves is None:
                        row_waves = list(waves) if pos is None else [waves[i] for i in pos.tolist()]
                    lds.races.access(first, size, _sub(me, pos), act, row_waves, not is_read)
                aligned = ndw and not bool((first & 3).any())
                if is_read:
                    if aligned:
                        di = (first >> 2).unsqueeze(-1) + torch.arange(ndw, device=dev)
                        raw = lds.data32.index_select(0, di.reshape(-1)).view(di.shape)
                    else:
                        bi = first.unsqueeze(-1) + torch.arange(size, device=dev)
                        raw = lds.data.index_select(0, bi.reshape(-1)).view(bi.shape)
                        raw = raw.view(torch.int32) if kind == "dw" else _bytes_value(raw)
                    if transpose:
                        raw = lane_transpose(raw, transpose)
                    old = read_rows(m, regs[k], 1, r) if kind not in ("dw", "u", "s") else None
                    write_rows(m, regs[k], format_load(raw, kind, size, old), r, act)
                else:
                    p = _sub(payload[k], pos)
                    if atomic:  # every lane's data adds in (an int32 sum wraps as the 32-bit adder does)
                        lds.data32.index_add_(0, (first >> 2).reshape(-1), p.reshape(-1))
                    elif aligned:
                        di = (first >> 2).unsqueeze(-1) + torch.arange(ndw, device=dev)
                        lds.data32.scatter_(0, di.reshape(-1), p.reshape(-1))
                    else:
                        bi = first.unsqueeze(-1) + torch.arange(size, device=dev)
                        pb = p.contiguous().view(torch.uint8) if kind == "dw" else p
                        lds.data.scatter_(0, bi.reshape(-1), pb.reshape(-1))
        m.issue(g, "ds", tuple(x for r in regs for x in range(r, r + nreg_each)) if is_read else (), (), apply)
    return Handler(ins, index, run, "ds", b, queue="ds")


def _count_conflicts(m, cache, addr, ex, size, is_read=False):
    """Bank conflicts of one access (stats.bank_conflicts) in the phases the arch serves its lanes in
    (Arch.lds_phases: measured ones for gfx950's ds_read_b128), remembering the last few address patterns: a loop
    re-issues the same LDS addresses every iteration. The launch's statistics and the trace hook (the timing model)
    get the same count."""
    for i, (a, e, count) in enumerate(cache):
        if a.shape == addr.shape and (e is None) == (ex is None) and torch.equal(a, addr) and \
                (e is None or torch.equal(e, ex)):
            if i:
                cache.insert(0, cache.pop(i))
            break
    else:
        count = bank_conflicts(addr, ex, size, m.arch.lds_banks, m.arch.lds_phases(size, is_read))
        cache.insert(0, (addr, ex, count))
        del cache[4:]
    if m.tracer is not None:
        m.tracer.ds_conflicts(count)
    if count:
        st = m.stats
        h = m.prog.handlers[m.current_pc]
        st.lds_bank_conflicts += count
        st.lds_bank_conflicts_by_mnemonic[h.mnemonic] = st.lds_bank_conflicts_by_mnemonic.get(h.mnemonic, 0) + count


