"""Scalar instructions: SOP1/SOP2/SOPK/SOPC (SALU), SOPP (branches, waits, barriers) and SMEM loads.

Scalar values are int64 tensors [waves] holding the unsigned 32-bit register value (64-bit operands
hold the full 64-bit pattern, wrapped to int64). SCC is a bool per wave.
"""
from __future__ import annotations

import torch

from .decode import EXEC_LO, VCC_LO, Const, Reg
from .program import BindError, Handler

M32 = 0xFFFFFFFF
M64 = (1 << 64) - 1


def _s64(v: int) -> int:
    v &= M64
    return v - (1 << 64) if v >> 63 else v


def _signed(x):
    """unsigned 32-bit value -> signed value (int64 tensors)."""
    return x - ((x >> 31) << 32)


class ScalarBinder:
    """Scalar-source readers over a Binder."""

    def __init__(self, b):
        self.b = b
        self.dev = b.ctx.device

    def src(self, op, wide=False):
        if isinstance(op, Const):
            v = torch.tensor(_s64(op.bits64()) if wide else op.bits, dtype=torch.int64, device=self.dev)
            return lambda g: v
        if isinstance(op, Reg) and op.kind == "s":
            s = self.b.ssrc_index(op, 2 if wide else 1)
            if wide:
                return lambda g: g.rs(s) | (g.rs(s + 1) << 32)
            return lambda g: g.rs(s)
        raise BindError(f"scalar source {getattr(op, 'text', op)!r} not supported")


SOP2_32 = {  # name: (fn(a, b) -> result (unsigned, may exceed 32 bits before masking), scc rule)
    "s_and_b32": (lambda a, b: a & b, "nz"),
    "s_or_b32": (lambda a, b: a | b, "nz"),
    "s_xor_b32": (lambda a, b: a ^ b, "nz"),
    "s_andn2_b32": (lambda a, b: a & (~b & M32), "nz"),
    "s_orn2_b32": (lambda a, b: a | (~b & M32), "nz"),
    "s_nand_b32": (lambda a, b: ~(a & b) & M32, "nz"),
    "s_nor_b32": (lambda a, b: ~(a | b) & M32, "nz"),
    "s_xnor_b32": (lambda a, b: ~(a ^ b) & M32, "nz"),
    "s_lshl_b32": (lambda a, b: (a << (b & 31)) & M32, "nz"),
    "s_lshr_b32": (lambda a, b: a >> (b & 31), "nz"),
    "s_ashr_i32": (lambda a, b: _signed(a) >> (b & 31), "nz"),
    "s_bfm_b32": (lambda a, b: (((1 << (a & 31)) if not isinstance(a, torch.Tensor)
                                 else torch.bitwise_left_shift(torch.ones_like(a), a & 31)) - 1) << (b & 31), None),
    "s_mul_i32": (lambda a, b: _signed(a) * _signed(b), None),
    "s_mul_hi_u32": (lambda a, b: (a * (b & 0xFFFF) >> 16) + a * (b >> 16) >> 16, None),
    "s_mul_hi_i32": (lambda a, b: (_signed(a) * _signed(b)) >> 32, None),
    "s_min_u32": (lambda a, b: torch.minimum(a, b), "lt"),
    "s_max_u32": (lambda a, b: torch.maximum(a, b), "gt"),
    "s_min_i32": (lambda a, b: torch.where(_signed(a) < _signed(b), a, b), "lt_s"),
    "s_max_i32": (lambda a, b: torch.where(_signed(a) > _signed(b), a, b), "gt_s"),
    "s_lshl1_add_u32": (lambda a, b: (a << 1) + b, "carry"),
    "s_lshl2_add_u32": (lambda a, b: (a << 2) + b, "carry"),
    "s_lshl3_add_u32": (lambda a, b: (a << 3) + b, "carry"),
    "s_lshl4_add_u32": (lambda a, b: (a << 4) + b, "carry"),
    "s_pack_ll_b32_b16": (lambda a, b: (a & 0xFFFF) | ((b & 0xFFFF) << 16), None),
    "s_pack_lh_b32_b16": (lambda a, b: (a & 0xFFFF) | (b & 0xFFFF0000), None),
    "s_pack_hh_b32_b16": (lambda a, b: (a >> 16) | (b & 0xFFFF0000), None),
    "s_cselect_b32": (None, None),
    "s_bfe_u32": (None, "nz"),
    "s_bfe_i32": (None, "nz"),
}
SOP2_64 = {
    "s_and_b64": lambda a, b: a & b,
    "s_or_b64": lambda a, b: a | b,
    "s_xor_b64": lambda a, b: a ^ b,
    "s_andn2_b64": lambda a, b: a & ~b,
    "s_orn2_b64": lambda a, b: a | ~b,
    "s_nand_b64": lambda a, b: ~(a & b),
    "s_nor_b64": lambda a, b: ~(a | b),
    "s_xnor_b64": lambda a, b: ~(a ^ b),
}
SHIFT_64 = ("s_lshl_b64", "s_lshr_b64", "s_ashr_i64", "s_bfe_u64", "s_bfe_i64")
SOP1_32 = {
    "s_mov_b32": (lambda a: a, None),
    "s_not_b32": (lambda a: ~a & M32, "nz"),
    "s_brev_b32": (lambda a: sum(((a >> i) & 1) << (31 - i) for i in range(32)), None),
    "s_bcnt1_i32_b32": (lambda a: sum((a >> i) & 1 for i in range(32)), "nz"),
    "s_ff1_i32_b32": (lambda a: torch.where(a == 0, torch.full_like(a, M32),
                                            _lowest_bit(a)), None),
    "s_sext_i32_i8": (lambda a: ((a & 0xFF) ^ 0x80) - 0x80, None),
    "s_sext_i32_i16": (lambda a: ((a & 0xFFFF) ^ 0x8000) - 0x8000, None),
    "s_abs_i32": (lambda a: _signed(a).abs(), "nz"),
}
SOP1_64 = {"s_mov_b64": (lambda a: a, None), "s_not_b64": (lambda a: ~a, "nz"),
           "s_bcnt1_i32_b64": (lambda a: sum((a >> i) & 1 for i in range(64)), "nz32"),
           "s_ff1_i32_b64": (lambda a: torch.where(a == 0, torch.full_like(a, M32), _lowest_bit64(a)), None)}
SAVEEXEC = {  # new EXEC from (S0, EXEC)
    "s_and_saveexec_b64": lambda s, e: s & e,
    "s_or_saveexec_b64": lambda s, e: s | e,
    "s_xor_saveexec_b64": lambda s, e: s ^ e,
    "s_andn2_saveexec_b64": lambda s, e: s & ~e,
    "s_orn2_saveexec_b64": lambda s, e: s | ~e,
    "s_nand_saveexec_b64": lambda s, e: ~(s & e),
    "s_nor_saveexec_b64": lambda s, e: ~(s | e),
    "s_xnor_saveexec_b64": lambda s, e: ~(s ^ e),
    "s_andn1_saveexec_b64": lambda s, e: ~s & e,
    "s_orn1_saveexec_b64": lambda s, e: ~s | e,
}
CMP = {"eq": lambda a, b: a == b, "lg": lambda a, b: a != b, "gt": lambda a, b: a > b,
       "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b}


def _lowest_bit64(a):
    """Index of the lowest set bit of a 64-bit pattern held in int64 (bit 63 makes the value negative)."""
    low = a & (-a)
    return torch.where(low < 0, torch.full_like(a, 63), _lowest_bit(low))


def _lowest_bit(a):
    low = a & (-a)
    return torch.log2(low.clamp(min=1).double()).round().to(torch.int64)


def build_scalar(ins, b, index):
    base = ins.base
    if base.startswith("s_load_dword"):
        return _smem_load(ins, b, index)
    if base in SOP2_32 or base in SOP2_64 or base in SHIFT_64 or base == "s_cselect_b64":
        return _sop2(ins, b, index)
    if base in ("s_add_u32", "s_addc_u32", "s_sub_u32", "s_subb_u32", "s_add_i32", "s_sub_i32", "s_absdiff_i32"):
        return _arith(ins, b, index)
    if base in SOP1_32 or base in SOP1_64 or base in ("s_cmov_b32", "s_cmov_b64"):
        return _sop1(ins, b, index)
    if base in SAVEEXEC:
        return _saveexec(ins, b, index)
    if base.startswith(("s_cmp_", "s_bitcmp")):
        return _sopc(ins, b, index)
    if base in ("s_movk_i32", "s_cmovk_i32", "s_addk_i32", "s_mulk_i32") or base.startswith("s_cmpk_"):
        return _sopk(ins, b, index)
    return None


def _scc_of(rule, res, a, b):
    if rule == "nz":
        return (res & M32) != 0
    if rule == "nz32":
        return res != 0
    if rule == "lt":
        return a < b
    if rule == "gt":
        return a > b
    if rule == "lt_s":
        return _signed(a) < _signed(b)
    if rule == "gt_s":
        return _signed(a) > _signed(b)
    if rule == "carry":
        return res > M32
    return None


def _sop2(ins, b, index):
    base, ops = ins.base, ins.operands
    sb = ScalarBinder(b)
    if len(ops) != 3:
        raise BindError("expected 3 operands")
    if base in SOP2_64 or base == "s_cselect_b64":
        d = b.sdst(ops[0], 2)
        s0, s1 = sb.src(ops[1], wide=True), sb.src(ops[2], wide=True)
        if base == "s_cselect_b64":
            def run(g):
                g.ws64(d, torch.where(g.rscc(), s0(g), s1(g)))
            return Handler(ins, index, run, "salu", b)
        fn = SOP2_64[base]

        def run(g):
            r = fn(s0(g), s1(g)).expand(g.n)
            g.ws64(d, r)
            g.wscc(r != 0)
        return Handler(ins, index, run, "salu", b)
    if base in SHIFT_64:
        d = b.sdst(ops[0], 2)
        s0, s1 = sb.src(ops[1], wide=True), sb.src(ops[2])

        def run(g):
            a, c = s0(g), s1(g)
            if base == "s_lshl_b64":
                r = a << (c & 63)
            elif base == "s_ashr_i64":
                r = a >> (c & 63)
            elif base == "s_lshr_b64":
                sh = c & 63
                r = torch.where(sh == 0, a, (a >> sh) & ((torch.ones_like(sh) << (64 - sh)) - 1))
            else:  # s_bfe_u64 / s_bfe_i64: offset [5:0], width [22:16]
                off, width = c & 63, ((c >> 16) & 0x7F).clamp(max=64)
                field = torch.where(off == 0, a, (a >> off) & ((torch.ones_like(off) << (64 - off)) - 1))
                keep = torch.where(width >= 64, torch.full_like(width, -1),
                                   (torch.ones_like(width) << width.clamp(max=63)) - 1)
                r = field & keep
                if base == "s_bfe_i64":
                    sign = (r >> (width - 1).clamp(min=0)) & 1
                    r = torch.where((width > 0) & (width < 64) & (sign == 1), r | ~keep, r)
            r = r.expand(g.n)
            g.ws64(d, r)
            g.wscc(r != 0)
        return Handler(ins, index, run, "salu", b)
    d = b.sdst(ops[0], 1)
    s0, s1 = sb.src(ops[1]), sb.src(ops[2])
    fn, rule = SOP2_32[base]
    if base == "s_cselect_b32":
        def run(g):
            g.ws(d, torch.where(g.rscc(), s0(g), s1(g)))
        return Handler(ins, index, run, "salu", b)
    if base in ("s_bfe_u32", "s_bfe_i32"):
        signed = base == "s_bfe_i32"

        def run(g):
            a, c = s0(g), s1(g)
            off, width = c & 31, ((c >> 16) & 0x7F).clamp(max=32)
            mask = (torch.ones_like(width) << width) - 1
            r = (a >> off) & mask
            if signed:
                sign = (r >> (width - 1).clamp(min=0)) & 1
                r = torch.where((width > 0) & (sign == 1), r - (torch.ones_like(width) << width), r)
            r = (r & M32).expand(g.n)
            g.ws(d, r)
            g.wscc(r != 0)
        return Handler(ins, index, run, "salu", b)

    def run(g):
        a, c = s0(g), s1(g)
        r = fn(a, c)
        sc = _scc_of(rule, r, a, c)
        g.ws(d, (r & M32).expand(g.n))
        if sc is not None:
            g.wscc(sc.expand(g.n))
    return Handler(ins, index, run, "salu", b)


def _arith(ins, b, index):
    base, ops = ins.base, ins.operands
    sb = ScalarBinder(b)
    d = b.sdst(ops[0], 1)
    s0, s1 = sb.src(ops[1]), sb.src(ops[2])

    def run(g):
        a, c = s0(g), s1(g)
        if base in ("s_addc_u32", "s_subb_u32"):
            ci = g.rscc().to(torch.int64)
        else:
            ci = 0
        if base in ("s_add_u32", "s_addc_u32"):
            r = a + c + ci
            sc = r > M32
        elif base in ("s_sub_u32", "s_subb_u32"):
            r = a - c - ci
            sc = r < 0
        elif base == "s_add_i32":
            r = _signed(a) + _signed(c)
            sc = (r > 0x7FFFFFFF) | (r < -0x80000000)
        elif base == "s_sub_i32":
            r = _signed(a) - _signed(c)
            sc = (r > 0x7FFFFFFF) | (r < -0x80000000)
        else:  # s_absdiff_i32
            r = (_signed(a) - _signed(c)).abs()
            sc = (r & M32) != 0
        g.ws(d, (r & M32).expand(g.n))
        g.wscc(sc.expand(g.n))
    return Handler(ins, index, run, "salu", b)


def _sop1(ins, b, index):
    base, ops = ins.base, ins.operands
    sb = ScalarBinder(b)
    if len(ops) != 2:
        raise BindError("expected 2 operands")
    if base in ("s_cmov_b32", "s_cmov_b64"):
        wide = base.endswith("64")
        d = b.sdst(ops[0], 2 if wide else 1)
        s0 = sb.src(ops[1], wide)
        b.read_s(d, 2 if wide else 1)
        old = (lambda g: g.rs64(d)) if wide else (lambda g: g.rs(d))

        def run(g):
            v = torch.where(g.rscc(), s0(g), old(g))
            (g.ws64 if wide else g.ws)(d, v)
        return Handler(ins, index, run, "salu", b)
    wide_dst = base in ("s_mov_b64", "s_not_b64")
    wide_src = base in SOP1_64
    fn, rule = SOP1_64[base] if wide_src else SOP1_32[base]
    d = b.sdst(ops[0], 2 if wide_dst else 1)
    s0 = sb.src(ops[1], wide_src)
    if base in ("s_mov_b32", "s_mov_b64"):
        def run(g):
            v = s0(g)
            (g.ws64 if wide_dst else g.ws)(d, v.expand(g.n))
        return Handler(ins, index, run, "salu", b)

    def run(g):
        a = s0(g)
        r = fn(a)
        if not isinstance(r, torch.Tensor):
            r = torch.as_tensor(r)
        r = r.expand(g.n)
        if wide_dst:
            g.ws64(d, r)
        else:
            g.ws(d, r & M32)
        sc = _scc_of(rule, r, a, None)
        if sc is not None:
            g.wscc(sc)
    return Handler(ins, index, run, "salu", b)


def _saveexec(ins, b, index):
    ops = ins.operands
    sb = ScalarBinder(b)
    d = b.sdst(ops[0], 2)
    s0 = sb.src(ops[1], wide=True)
    b.read_s(EXEC_LO, 2)
    b.write_s(EXEC_LO, 2)
    fn = SAVEEXEC[ins.base]

    def run(g):
        old = g.rs64(EXEC_LO)
        new = fn(s0(g), old).expand(g.n)
        g.ws64(d, old)
        g.ws64(EXEC_LO, new)
        g.wscc(new != 0)
    return Handler(ins, index, run, "salu", b)


def _sopc(ins, b, index):
    base, ops = ins.base, ins.operands
    sb = ScalarBinder(b)
    if base.startswith("s_bitcmp"):
        wide = base.endswith("b64")
        s0, s1 = sb.src(ops[0], wide), sb.src(ops[1])
        want = 1 if base.startswith("s_bitcmp1") else 0

        def run(g):
            g.wscc((((s0(g) >> (s1(g) & (63 if wide else 31))) & 1) == want).expand(g.n))
        return Handler(ins, index, run, "salu", b)
    _, _, op, typ = base.split("_")
    wide = typ == "u64"
    s0, s1 = sb.src(ops[0], wide), sb.src(ops[1], wide)
    fn = CMP[op]
    signed = typ == "i32"

    def run(g):
        a, c = s0(g), s1(g)
        if signed:
            a, c = _signed(a), _signed(c)
        g.wscc(fn(a, c).expand(g.n))
    return Handler(ins, index, run, "salu", b)


def _sopk(ins, b, index):
    base, ops = ins.base, ins.operands
    imm = ops[1]
    if not isinstance(imm, Const):
        raise BindError("SOPK needs an immediate")
    simm = imm.value & 0xFFFF
    sext = simm - 0x10000 if simm & 0x8000 else simm
    dev = b.ctx.device
    if base.startswith("s_cmpk_"):
        _, _, op, typ = base.split("_")
        s0 = ScalarBinder(b).src(ops[0])
        k = torch.tensor(sext if typ == "i32" else simm, dtype=torch.int64, device=dev)
        fn = CMP[op]
        signed = typ == "i32"

        def run(g):
            a = s0(g)
            g.wscc(fn(_signed(a) if signed else a, k).expand(g.n))
        return Handler(ins, index, run, "salu", b)
    d = b.sdst(ops[0], 1)
    if base == "s_movk_i32":
        def run(g):
            g.ws(d, sext & M32)
        return Handler(ins, index, run, "salu", b)
    b.read_s(d)
    if base == "s_cmovk_i32":
        k = torch.tensor(sext & M32, dtype=torch.int64, device=dev)

        def run(g):
            g.ws(d, torch.where(g.rscc(), k, g.rs(d)))
        return Handler(ins, index, run, "salu", b)
    if base == "s_addk_i32":
        def run(g):
            r = _signed(g.rs(d)) + sext
            g.ws(d, r & M32)
            g.wscc((r > 0x7FFFFFFF) | (r < -0x80000000))
        return Handler(ins, index, run, "salu", b)

    def run(g):  # s_mulk_i32
        g.ws(d, (_signed(g.rs(d)) * sext) & M32)
    return Handler(ins, index, run, "salu", b)


# ---- SOPP ---------------------------------------------------------------------------------------------------
def build_sopp(ins, b, index, ctx):
    base, ops = ins.base, ins.operands
    if base == "s_nop":
        n = ops[0].value if ops else 0
        return Handler(ins, index, _noop, "nop", b, ws=(n & 0xF) + 1)
    if base in ("s_setprio", "s_sleep", "s_icache_inv", "s_dcache_wb", "s_dcache_inv", "s_sched_barrier"):
        return Handler(ins, index, _noop, "nop", b)
    if base == "s_endpgm":
        return Handler(ins, index, lambda g: g.m.end_program(g), "other", b)
    if base == "s_barrier":
        def run(g):
            g.state = 1  # PARKED
        return Handler(ins, index, run, "barrier", b)
    if base == "s_waitcnt":
        vm = ins.mods.get("vmcnt")
        lgkm = ins.mods.get("lgkmcnt")
        arch = ctx.arch
        vm = None if vm is None or vm >= arch.max_vmcnt else vm
        lgkm = None if lgkm is None or lgkm >= arch.max_lgkmcnt else lgkm

        def run(g):
            if g.vmq or g.lgkmq:
                g.m.wait(g, vm, lgkm)
        return Handler(ins, index, run, "waitcnt", b)
    if base == "s_branch" or base.startswith("s_cbranch_"):
        return _branch(ins, b, index, ctx)
    return None


def _noop(g):
    pass


def _branch(ins, b, index, ctx):
    base, ops = ins.base, ins.operands
    if not ops or not isinstance(ops[0], Const):
        raise BindError("branch needs an immediate")
    simm = ops[0].value & 0xFFFF
    simm = simm - 0x10000 if simm & 0x8000 else simm
    target_addr = ins.addr + 4 + 4 * simm
    target = ctx.addr_index.get(target_addr)
    if target is None:
        raise BindError(f"branch target 0x{target_addr:x} is not an instruction")
    cond = base[len("s_cbranch_"):] if base != "s_branch" else None
    if cond is None:
        def run(g):
            g.pc = target
        return Handler(ins, index, run, "branch", b)
    if cond in ("vccz", "vccnz"):
        b.read_s(VCC_LO, 2)
    if cond in ("execz", "execnz"):
        b.read_s(EXEC_LO, 2)
    if cond not in ("scc0", "scc1", "vccz", "vccnz", "execz", "execnz"):
        raise BindError(f"branch condition {cond} not modelled")

    def run(g):
        if cond == "scc1":
            take = g.rscc()
        elif cond == "scc0":
            take = ~g.rscc()
        elif cond in ("vccz", "vccnz"):
            z = (g.rs(VCC_LO) | g.rs(VCC_LO + 1)) == 0
            take = z if cond == "vccz" else ~z
        else:
            z = (g.rs(EXEC_LO) | g.rs(EXEC_LO + 1)) == 0
            take = z if cond == "execz" else ~z
        g.m.branch(g, take, target)
    return Handler(ins, index, run, "branch", b)


# ---- SMEM -----------------------------------------------------------------------------------------------------
def _smem_load(ins, b, index):
    ops = ins.operands
    width = {"s_load_dword": 1, "s_load_dwordx2": 2, "s_load_dwordx4": 4, "s_load_dwordx8": 8,
             "s_load_dwordx16": 16}.get(ins.base)
    if width is None:
        raise BindError("unknown scalar load")
    extra = [k for k in ins.mods if k not in ("offset",)]
    if extra:
        raise BindError(f"modifier(s) {', '.join(extra)} not supported on scalar loads")
    d = b.sdst(ops[0], width)
    b.defer(d, width, scalar=True)
    base_slot = b.ssrc_index(ops[1], 2, "base")
    off = ops[2] if len(ops) > 2 else Const(0, "int", "0", 0)
    imm = ins.mods.get("offset", 0)
    if isinstance(off, Const):
        imm += off.value
        soff = None
    else:
        soff = b.ssrc_index(off, 1, "soffset")

    def run(g):
        m = g.m
        addr = (g.rs(base_slot) | (g.rs(base_slot + 1) << 32)) + imm
        if soff is not None:
            addr = addr + g.rs(soff)
        addr = (addr & ~3).view(-1, 1)  # SMEM ignores the two low address bits
        flat = m.mem.translate(addr, 4 * width, None)
        m.stats.bytes_global_to_sgpr += 4 * width * g.n
        rows = g.sel

        def apply(pos):
            f = flat if pos is None else flat.index_select(0, pos)
            r = rows if pos is None else _pick_rows(rows, pos)
            vals = m.mem.load_dwords(f.view(-1), width).to(torch.int64) & M32  # [rows, width]
            m.sgpr[d:d + width, r] = vals.t()
            m.scalar_written(d, width)
        m.issue(g, "smem", (), tuple(range(d, d + width)), apply)
    return Handler(ins, index, run, "smem", b, queue="smem")


def _pick_rows(rows, pos):
    """Global wave indices of positions `pos` within a group's rows (slice or index tensor)."""
    if isinstance(rows, slice):
        return pos + rows.start
    return rows.index_select(0, pos)
