"""Global, buffer and LDS atomics (returning and not) and the cache-control instructions around them.

An atomic is a VM-queue operation like a store: at issue its addresses are formed and checked and its data
(and compare value) captured; the read-modify-write of memory and the write of the returned pre-op values
happen when it retires. Lanes hitting one address are applied one after another in wave and lane order
(the hardware's order is unspecified; any order is a legal result for integer ops, and float adds are
rounded per step as the hardware does). Returning forms are the ones with GLC (sc0 on gfx94x/gfx950): a
`global_atomic_*` with a vdst operand, a `buffer_atomic_*` with sc0/glc, which returns into its vdata.
Out-of-range buffer lanes neither modify memory nor return data (they read 0), as for loads and stores.

Float atomics: add_f32 and pk_add_f16/bf16 round to nearest even and keep denormals (the guides do not
describe a denormal flush for memory atomics; we chose IEEE behaviour).
"""
from __future__ import annotations

import torch

from .ops_mem import CACHE_CONTROL, _rows_of, _sub, _translate_elems, buffer_addresses, global_addresses, write_rows
from .program import BindError, Handler, u32
from .state import Fault, first_true

M32 = 0xFFFFFFFF
SIGN64 = -(1 << 63)


def _f32(v):
    return (v & M32).to(torch.int32).view(torch.float32)


def _bits32(f):
    return f.view(torch.int32).to(torch.int64) & M32


def _s32(v):
    return ((v & M32) ^ 0x80000000) - 0x80000000


def _halves(fn, dt):
    def op(a, d, c):
        lo = fn((a & 0xFFFF).to(torch.int16).view(dt), (d & 0xFFFF).to(torch.int16).view(dt))
        hi = fn(((a >> 16) & 0xFFFF).to(torch.int16).view(dt), ((d >> 16) & 0xFFFF).to(torch.int16).view(dt))
        return (lo.view(torch.int16).to(torch.int64) & 0xFFFF) | ((hi.view(torch.int16).to(torch.int64) & 0xFFFF) << 16)
    return op


def _f64(v):
    return v.view(torch.float64)


# 32-bit ops on int64 values holding the unsigned word: (old, data, compare) -> new
OPS32 = {
    "add": lambda a, d, c: (a + d) & M32, "sub": lambda a, d, c: (a - d) & M32,
    "and": lambda a, d, c: a & d, "or": lambda a, d, c: a | d, "xor": lambda a, d, c: a ^ d,
    "swap": lambda a, d, c: d, "cmpswap": lambda a, d, c: torch.where(a == c, d, a),
    "umin": lambda a, d, c: torch.minimum(a, d), "umax": lambda a, d, c: torch.maximum(a, d),
    "smin": lambda a, d, c: torch.where(_s32(a) < _s32(d), a, d), "smax": lambda a, d, c: torch.where(_s32(a) > _s32(d), a, d),
    "inc": lambda a, d, c: torch.where(a >= d, 0, a + 1), "dec": lambda a, d, c: torch.where((a == 0) | (a > d), d, a - 1),
    "add_f32": lambda a, d, c: _bits32(_f32(a) + _f32(d)),
    "pk_add_f16": _halves(torch.add, torch.float16), "pk_add_bf16": _halves(torch.add, torch.bfloat16),
}
# 64-bit ops on int64 bit patterns
OPS64 = {
    "add_x2": lambda a, d, c: a + d, "sub_x2": lambda a, d, c: a - d,
    "and_x2": lambda a, d, c: a & d, "or_x2": lambda a, d, c: a | d, "xor_x2": lambda a, d, c: a ^ d,
    "swap_x2": lambda a, d, c: d, "cmpswap_x2": lambda a, d, c: torch.where(a == c, d, a),
    "smin_x2": lambda a, d, c: torch.minimum(a, d), "smax_x2": lambda a, d, c: torch.maximum(a, d),
    "umin_x2": lambda a, d, c: torch.where((a ^ SIGN64) < (d ^ SIGN64), a, d),
    "umax_x2": lambda a, d, c: torch.where((a ^ SIGN64) > (d ^ SIGN64), a, d),
    "inc_x2": lambda a, d, c: torch.where((a ^ SIGN64) >= (d ^ SIGN64), 0, a + 1),
    "dec_x2": lambda a, d, c: torch.where((a == 0) | ((a ^ SIGN64) > (d ^ SIGN64)), d, a - 1),
    "add_f64": lambda a, d, c: (_f64(a) + _f64(d)).view(torch.int64),
    "min_f64": lambda a, d, c: torch.fmin(_f64(a), _f64(d)).view(torch.int64),
    "max_f64": lambda a, d, c: torch.fmax(_f64(a), _f64(d)).view(torch.int64),
}


def _apply_serially(mem_view, word, data, cmp, fn):
    """Read-modify-write mem_view[word] for every element in order; returns the values each one read.
    Elements with distinct words go in one vectorised step; repeated words take one step per repeat."""
    old = torch.empty_like(data)
    todo = torch.arange(word.numel(), device=word.device)
    while todo.numel():
        w = word[todo]
        uniq, inv = torch.unique(w, return_inverse=True)
        first = torch.full((uniq.numel(),), todo.numel(), dtype=torch.int64, device=w.device)
        first.scatter_reduce_(0, inv, torch.arange(todo.numel(), device=w.device), "amin")
        sel = todo[first]
        cur = mem_view[word[sel]].to(torch.int64)
        if mem_view.dtype == torch.int32:
            cur = cur & M32
        old[sel] = cur
        new = fn(cur, data[sel], None if cmp is None else cmp[sel])
        mem_view[word[sel]] = (_s32(new) if mem_view.dtype == torch.int32 else new).to(mem_view.dtype)
        keep = torch.ones(todo.numel(), dtype=torch.bool, device=w.device)
        keep[first] = False
        todo = todo[keep]
    return old


def _atomic_op(ins, family):
    name = ins.base[len(f"{family}_atomic_"):]
    if name in OPS32:
        return name, OPS32[name], 1
    if name in OPS64:
        return name, OPS64[name], 2
    raise BindError(f"atomic {name!r} is not modelled")


# LDS atomics: mnemonic (the returning form has `_rtn` before its type) -> its OPS32 entry
DS_ATOMICS = {"ds_add_f32": "add_f32", "ds_pk_add_f16": "pk_add_f16", "ds_pk_add_bf16": "pk_add_bf16",
              "ds_add_u32": "add", "ds_max_i32": "smax", "ds_min_i32": "smin", "ds_max_u32": "umax",
              "ds_min_u32": "umin"}
DS_ATOMICS["ds_cmpst_b32"] = "cmpswap"  # data0 the compare value, data1 the new one (as llc's cmpxchg emits it)
DS_RETURNING = {"_rtn_".join(name.rsplit("_", 1)): name for name in DS_ATOMICS}  # ds_add_rtn_f32 -> ds_add_f32


def build_ds_atomic(ins, b, index):
    """ds_<op>[_rtn]_<type> vdst?, vaddr, [cmp,] data offset:N: a read-modify-write of one LDS dword per lane,
    applied when it retires (in order with the wave's other LDS ops, as every DS op), lanes hitting one dword one
    after another in lane order; a returning form writes the dword's old value to vdst. Not recorded by the LDS
    race check: atomics of several waves to one dword in one barrier epoch are what they are for."""
    base, ops = ins.base, list(ins.operands)
    returning = base in DS_RETURNING
    name = DS_ATOMICS[DS_RETURNING.get(base, base)]
    fn = OPS32[name]
    bad = [k for k in ins.mods if k != "offset"]
    if bad:
        raise BindError(f"modifier(s) {', '.join(bad)} not supported on {base}")
    compare = name == "cmpswap"
    if len(ops) != (3 if returning else 2) + compare:
        raise BindError("expected " + ("vdst, " if returning else "") + "vaddr, " + ("cmp, " if compare else "")
                        + "data")
    dst = b.vdst(ops[0], 1, "vdst") if returning else None
    vaddr = b.vsrc_index(ops[1 if returning else 0], 1, "vaddr")
    data = b.vsrc_index(ops[-1], 1, "data")
    cmp = b.vsrc_index(ops[-2], 1, "cmp") if compare else None
    if returning:
        b.defer(dst, 1)
    offset = int(ins.mods.get("offset", 0))

    def run(g):
        m = g.m
        ex = g.exec_mask()
        addr = u32(g.rv(vaddr)) + offset
        bad = (addr + 4 > m.lds_size) | (addr % 4 != 0)
        if ex is not None:
            bad &= ex
        if bool(bad.any()):
            row, lane = first_true(bad)
            raise Fault(f"{base}: LDS address {int(addr[row, lane])} is not a 4-byte aligned dword inside the kernel's "
                        f"{m.lds_size} bytes of LDS", row, lane)
        word = (m.lds_base[g.sel].view(-1, 1) + addr) // 4
        act = torch.ones_like(word, dtype=torch.bool) if ex is None else ex
        val = u32(g.rv(data)).clone()  # captured at issue
        expect = u32(g.rv(cmp)).clone() if compare else None
        m.stats.bytes_vgpr_to_lds += int(act.sum()) * 4
        rows = g.sel

        def apply(pos):
            w, a, v = _sub(word, pos), _sub(act, pos), _sub(val, pos)
            sel = a.reshape(-1)
            c = None if expect is None else _sub(expect, pos).reshape(-1)[sel]
            old = _apply_serially(m.lds.data32, w.reshape(-1)[sel], v.reshape(-1)[sel], c, fn)
            if dst is None:
                return
            ret = torch.zeros(a.numel(), dtype=torch.int64, device=old.device)
            ret[sel] = old
            write_rows(m, dst, _s32(ret.view(a.shape)).to(torch.int32).unsqueeze(0), _rows_of(rows, pos),
                       _sub(ex, pos))
        m.issue(g, "ds", (dst,) if dst is not None else (), (), apply)
    return Handler(ins, index, run, "ds", b, queue="ds")


def build_atomic(ins, b, index):
    base, ops = ins.base, list(ins.operands)
    if base in DS_ATOMICS or base in DS_RETURNING:
        return build_ds_atomic(ins, b, index)
    if base in CACHE_CONTROL:
        if ops:
            raise BindError("expected no operands")

        def run(g):  # one coherent memory: nothing to write back or invalidate, but vmcnt counts it
            g.m.issue(g, "vm", (), (), lambda pos: None)
        return Handler(ins, index, run, "vmem", b, queue="vm")
    if base.startswith("global_atomic_"):
        family = "global"
    elif base.startswith("buffer_atomic_"):
        family = "buffer"
    else:
        return None
    name, fn, words = _atomic_op(ins, family)
    cmpswap = name.startswith("cmpswap")
    ndata = words * (2 if cmpswap else 1)
    policy = set(ins.raw_operands.replace(",", " ").split())
    if family == "global":
        bad = [k for k in ins.mods if k != "offset"]
        returning = len(ops) == 4
        if returning:
            dst_op, vaddr_op, data_op, saddr_op = ops
        elif len(ops) == 3:
            vaddr_op, data_op, saddr_op = ops
        else:
            raise BindError("expected [vdst,] vaddr, vdata, saddr|off")
        addresses = global_addresses(b, vaddr_op, saddr_op, int(ins.mods.get("offset", 0)), 1, 4 * words)
    else:
        bad = [k for k in ins.mods if k not in ("offset", "offen", "idxen")]
        returning = bool(policy & {"sc0", "glc"})
        if len(ops) != 4:
            raise BindError("expected vdata, vaddr, srsrc, soffset")
        data_op, dst_op = ops[0], ops[0]
        addresses = buffer_addresses(ins, b, ops[1:], 1, 4 * words)
    if bad:
        raise BindError(f"modifier(s) {', '.join(bad)} not supported on {base}")
    data = b.vsrc_index(data_op, ndata, "vdata")
    dst = None
    if returning:
        # a buffer cmpswap names {data, compare} and returns into the first `words` of them; the whole tuple counts as
        # written at retirement (the instruction table's X.v2: the compare half may not be reused before the wait)
        named = ndata if family == "buffer" else words
        dst = b.vdst(dst_op, named, "vdst")
        b.defer(dst, named)
    elem = 4 * words

    def run(g):
        m = g.m
        addr, ok = addresses(g)
        ex = g.exec_mask()
        act = ok if ex is None else ok & ex.unsqueeze(-1)
        flat = _translate_elems(m, addr, act, elem, True)[..., 0]  # byte index [n, 64]
        act = act[..., 0]
        mis = act & ((flat % elem) != 0)
        if bool(mis.any()):
            row, lane = first_true(mis)
            raise Fault(f"{base}: address 0x{int(addr[row, lane, 0]):x} is not {elem}-byte aligned", row, lane)
        regs = g.rvs(data, ndata)  # captured at issue: [ndata, n, 64] int32
        if words == 1:
            val = u32(regs[0])
            cmp = u32(regs[1]) if cmpswap else None
        else:
            val = u32(regs[0]) | (regs[1].to(torch.int64) << 32)
            cmp = (u32(regs[2]) | (regs[3].to(torch.int64) << 32)) if cmpswap else None
        m.stats.bytes_vgpr_to_global += int(act.sum()) * elem
        rows = g.sel

        def apply(pos):
            f, a = _sub(flat, pos), _sub(act, pos)
            v, c = _sub(val, pos), _sub(cmp, pos)
            view = m.mem.flat32 if words == 1 else m.mem.flat.view(torch.int64)
            sel = a.reshape(-1)
            word = (f.reshape(-1) // elem)[sel]
            old = _apply_serially(view, word, v.reshape(-1)[sel], None if c is None else c.reshape(-1)[sel], fn)
            m.mem.mark_written_words(word, elem)
            if dst is None:
                return
            ret = torch.zeros(a.numel(), dtype=torch.int64, device=old.device)
            ret[sel] = old
            ret = ret.view(a.shape)
            parts = [ret] if words == 1 else [ret, ret >> 32]
            vals = torch.stack([_s32(p).to(torch.int32) for p in parts])
            write_rows(m, dst, vals, _rows_of(rows, pos), _sub(ex, pos))
        m.issue(g, "vm", tuple(range(dst, dst + words)) if dst is not None else (), (), apply)
    return Handler(ins, index, run, "vmem", b, queue="vm")
