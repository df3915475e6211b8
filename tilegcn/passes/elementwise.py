"""Elementwise lowering: T.fill/T.clear and T.Parallel assignments on fragments.

Input: Fill / ParallelStore statements whose fragments have layouts. Output: per-element VALU code in
fp32 (global element reads, e.g. a bias `B[j]`, are issued for all elements first so their loads
overlap), the result rounded to the destination dtype on store.
Invariant kept: every element expression is evaluated in fp32, as TileLang does for 16-bit fragments.
"""
from __future__ import annotations

import math

import numpy as np
import sympy

from ..amdgcn.isa import VCC, Reg, float_literal
from ..amdgcn.memory import pack_f32_pair, unpack_16bit_to_f32
from ..errors import CompileError
from ..ir import nodes as N
from ..ir.layout import Slice, register_of
from ..ir.ops import TileOp
from .context import Context

# llvm.exp.f32's expansion (llc -mcpu=gfx942): log2(e) as f32 plus its low part, and the inputs below
# which e^x underflows to 0 (~ -103.28) and above which it overflows (~ 88.72), all as f32 bits
LOG2_E_BITS, LOG2_E_LOW_BITS = 0x3FB8AA3B, 0x32A5705F
EXP_UNDERFLOW_BITS, EXP_OVERFLOW_BITS = 0xC2CE8ED0, 0x42B17218
POSITIVE_INF = 0x7F800000
SIGN_BIT = 0x80000000
QUIET_NAN = 0x7FC00000
_VOP2 = {"add": "v_add_f32", "mul": "v_mul_f32", "max": "v_max_f32", "min": "v_min_f32", "sub": "v_sub_f32"}
_COMMUTATIVE = {"add", "mul", "max", "min"}
_FOLD = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
         "div": lambda a, b: _ieee_div(a, b), "max": lambda a, b: _nan_or(max, a, b),
         "min": lambda a, b: _nan_or(min, a, b)}


def _nan_or(fn, a: float, b: float) -> float:
    """Folded T.max/T.min: NaN when either is NaN, as torch.maximum/minimum."""
    return math.nan if math.isnan(a) or math.isnan(b) else fn(a, b)


def _f32(x: float) -> float:
    """x rounded to fp32 as the device holds it: past the fp32 range it is +-inf (IEEE), not an error."""
    with np.errstate(over="ignore"):
        return float(np.float32(x))


class _Neg:
    """A VOP3 source with the neg modifier (`-v3`); the instruction lists the register in `uses`."""

    def __init__(self, reg: Reg):
        self.reg = reg

    def __str__(self):
        return f"-{self.reg}"


def _exact_reciprocal(b: float) -> bool:
    """b = +-2^k with 1/b a normal f32: a / b == a * (1/b) exactly, rounding included."""
    m, e = math.frexp(b)
    return abs(m) == 0.5 and -126 <= 1 - e <= 127


def _ieee_div(a: float, b: float) -> float:
    """Folded division in f32, IEEE (x/0 is +-inf or NaN, as on the device)."""
    with np.errstate(all="ignore"):
        return float(np.float32(a) / np.float32(b))


def _is_vgpr(x) -> bool:
    return isinstance(x, Reg) and x.file == "v"


class ElementEvaluator:
    """Evaluates one element expression for element r into VGPR temporaries."""

    def __init__(self, ctx: Context, prefetched: dict):
        self.ctx, self.b, self.prefetched = ctx, ctx.b, prefetched
        self.temps: list = []
        self._registers: dict = {}  # (fragment, index) -> its register for each element of the loop

    def register_of(self, e: N.ElemRef, r: int) -> int:
        """The register of fragment `e.buffer` holding the element `e` reads at loop element r: r itself at the
        loop's own indices; for a broadcast read (x[i] in T.Parallel(M, N), x[0]) the register layout
        inference placed that element in, on this same thread."""
        store = self.ctx.current_parallel
        if tuple(e.index) == tuple(store.indices):
            return r
        key = (e.buffer, tuple(e.index))
        if key not in self._registers:
            self._registers[key] = _broadcast_registers(self.ctx, store, e)
        return self._registers[key][r]

    def temp(self) -> Reg:
        reg = self.b.v.alloc()
        self.temps.append(reg)
        return reg

    def free_temps(self, keep=None):
        for t in self.temps:
            if t != keep:
                self.b.v.free(t)
        self.temps = []

    def vgpr(self, x) -> Reg:
        if _is_vgpr(x):
            return x
        t = self.temp()
        self.b.emit("v_mov_b32", t, x)
        return t

    def eval(self, e: N.Expr, r: int, dst: Reg | None = None):
        """fp32 value of `e` at element r: a float constant, an SGPR or a VGPR."""
        if isinstance(e, N.Const):
            return _f32(e.value)
        if isinstance(e, N.ScalarRef):
            reg = self.ctx.abi.scalars[e.param]
            if e.param.dtype.name == "float32":
                return reg
            t = dst or self.temp()
            self.b.emit("v_cvt_f32_i32", t, reg)
            return t
        if isinstance(e, N.ElemRef):
            if e.buffer.scope == N.GLOBAL:
                return self.prefetched[(e.buffer, _element_index(self.ctx, e, r))]
            value, is_temp = self.ctx.read_f32(e.buffer, self.register_of(e, r))
            if is_temp:
                self.temps.append(value)
            return value
        if isinstance(e, N.BinOp):
            return self._binop(e, r, dst)
        if isinstance(e, N.Call):
            return self._call(e, r, dst)
        if isinstance(e, N.Cast):
            return self._cast(e, r, dst)
        raise TypeError(f"unknown expression {e!r}")

    def _binop(self, e: N.BinOp, r: int, dst):
        a, b = self.eval(e.a, r), self.eval(e.b, r)
        if isinstance(a, float) and isinstance(b, float):
            return _f32(_FOLD[e.op](a, b))
        out = dst or self.temp()
        if e.op == "div":
            if isinstance(b, float) and _exact_reciprocal(b):
                return self._emit2("mul", a, _f32(1.0 / b), out)
            return self._divide(a, b, out)
        if e.op in ("max", "min"):
            return self._max_min(e.op, a, b, out)
        return self._emit2(e.op, a, b, out)

    def _exp(self, x: Reg, out: Reg):
        """e^x as LLVM expands llvm.exp.f32 for gfx9: x*log2(e) split into an integer n and a small
        remainder computed with the product's rounding error (an FMA and the low part of log2(e)),
        so v_exp_f32 sees |r| <= 0.5 and v_ldexp_f32 applies 2^n exactly; past the range ends the
        result is 0 or inf."""
        emit, const = self.b.emit, self.b.sgpr_constant
        log2e = const(LOG2_E_BITS)
        ph, n, r = self.temp(), self.temp(), self.temp()
        emit("v_mul_f32", ph, log2e, x, comment="x*log2(e), rounded")
        emit("v_rndne_f32", n, ph)
        emit("v_sub_f32", r, ph, n)
        emit("v_fma_f32", ph, x, log2e, _Neg(ph), defs=(ph,), uses=(x, log2e, ph), comment="its rounding error")
        emit("v_fma_f32", ph, x, const(LOG2_E_LOW_BITS), ph, comment="+ x * (log2(e) - f32(log2(e)))")
        emit("v_add_f32", r, r, ph)
        emit("v_exp_f32", r, r)
        emit("v_cvt_i32_f32", n, n)
        emit("v_cmp_ngt_f32", VCC, const(EXP_UNDERFLOW_BITS), x, defs=(VCC,), comment="x >= low end (or NaN)?")
        emit("v_ldexp_f32", r, r, n)
        emit("v_cndmask_b32", r, 0, r, VCC, comment="else 0")
        emit("v_cmp_nlt_f32", VCC, const(EXP_OVERFLOW_BITS), x, defs=(VCC,), comment="x <= high end (or NaN)?")
        emit("v_cndmask_b32", out, self.b.vgpr_constant(POSITIVE_INF), r, VCC, comment="else inf")

    def _divide(self, a, b, out: Reg) -> Reg:
        """a / b correctly rounded (IEEE 754, as torch), the way LLVM expands `fdiv float` for gfx9:
        scale numerator and denominator away from the range limits (v_div_scale_f32), refine the
        reciprocal and the quotient with FMAs, v_div_fmas_f32 undoes the scaling and
        v_div_fixup_f32 handles zeros, infinities, NaN and overflow."""
        emit = self.b.emit
        n, d = self.vgpr(a), self.vgpr(b)
        den, rcp, err, num, q, t = (self.temp() for _ in range(6))
        flags = self.b.s.alloc(2, align=2)
        emit("v_div_scale_f32", den, flags, d, d, n, defs=(den, flags), uses=(d, n), comment="scaled b")
        self.b.s.free(flags)
        emit("v_rcp_f32", rcp, den)
        # between a transcendental and its use: one independent instruction (a gfx940+ wait state)
        emit("v_div_scale_f32", num, VCC, n, d, n, defs=(num, VCC), uses=(n, d), comment="scaled a")
        emit("v_fma_f32", err, _Neg(den), rcp, 1.0, defs=(err,), uses=(den, rcp))
        emit("v_fma_f32", rcp, err, rcp, rcp, comment="refined 1/b")
        emit("v_mul_f32", q, num, rcp)
        emit("v_fma_f32", t, _Neg(den), q, num, defs=(t,), uses=(den, q, num))
        emit("v_fma_f32", q, t, rcp, q, comment="refined quotient")
        emit("v_fma_f32", t, _Neg(den), q, num, defs=(t,), uses=(den, q, num), comment="its residual")
        emit("v_div_fmas_f32", t, t, rcp, q, defs=(t,), uses=(t, rcp, q, VCC))
        emit("v_div_fixup_f32", out, t, d, n, defs=(out,), uses=(t, d, n))
        return out

    def _max_min(self, op: str, a, b, out: Reg) -> Reg:
        """torch.maximum/minimum: NaN when either operand is NaN. v_max_f32 is IEEE maxNum, which
        returns the other operand; gfx950's v_maximum3_f32 propagates NaN, elsewhere a v_cmp_u_f32
        (unordered: either is NaN) selects a quiet NaN afterwards."""
        if self.b.arch.has_ieee_maximum3:
            a, b = self._vop3_sources(a, b)
            self.b.emit(f"v_{op}imum3_f32", out, a, b, b)
            return out
        if isinstance(a, float) != isinstance(b, float) and not math.isnan(a if isinstance(a, float) else b):
            return self._max_min_constant(op, *((b, a) if isinstance(a, float) else (a, b)), out)
        x, y = (b, a) if not _is_vgpr(b) else (a, b)
        self.b.emit("v_cmp_u_f32", VCC, x, self.vgpr(y), defs=(VCC,), comment="either operand NaN?")
        self._emit2(op, a, b, out)  # after the compare: `out` may be an operand's register
        self.b.emit("v_cndmask_b32", out, out, self.b.vgpr_constant(QUIET_NAN), VCC, comment="then NaN")
        return out

    def _max_min_constant(self, op: str, x, c: float, out: Reg) -> Reg:
        """max(x, c) / min(x, c) for a constant c (not NaN): x where x > c (< c) or x is NaN, else c
        (ties, -0.0 against 0.0 included, give c, as torch does); two instructions where maxNum and a
        NaN select take three (relu's case)."""
        keep_x = "v_cmp_nge_f32" if op == "max" else "v_cmp_nle_f32"  # !(c >= x) / !(c <= x): true for NaN
        self.b.emit(keep_x, VCC, c, self.vgpr(x), defs=(VCC,))
        constant = c if not float_literal(c).startswith("0x") else self.b.vgpr_constant(int(float_literal(c), 16))
        self.b.emit("v_cndmask_b32", out, constant, self.vgpr(x), VCC, comment=f"{op}(x, {c}), NaN kept")
        return out

    def _vop3_sources(self, *operands) -> list:
        """gfx9 VOP3 operands: no literal constant, at most one SGPR (the constant bus)."""
        out, sgprs = [], set()
        for x in operands:
            literal = isinstance(x, float) and float_literal(x).startswith("0x")
            sgpr = isinstance(x, Reg) and x.file == "s"
            if literal or (sgpr and sgprs - {x}):
                x = self.vgpr(x)
            elif sgpr:
                sgprs.add(x)
            out.append(x)
        return out

    def _emit2(self, op: str, a, b, out: Reg) -> Reg:
        """VOP2: src1 must be a VGPR; swap commutative operands or use the reversed form."""
        if not _is_vgpr(b):
            if _is_vgpr(a) and op in _COMMUTATIVE:
                a, b = b, a
            elif _is_vgpr(a) and op == "sub":
                self.b.emit("v_subrev_f32", out, b, a)
                return out
            else:
                b = self.vgpr(b)
        self.b.emit(_VOP2[op], out, a, b)
        return out

    def _call(self, e: N.Call, r: int, dst):
        x = self.eval(e.args[0], r)
        if isinstance(x, float):
            return _f32({"exp2": lambda v: 2.0 ** v, "exp": math.exp, "abs": abs, "neg": lambda v: -v}[e.fn](x))
        out = dst or self.temp()
        if e.fn == "exp2":
            self.b.emit("v_exp_f32", out, x)
        elif e.fn == "exp":
            self._exp(self.vgpr(x), out)
        elif e.fn == "abs":
            self.b.emit("v_and_b32", out, 0x7FFFFFFF, self.vgpr(x))
        elif e.fn == "neg":
            self.b.emit("v_xor_b32", out, SIGN_BIT, self.vgpr(x), comment="-x: flip the sign")
        else:
            raise TypeError(f"unknown function {e.fn}")
        return out

    def _cast(self, e: N.Cast, r: int, dst):
        x = self.eval(e.x, r)
        if e.dtype.name == "float32":
            return x
        out = dst or self.temp()
        packed = self.temp()
        pack_f32_pair(self.b, packed, self.vgpr(x), None, e.dtype)
        unpack_16bit_to_f32(self.b, out, packed, False, e.dtype)
        return out


def _element_index(ctx: Context, e: N.ElemRef, r: int) -> tuple:
    """Index of a global element read at fragment element r: parallel indices -> layout coords."""
    store = ctx.current_parallel
    coords = ctx.layouts[store.buffer].coords(r, ctx.threads)
    subs = dict(zip(store.indices, coords))
    return tuple(sympy.expand(sympy.sympify(i).xreplace(subs)) for i in e.index)


def _broadcast_registers(ctx: Context, store: TileOp, e: N.ElemRef) -> list:
    """For each element r of the loop, the register of `e.buffer` holding e's element on the same thread."""
    loop, x = ctx.layouts[store.buffer].layout, ctx.layouts[e.buffer].layout
    kept = tuple(d for d, i in enumerate(store.indices) if i in e.index)
    dropped = tuple(d for d in range(len(store.indices)) if d not in kept)
    if isinstance(x, Slice) and not x.keepdims and x.parent == loop and x.dims == dropped:
        return [x.slice_register(r) for r in range(loop.elems)]
    out = []
    for r in range(loop.elems):
        subs = dict(zip(store.indices, loop.coords(r)))
        found = register_of(x, tuple(sympy.sympify(i).xreplace(subs) for i in e.index))
        if found is None:
            raise CompileError(f"internal: {e.buffer.name} ({x.describe()}) does not hold the element "
                               f"T.Parallel reads for element {r} of {store.buffer.name} ({loop.describe()})",
                               location=store.loc)
        out.append(found)
    return out


def _prefetch_global_reads(ctx: Context, s: TileOp, elems: int) -> dict:
    out = {}
    refs = [e for e in N.walk_expr(s.value) if isinstance(e, N.ElemRef) and e.buffer.scope == N.GLOBAL]
    for ref in refs:
        g = ref.buffer
        mask = list(range(1, len(g.shape)))
        for r in range(elems):
            index = _element_index(ctx, ref, r)
            key = (g, index)
            if key in out:
                continue
            reg = ctx.b.v.alloc()
            ctx.access.load(reg, g.dtype.bytes, g, index, mask, comment=f"{g.name}[...] for element {r}")
            out[key] = reg
    for (g, _), reg in out.items():
        if g.dtype.is_16bit:
            unpack_16bit_to_f32(ctx.b, reg, reg, False, g.dtype)
    return out


def lower_parallel(ctx: Context, s: TileOp):
    ctx.current_parallel = s
    lay = ctx.layouts[s.buffer]
    prefetched = _prefetch_global_reads(ctx, s, lay.elems)
    ev = ElementEvaluator(ctx, prefetched)
    direct = lay.regs.file == "v" and not lay.packed
    step = 2 if lay.packed else 1
    for r in range(0, lay.elems, step):
        values = []
        for e in range(step):
            dst = ctx.element_reg(s.buffer, r + e) if direct else None
            values.append(ev.eval(s.value, r + e, dst))
        values = [ev.vgpr(v) if not _is_vgpr(v) else v for v in values]
        if lay.packed:
            ctx.write_f32(s.buffer, r, values[0], values[1])
        else:
            ctx.write_f32(s.buffer, r, values[0])
        ev.free_temps()
    for reg in prefetched.values():
        ctx.b.v.free(reg)
    ctx.current_parallel = None


def lower_fill(ctx: Context, s: TileOp):
    lay = ctx.layouts[s.buffer]
    value = _f32(s.value)
    if lay.regs.file == "a":
        _fill_accumulator(ctx, lay.regs, value)
        return
    if lay.packed:
        half = torch_bits_16(value, s.buffer.dtype)
        value = (half << 16) | half
    for i in range(lay.nregs):
        ctx.b.valu("v_mov_b32", lay.regs[i], value)


def _fill_accumulator(ctx: Context, acc: Reg, value: float):
    """Set every AGPR of `acc` to `value`. Where `value` is an inline constant, MFMAs write whole tuples:
    D = 0 * 0 + value, srcA = srcB = a zeroed VGPR tuple (they take no constant), srcC the constant, which the
    ISA broadcasts as an f32 to every C element. One MFMA sets 16 (or 4) registers where a v_accvgpr_write
    sets one: the 256 writes clearing a 256x256 accumulator at 256 threads become 16 MFMAs, fewer
    instructions for every later pass and fewer issue cycles (8 passes for 16 registers against 16 VALU issues).
    A value that is not an inline constant (-0.0 included: 0 * 0 + -0.0 is +0.0), and registers no tuple
    covers, take one v_accvgpr_write each, from a VGPR holding the value where it needs a literal (a VOP3P
    v_accvgpr_write takes none on gfx9: llvm-mc rejects it)."""
    b = ctx.b
    first = 0
    if _is_inline_f32(value):
        fills = b.arch.acc_fill_mfmas()
        zeros = b.v.alloc(max(shape.a_regs for _, shape in fills), align=b.arch.vector_tuple_align,
                          what="zero MFMA operands")
        for i in range(zeros.count):
            b.valu("v_mov_b32", zeros[i], 0)
        for name, shape in fills:
            n = shape.d_regs
            z = zeros[:shape.a_regs]
            while first + n <= acc.count and first % b.arch.register_alignment("a", n) == 0:
                d = acc[first:first + n]
                b.emit(name, d, z, z, value, defs=(d,), uses=(z, z))
                first += n
        b.v.free(zeros)
    if first == acc.count:
        return
    src = value
    if not _is_inline_f32(value):
        src = b.v.alloc(what="accumulator fill value")
        b.valu("v_mov_b32", src, value)
    for i in range(first, acc.count):
        b.valu("v_accvgpr_write_b32", acc[i], src)


def _is_inline_f32(value: float) -> bool:
    """Whether the f32 operand `value` is an inline constant (isa.float_literal spells the others as 32-bit literal
    bits; an MFMA's srcC takes no literal)."""
    return not float_literal(value).startswith("0x")


def torch_bits_16(value: float, dtype) -> int:
    """The 16-bit pattern of `value` in bf16/f16 (round to nearest even), via torch."""
    import torch

    t = torch.tensor([value], dtype=torch.float32).to(dtype.torch)
    return int(t.view(torch.int16).item()) & 0xFFFF

