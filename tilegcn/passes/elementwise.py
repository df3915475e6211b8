"""Elementwise lowering: T.fill/T.clear and T.Parallel assignments on fragments.

Input: Fill / ParallelStore statements whose fragments have layouts. Output: per-element VALU code in
fp32 (global element reads, e.g. a bias `B[j]`, are issued for all elements first so their loads
overlap), the result rounded to the destination dtype on store.
Invariant kept: every element expression is evaluated in fp32, as TileLang does for 16-bit fragments.
"""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
import sympy

from ..amdgcn.addr import value_range
from ..amdgcn.isa import VCC, Reg, float_literal
from ..amdgcn.memory import pack_f32_pair, unpack_16bit_to_f32
from ..errors import CompileError
from ..ir import elemfn
from ..ir import nodes as N
from ..ir.indices import substitute
from ..ir.layout import Slice, register_of
from ..ir.ops import TileOp
from ..ir.types import float32
from . import dtype_convert
from .context import Context

# llvm.exp.f32's expansion (llc -mcpu=gfx942): log2(e) as f32 plus its low part, and the inputs below
# which e^x underflows to 0 (~ -103.28) and above which it overflows (~ 88.72), all as f32 bits
LOG2_E_BITS, LOG2_E_LOW_BITS = 0x3FB8AA3B, 0x32A5705F
EXP_UNDERFLOW_BITS, EXP_OVERFLOW_BITS = 0xC2CE8ED0, 0x42B17218
POSITIVE_INF = 0x7F800000
SIGN_BIT = 0x80000000
QUIET_NAN = 0x7FC00000
ABS_MASK = 0x7FFFFFFF
FLT_MIN = 1.1754943508222875e-38  # 2^-126, the smallest normal f32
_VOP2 = {"add": "v_add_f32", "mul": "v_mul_f32", "max": "v_max_f32", "min": "v_min_f32", "sub": "v_sub_f32"}
_COMMUTATIVE = {"add", "mul", "max", "min"}
# v_cmp_<op>_f32 for a comparison row, and the op that compares the swapped operands (VOPC's src1 must be a VGPR)
_COMPARE = {"lt": ("lt", "gt"), "le": ("le", "ge"), "gt": ("gt", "lt"), "ge": ("ge", "le"), "eq": ("eq", "eq"),
            "ne": ("neq", "neq")}


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


def _is_vgpr(x) -> bool:
    return isinstance(x, Reg) and x.file == "v"


# at most this many broadcast subexpression values a T.Parallel store keeps in VGPRs for its later elements (one
# per row a thread holds, 16 for a 32 x 32 MFMA accumulator block): a bound on the registers the sharing adds
ROW_VALUES_KEPT = 16


class ElementEvaluator:
    """Evaluates one element expression for element r into VGPR temporaries."""

    def __init__(self, ctx: Context, prefetched: dict, share_rows: bool = False):
        self.ctx, self.b, self.prefetched = ctx, ctx.b, prefetched
        self.temps: list = []
        # (subexpression, the registers it reads) -> its VGPR, kept across the loop's elements (`_row_key`)
        self._row_values: dict | None = {} if share_rows else None
        self._registers: dict = {}  # (fragment, index) -> its register for each element of the loop
        self._kinds: dict = {}  # expression node -> its value_kind (see _kind)

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

    def selectable(self, x):
        """x as a v_cndmask_b32 source: a VGPR or an inline float constant; another constant in a VGPR kept with
        the row values (one move for the loop's elements), anything else moved into a temporary."""
        if not isinstance(x, float):
            return self.vgpr(x)
        if _is_inline_f32(x):
            return x
        key = ("constant", float_literal(x))
        if self._row_values is None or len(self._row_values) >= ROW_VALUES_KEPT:
            return self.vgpr(x)
        if key not in self._row_values:
            reg = self._row_values[key] = self.b.v.alloc(what="a select's constant")
            self.b.emit("v_mov_b32", reg, x)
        return self._row_values[key]

    def eval(self, e: N.Expr, r: int, dst: Reg | None = None):
        """fp32 value of `e` at element r: a float constant, an SGPR or a VGPR (an int expression converted)."""
        return self.eval_as(e, r, N.FLOAT, dst)

    def eval_as(self, e: N.Expr, r: int, kind: str, dst: Reg | None = None):
        """The value of `e` at element r in domain `kind` (N.FLOAT / N.INT): an int expression meeting a float one
        is converted (C's usual arithmetic conversions); a float never becomes an int without T.cast."""
        value, own = self.eval_value(e, r, dst, want=kind)
        if own == kind or isinstance(value, bool):
            return value
        assert own == N.INT and kind == N.FLOAT, f"internal: a {own} value where an {kind} one belongs"
        if isinstance(value, int):
            return float(value)
        out = dst or self.temp()
        self.b.emit("v_cvt_f32_i32", out, value)
        return out

    def eval_value(self, e: N.Expr, r: int, dst: Reg | None = None, want: str = N.FLOAT) -> tuple:
        """(value of `e` at element r, its domain): a float or int constant, an SGPR or a VGPR; an expression of int
        literals only (N.WEAK) is evaluated in `want`'s domain."""
        kind = self._kind(e)
        if kind == N.WEAK:
            kind = want
        if isinstance(e, N.Const):
            return (_f32(e.value) if kind == N.FLOAT else elemfn.wrap32(e.value)), kind
        if isinstance(e, N.ScalarRef):
            return self.ctx.abi.scalars[e.param], kind
        if isinstance(e, N.ElemRef):
            if e.buffer.scope == N.GLOBAL:
                return self.prefetched[(e.buffer, _element_index(self.ctx, e, r))], kind
            value, is_temp = self.ctx.read_f32(e.buffer, self.register_of(e, r))
            if is_temp:
                self.temps.append(value)
            return value, kind
        if isinstance(e, N.IndexValue):
            return self._index_value(e, r), kind
        if isinstance(e, N.Call):
            key = self._row_key(e, r)
            if key is not None and key in self._row_values:
                return self._row_values[key], kind
            value = self._apply(e, r, dst, kind)
            if key is not None and value in self.temps and len(self._row_values) < ROW_VALUES_KEPT:
                # kept for the other elements that read the same registers
                self.temps.remove(value)
                self._row_values[key] = value
            return value, kind
        if isinstance(e, N.Cast):
            return self._cast(e, r, dst), kind
        raise TypeError(f"unknown expression {e!r}")

    def _kind(self, e: N.Expr) -> str | None:
        """value_kind of `e` (None for a condition), memoised per node: the evaluator asks it of every node at every
        element, and value_kind walks the subtree."""
        kind = self._kinds.get(e, False)
        if kind is False:
            kind = self._kinds[e] = None if N.is_condition(e) else N.value_kind(e)
        return kind

    def _index_value(self, e: N.IndexValue, r: int):
        """An index at element r (its T.Parallel indices replaced by the layout's coordinates) as a 32-bit int: a
        constant, or the int in an SGPR or VGPR."""
        store = self.ctx.current_parallel
        coords = self.ctx.layouts[store.buffer].coords(r, self.ctx.threads)
        index = sympy.expand(substitute(e.expr, dict(zip(store.indices, coords))))
        value = self.ctx.lower.operand(index)
        return int(value) if isinstance(value, int) else value

    def _apply(self, e: N.Call, r: int, dst, kind):
        """An element function: its operands (values first, then a condition: a condition lives in VCC, which the
        value sequences of exp, max, ... overwrite) in the row's domain, folded where all are known, else its
        LOWERINGS row (INT_LOWERINGS for an int computation)."""
        if kind == N.FLOAT and self.ctx.fp_contract:
            fused = self._contracted(e, r, dst)
            if fused is not None:
                return fused
        row = elemfn.ELEMENT_FUNCTIONS[e.fn]
        if kind is None:  # a condition: its values compare in their joint domain (float if either is)
            kind = N.join_kinds(N.value_kind(a) for a, k in zip(e.args, row.operand_kinds) if k == elemfn.VALUE)
            kind = N.FLOAT if kind == N.WEAK else kind
            known = self._index_comparison(e, r)
            if known is not None:
                return known
            by_difference = self._index_difference_comparison(e, r)
            if by_difference is not None:
                return by_difference
        operands = [None] * row.arity
        for n, k in enumerate(row.evaluation_order):
            if row.operand_kinds[k] == elemfn.CONDITION:
                operands[k] = self.eval_value(e.args[k], r)[0]
            else:
                operands[k] = self.eval_as(e.args[k], r, kind)
            if operands[k] is VCC and n + 1 < row.arity:  # another condition comes: keep this one in an SGPR pair
                operands[k] = self.b.s.alloc(2, align=2, what="a condition")
                self.b.emit("s_mov_b64", operands[k], VCC, defs=(operands[k],), uses=(VCC,))
        if all(type(x) in (float, int, bool) for x in operands):
            folded = row.fold(*operands)
            if row.result == elemfn.CONDITION:
                return folded
            return elemfn.wrap32(folded) if kind == N.INT else _f32(folded)
        out = None if row.result == elemfn.CONDITION else dst or self.temp()
        if kind == N.INT and e.fn in INT_LOWERINGS:
            return INT_LOWERINGS[e.fn](self, out, *operands)
        return LOWERINGS[e.fn](self, out, *operands)

    def _contracted(self, e: N.Call, r: int, dst):
        """`a * b + c`, `c + a * b`, `a * b - c` and `c - a * b` in fp32 as one v_fma_f32 (a single rounding), where
        the product has no other use: HIP's default (-ffp-contract=fast), Triton's (enable_fp_fusion) and so
        TileLang's through hipcc; CompileOptions(fp_contract=False) keeps the two roundings. The first operand's
        product goes first, as LLVM's DAG combiner takes it. A product shared by a row's elements (`m[i] * s` in
        T.Parallel(M, N), `_row_key`) has other uses and stays a v_mul. None where no operand contracts."""
        if e.fn not in ("add", "sub") or len(e.args) != 2:
            return None
        k = next((k for k in (0, 1) if self._contractible(e.args[k], e, r)), None)
        if k is None:
            return None
        product, other = e.args[k], e.args[1 - k]
        a, b = (self.eval_as(x, r, N.FLOAT) for x in product.args)
        c = self.eval_as(other, r, N.FLOAT)
        if isinstance(a, float) and isinstance(b, float):  # (a product of constants that no leaf showed)
            product_value = _f32(a * b)
            return LOWERINGS[e.fn](self, dst or self.temp(), *((product_value, c) if k == 0 else (c, product_value)))
        a, b, c = self._vop3_sources(a, b, c, literal_in_sgpr=True)
        if e.fn == "sub":  # a*b - c: the neg modifier on c; c - a*b: on a
            if k == 0:
                c = -c if isinstance(c, float) else _Neg(c)
            else:
                a = -a if isinstance(a, float) else _Neg(a)
        out = dst or self.temp()
        operands = (a, b, c)
        uses = tuple(x.reg if isinstance(x, _Neg) else x for x in operands if isinstance(x, (Reg, _Neg)))
        self.b.emit("v_fma_f32", out, *operands, defs=(out,), uses=uses, comment="contracted a * b +- c")
        return out

    def _contractible(self, x, parent: N.Call, r: int) -> bool:
        """Whether `x`, an operand of `parent` (an fp32 add or sub), is a product the FMA may absorb: an fp32 mul of
        something other than constants alone, not a per-row value that other elements share (unless the parent is
        one too: then the product is computed once for it)."""
        if not (isinstance(x, N.Call) and x.fn == "mul" and self._kind(x) == N.FLOAT):
            return False
        if all(isinstance(leaf, N.Const) for leaf in N.walk_expr(x) if not isinstance(leaf, N.Call)):
            return False
        return self._row_key(x, r) is None or self._row_key(parent, r) is not None

    def _row_key(self, e: N.Call, r: int):
        """For a value subexpression that reads only elements broadcast to the loop (`scores_max[i] * scale` in
        T.Parallel(M, N): one value per row, which each thread holds for several of its elements), the key under
        which its value at element r serves every element reading the same registers: (e, those registers). None
        where it reads the loop's own element, an index, global memory or the fragment the loop writes (T.Parallel
        reads precede its writes), and outside a T.Parallel store that keeps such values (`share_rows`)."""
        if self._row_values is None or self._kind(e) is None:
            return None
        store = self.ctx.current_parallel
        refs = []
        for x in N.walk_expr(e):
            if isinstance(x, N.IndexValue) or isinstance(x, N.Cast):
                return None
            if isinstance(x, N.ElemRef):
                if x.buffer.scope != N.FRAGMENT or x.buffer is store.buffer or \
                        tuple(x.index) == tuple(store.indices):
                    return None
                refs.append((x.buffer, self.register_of(x, r)))
        return (e, tuple(refs)) if refs else None

    def free_row_values(self):
        for reg in self._row_values.values():
            self.b.v.free(reg)
        self._row_values.clear()

    def _index_comparison(self, e: N.Call, r: int) -> bool | None:
        """The value of a comparison of two index expressions at element r where it is the same in every lane and
        every trip of the enclosing loops, else None: the difference's range over the thread ids and the loop
        variables' ranges (interval arithmetic: a bound, so a fold is never wrong). A key-bound mask
        `k * block_N + j >= seq_len` of a loop over ceildiv(seq_len, block_N) tiles is false throughout when
        block_N divides seq_len (flash attention's non-causal step: 3 VALU instructions per score saved)."""
        if e.fn not in _COMPARE or not all(isinstance(a, (N.IndexValue, N.Const)) for a in e.args):
            return None
        a, b = (self._index_expr(x, r) for x in e.args)
        if a is None or b is None:
            return None
        ranges = {**self.ctx.access.loop_ranges, **{t: (0, self.ctx.threads - 1) for t in self.b.lane_symbols}}
        span = value_range(sympy.expand(a - b), ranges)
        if span is None:
            return None
        lo, hi = span
        truth = {"lt": (hi < 0, lo >= 0), "le": (hi <= 0, lo > 0), "gt": (lo > 0, hi <= 0), "ge": (lo >= 0, hi < 0),
                 "eq": (lo == hi == 0, lo > 0 or hi < 0), "ne": (lo > 0 or hi < 0, lo == hi == 0)}[e.fn]
        return True if truth[0] else False if truth[1] else None

    def _index_difference_comparison(self, e: N.Call, r: int):
        """A comparison of two index expressions that differ from element to element by constants only (causal
        attention's `bx * block_M + i >= k * block_N + j`: the row and key of each score are a thread's first ones
        plus constants) as `(a - b) OP -constant`, the difference a - b of their shared parts computed once for
        the loop's elements (kept with the row values): an element takes one compare where it took an add, a
        compare and the operands' moves. Exact for 32-bit index values whose difference fits 32 bits (a tensor's
        indices). None where the parts are uniform (no VGPR) or the constants cancel (the direct compare is as
        cheap)."""
        if e.fn not in _COMPARE or not all(isinstance(a, (N.IndexValue, N.Const)) for a in e.args):
            return None
        a, b = (self._index_expr(x, r) for x in e.args)
        if a is None or b is None:
            return None
        (ca, sa), (cb, sb) = a.as_coeff_Add(), b.as_coeff_Add()
        if ca == cb:
            return None
        difference = self._shared_difference(sa, sb)
        if difference is None:
            return None
        return INT_LOWERINGS[e.fn](self, None, difference, int(cb - ca))

    def _shared_difference(self, sa, sb):
        """A VGPR holding index expressions sa - sb, kept across the loop's elements where they keep row values."""
        key = ("index difference", sa, sb)
        if self._row_values is not None and key in self._row_values:
            return self._row_values[key]
        va, vb = self.ctx.lower.operand(sa), self.ctx.lower.operand(sb)
        if not (_is_vgpr(va) or _is_vgpr(vb)):
            return None
        out = self.b.v.alloc(what="index difference")
        if _is_vgpr(vb):
            self.b.emit("v_sub_u32", out, va, vb)
        else:
            self.b.emit("v_subrev_u32", out, vb, va)
        if self._row_values is not None and len(self._row_values) < ROW_VALUES_KEPT:
            self._row_values[key] = out
        else:
            self.temps.append(out)
        return out

    def _index_expr(self, e, r: int):
        """An int index expression at element r (T.Parallel indices replaced by the layout's coordinates), None for
        a constant that is no int."""
        if isinstance(e, N.Const):
            return sympy.Integer(e.value) if isinstance(e.value, int) and not isinstance(e.value, bool) else None
        store = self.ctx.current_parallel
        coords = self.ctx.layouts[store.buffer].coords(r, self.ctx.threads)
        return sympy.expand(substitute(e.expr, dict(zip(store.indices, coords))))

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
        emit("v_div_scale_f32", num, VCC, n, d, n, defs=(num, VCC), uses=(n, d), comment="scaled a")
        emit("v_rcp_f32", rcp, den)  # its reader's wait state (gfx940+) is the hazard pass's to place
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

    def _vop3_sources(self, *operands, literal_in_sgpr: bool = False) -> list:
        """gfx9 VOP3 operands: no literal constant, at most one SGPR (the constant bus). With `literal_in_sgpr`, a
        literal goes into the builder's SGPR constant (set once for the kernel) while the bus is free, not into a
        VGPR at every element."""
        out, sgprs = [], set()
        for x in operands:
            literal = isinstance(x, float) and float_literal(x).startswith("0x")
            if literal and literal_in_sgpr and not sgprs:
                x = self.b.sgpr_constant(_f32_bits(x))
                literal = False
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

    def _cast(self, e: N.Cast, r: int, dst):
        """T.cast: the value of e.x converted to e.dtype as torch's .to() (passes/dtype_convert.py), held as that
        dtype's domain (fp32 for float dtypes, a 32-bit int for int dtypes)."""
        if isinstance(e, N.Reinterpret):
            return self._reinterpret(e, r, dst)
        x, kind = self.eval_value(e.x, r, want=N.INT if e.dtype.is_int else N.FLOAT)
        if e.dtype.is_16bit and kind == N.FLOAT and not isinstance(x, float):
            out = dst or self.temp()
            packed = self.temp()
            pack_f32_pair(self.b, packed, self.vgpr(x), None, e.dtype)
            unpack_16bit_to_f32(self.b, out, packed, False, e.dtype)
            return out
        source = e.x.buffer.dtype if isinstance(e.x, N.ElemRef) else None
        return dtype_convert.convert(self.b, self.temp, x, kind, e.dtype, src_dtype=source)

    def _reinterpret(self, e: N.Reinterpret, r: int, dst):
        """T.reinterpret: the int's low bits as a float, held as fp32 (a bf16 is the top half of its fp32; an fp16
        converts exactly; an fp32 is the word itself)."""
        x, _ = self.eval_value(e.x, r, want=N.INT)
        out = dst or self.temp()
        if e.dtype.name == "bfloat16":
            self.b.emit("v_lshlrev_b32", out, 16, self.vgpr(x), comment="bf16 bits -> fp32")
        elif e.dtype.name == "float16":
            self.b.emit("v_cvt_f32_f16", out, self.vgpr(x), comment="f16 bits -> fp32")
        else:
            self.b.emit("v_mov_b32", out, self.vgpr(x))
        return out


# ---- lowering rows: one per row of ir/elemfn.py, (evaluator, out, *operands) -> the value --------------------------
# Operands are floats (constants), SGPRs or VGPRs; a condition is VCC (or a bool where it folded). `out` is the VGPR
# to write (None for a condition); a sequence writes it last, as it may be an operand's register.

def _f32_bits(x: float) -> int:
    return int(np.array(x, dtype=np.float32).view(np.uint32))


def _bits_f32(bits: int) -> float:
    return float(np.array(bits, dtype=np.uint32).view(np.float32))


def _divide_or_scale(ev, out, a, b):
    if isinstance(b, float) and _exact_reciprocal(b):
        return ev._emit2("mul", a, _f32(1.0 / b), out)
    return ev._divide(a, b, out)


def _neg(ev, out, x):
    ev.b.emit("v_xor_b32", out, SIGN_BIT, ev.vgpr(x), comment="-x: flip the sign")
    return out


def _abs(ev, out, x):
    ev.b.emit("v_and_b32", out, ABS_MASK, ev.vgpr(x))
    return out


def _exp(ev, out, x):
    ev._exp(ev.vgpr(x), out)
    return out


def _exp2(ev, out, x):
    """2^x: one v_exp_f32 (what LLVM emits for llvm.exp2.f32 under `afn`, and ROCm's native_exp2): results below
    2^-126 flush to 0 (the instruction gives no denormal); T.exp keeps them."""
    ev.b.emit("v_exp_f32", out, x)
    return out


def _scaled_log2(ev, x) -> Reg:
    """log2 of x, with LLVM's scaling of denormal inputs (v_log_f32 flushes them): below 2^-126, x * 2^32 goes in
    and VCC stays set so that the caller subtracts 32 (in its own unit)."""
    emit, t, k = ev.b.emit, ev.temp(), ev.temp()
    x = ev.vgpr(x)
    emit("v_cmp_gt_f32", VCC, FLT_MIN, x, defs=(VCC,), comment="a denormal input?")
    emit("v_cndmask_b32", k, 0, 32, VCC)
    emit("v_ldexp_f32", t, x, k, comment="* 2^32 where denormal")
    emit("v_log_f32", t, t)
    return t


def _log2(ev, out, x):
    t, c = _scaled_log2(ev, x), ev.temp()
    ev.b.emit("v_cndmask_b32", c, 0, ev.b.vgpr_constant(_f32_bits(32.0)), VCC)
    ev.b.emit("v_sub_f32", out, t, c, comment="- 32 where scaled")
    return out


LN2_HI_BITS, LN2_LO_BITS, LN2_TIMES_32_BITS = 0x3F317217, 0x3377D1CF, 0x41B17218
# class mask of v_cmp_class_f32: signalling NaN, quiet NaN, -inf, +inf
NAN_OR_INF_CLASSES = 0x207


def _log(ev, out, x):
    """ln x as LLVM expands llvm.log.f32: log2 (denormals scaled), times ln 2 carried in two parts (its product's
    rounding error recovered with an FMA), where log2 is finite; minus 32 ln 2 where the input was scaled."""
    emit, const = ev.b.emit, ev.b.sgpr_constant
    y = _scaled_log2(ev, x)
    c, p, e, r = ev.temp(), ev.temp(), ev.temp(), ev.temp()
    emit("v_cndmask_b32", c, 0, ev.b.vgpr_constant(LN2_TIMES_32_BITS), VCC, comment="32 ln 2 where scaled")
    emit("v_mul_f32", p, _bits_f32(LN2_HI_BITS), y, comment="log2(x) * ln 2, rounded")
    ln2_hi = const(LN2_HI_BITS)
    emit("v_fma_f32", e, y, ln2_hi, _Neg(p), defs=(e,), uses=(y, ln2_hi, p), comment="its rounding error")
    emit("v_fma_f32", e, y, const(LN2_LO_BITS), e, comment="+ log2(x) * (ln 2 - f32(ln 2))")
    emit("v_add_f32", p, p, e)
    emit("v_cmp_class_f32", VCC, y, ev.b.vgpr_constant(NAN_OR_INF_CLASSES), defs=(VCC,), comment="inf or NaN?")
    emit("v_cndmask_b32", r, p, y, VCC, comment="then log2(x) itself")
    emit("v_sub_f32", out, r, c)
    return out


SQRT_SCALE_BELOW, SQRT_UP, SQRT_DOWN = 2.0 ** -96, 2.0 ** 32, 2.0 ** -16
ZERO_OR_INF_CLASSES = 0x260  # v_cmp_class_f32: -0, +0, +inf


def _sqrt(ev, out, x):
    """sqrt(x) correctly rounded, as LLVM expands llvm.sqrt.f32: v_sqrt_f32 (1 ulp) on x scaled by 2^32 where
    x < 2^-96, then the neighbour below or above replaces it where its residual says it is nearer (two FMAs), the
    result is scaled back by 2^-16; +-0 and +inf give themselves."""
    emit = ev.b.emit
    x = ev.vgpr(x)
    xs, r, lo, hi, t = ev.temp(), ev.temp(), ev.temp(), ev.temp(), ev.temp()
    flags = ev.b.s.alloc(2, align=2)
    emit("v_cmp_gt_f32", VCC, SQRT_SCALE_BELOW, x, defs=(VCC,), comment="tiny: scale up")
    emit("v_mul_f32", t, _f32(SQRT_UP), x)
    emit("v_cndmask_b32", xs, x, t, VCC)
    emit("v_sqrt_f32", r, xs)
    emit("v_add_u32", lo, -1, r, comment="the fp32 below")
    emit("v_fma_f32", t, _Neg(lo), r, xs, defs=(t,), uses=(lo, r, xs))
    emit("v_cmp_ge_f32", flags, 0, t, defs=(flags,), comment="below is at least as near?")
    emit("v_add_u32", hi, 1, r, comment="the fp32 above")
    emit("v_cndmask_b32", lo, r, lo, flags, defs=(lo,), uses=(r, lo, flags))
    emit("v_fma_f32", t, _Neg(hi), r, xs, defs=(t,), uses=(hi, r, xs))
    emit("v_cmp_lt_f32", flags, 0, t, defs=(flags,), comment="above is nearer?")
    emit("v_cndmask_b32", lo, lo, hi, flags, defs=(lo,), uses=(lo, hi, flags))
    ev.b.s.free(flags)
    emit("v_mul_f32", t, _f32(SQRT_DOWN), lo)
    emit("v_cndmask_b32", lo, lo, t, VCC, comment="scaled back")
    emit("v_cmp_class_f32", VCC, xs, ev.b.vgpr_constant(ZERO_OR_INF_CLASSES), defs=(VCC,), comment="+-0 or +inf?")
    emit("v_cndmask_b32", out, lo, xs, VCC, comment="then itself")
    return out


def _rsqrt(ev, out, x):
    """1/sqrt(x) as LLVM expands it at 1 ulp (llvm.sqrt + fdiv with !fpmath 1.0): v_rsq_f32 flushes denormal
    inputs, so below 2^-126 x * 2^24 goes in and the result is scaled by 2^12."""
    emit, t, k = ev.b.emit, ev.temp(), ev.temp()
    x = ev.vgpr(x)
    emit("v_cmp_gt_f32", VCC, FLT_MIN, x, defs=(VCC,), comment="a denormal input?")
    emit("v_cndmask_b32", k, 0, 24, VCC)
    emit("v_ldexp_f32", t, x, k)
    emit("v_rsq_f32", t, t)
    emit("v_cndmask_b32", k, 0, 12, VCC)
    emit("v_ldexp_f32", out, t, k)
    return out


def _polynomial(ev, x2: Reg, coefficients) -> Reg:
    """c0 + x2 * (c1 + x2 * (...)) by Horner, one v_fmaak_f32 (a literal addend) per coefficient."""
    h = ev.temp()
    ev.b.emit("v_mov_b32", h, _f32(coefficients[-1]))
    for c in reversed(coefficients[:-1]):
        ev.b.emit("v_fmaak_f32", h, h, x2, _f32(c))
    return h


def _odd_series(ev, a: Reg, coefficients) -> Reg:
    """a * (c0 + a^2 * (c1 + ...)), c0 = 1 taken exactly: a + a * (a^2 * (c1 + ...))."""
    a2, t = ev.temp(), ev.temp()
    ev.b.emit("v_mul_f32", a2, a, a)
    h = _polynomial(ev, a2, coefficients[1:])
    ev.b.emit("v_mul_f32", t, a2, h)
    ev.b.emit("v_mul_f32", t, a, t)
    ev.b.emit("v_add_f32", h, a, t)
    return h


def _with_sign_of(ev, out, magnitude: Reg, x: Reg):
    ev.b.emit("v_bfi_b32", out, ev.b.sgpr_constant(ABS_MASK), magnitude, x, comment="the sign of x")
    return out


# tanh(x) / x = 1 - x^2/3 + 2x^4/15 - ... (its Taylor series): below |x| = 0.4 the terms to x^12 leave < 2^-27
TANH_SERIES = (1.0, -1 / 3, 2 / 15, -17 / 315, 62 / 2835, -1382 / 155925, 21844 / 6081075)
TANH_SERIES_BELOW = 0.4


def _tanh(ev, out, x):
    """tanh: |x| < 0.4 its odd series; beyond, 1 - 2 / (e^(2|x|) + 1) (v_rcp_f32, 1 ulp; e^(2|x|) = inf gives 1);
    the sign of x. NaN stays NaN."""
    emit = ev.b.emit
    x = ev.vgpr(x)
    a, e, big = ev.temp(), ev.temp(), ev.temp()
    emit("v_and_b32", a, ABS_MASK, x)
    small = _odd_series(ev, a, TANH_SERIES)
    emit("v_add_f32", e, a, a)
    ev._exp(e, e)
    emit("v_add_f32", e, 1.0, e)
    emit("v_rcp_f32", e, e)
    emit("v_fma_f32", big, -2.0, e, 1.0, defs=(big,), uses=(e,), comment="1 - 2 / (e^2|x| + 1)")
    emit("v_cmp_gt_f32", VCC, TANH_SERIES_BELOW, a, defs=(VCC,))
    emit("v_cndmask_b32", big, big, small, VCC, comment="the series near 0")
    return _with_sign_of(ev, out, big, x)


def _sigmoid(ev, out, x):
    """1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) below (so e^-|x| never overflows and results below 2^-126 keep
    their denormal digits), with a correctly rounded division."""
    emit = ev.b.emit
    x = ev.vgpr(x)
    e, num = ev.temp(), ev.temp()
    emit("v_or_b32", e, SIGN_BIT, x, comment="-|x|")
    ev._exp(e, e)
    emit("v_cmp_gt_f32", VCC, 0, x, defs=(VCC,), comment="x < 0?")
    emit("v_cndmask_b32", num, 1.0, e, VCC)
    emit("v_add_f32", e, 1.0, e)
    return ev._divide(num, e, out)


# erf: below |x| = 1, x * P(x^2); beyond, 1 - t Q(t) e^(-x^2) with t = 1 / (1 + |x|/2) (erfc's usual form). P and Q
# are least-squares fits on 400 Chebyshev nodes (numpy.polynomial.polynomial.polyfit against math.erf / math.erfc, in
# float64): relative error below 1.4e-9 (P, |x| < 1) and 6.9e-9 (Q, of erfc on 1 <= |x| <= 4; beyond, erfc < 2^-26).
ERF_SERIES = (1.128379165881503, -0.3761262690358061, 0.1128359746349022, -0.026854328796175875,
              0.005189311942922966, -0.0008018854995123469, 7.882497118714246e-05)
ERF_SERIES_BELOW = 1.0
ERFC_T = (0.28260246979566445, 0.2743733310237994, 0.2964507300160862, 0.0030642339032814856,
          0.43160400471204746, -0.3817839348010899, 0.0935682644075414)


def _erf(ev, out, x):
    emit = ev.b.emit
    x = ev.vgpr(x)
    a, t, e = ev.temp(), ev.temp(), ev.temp()
    emit("v_and_b32", a, ABS_MASK, x)
    small = _series_with_first_term(ev, a, ERF_SERIES)
    emit("v_fma_f32", t, a, 0.5, 1.0, defs=(t,), uses=(a,))
    emit("v_rcp_f32", t, t, comment="t = 1 / (1 + |x|/2)")
    h = _polynomial(ev, t, ERFC_T)
    emit("v_mul_f32", h, t, h)
    emit("v_mul_f32", e, a, a)
    emit("v_xor_b32", e, SIGN_BIT, e)
    ev._exp(e, e)
    emit("v_fma_f32", h, _Neg(h), e, 1.0, defs=(h,), uses=(h, e), comment="1 - t Q(t) e^(-x^2)")
    emit("v_cmp_gt_f32", VCC, ERF_SERIES_BELOW, a, defs=(VCC,))
    emit("v_cndmask_b32", h, h, small, VCC, comment="x P(x^2) near 0")
    return _with_sign_of(ev, out, h, x)


def _series_with_first_term(ev, a: Reg, coefficients) -> Reg:
    """a * (c0 + a^2 * (c1 + ...)) where c0 is not 1."""
    a2, h = ev.temp(), None
    ev.b.emit("v_mul_f32", a2, a, a)
    h = _polynomial(ev, a2, coefficients)
    ev.b.emit("v_mul_f32", h, a, h)
    return h


def _compare(op: str, table=_COMPARE, suffix="f32"):
    def lower(ev, out, a, b):
        direct, swapped = table[op]
        if not _is_vgpr(b):
            if _is_vgpr(a):
                a, b, direct = b, a, swapped
            else:
                b = ev.vgpr(b)
        ev.b.emit(f"v_cmp_{direct}_{suffix}", VCC, a, b, defs=(VCC,))
        return VCC
    return lower


def _if_then_else(ev, out, cond, a, b):
    """cond ? a : b. The mask takes the one constant bus (gfx9), so a source is a VGPR or an inline constant (VOP3
    takes one in either source); another constant goes into a VGPR once for the loop's elements (causal
    attention's `T.if_then_else(mask, 0, -inf)`: one instruction an element, where the moves of both made three)."""
    if isinstance(cond, bool):
        return a if cond else b
    ev.b.emit("v_cndmask_b32", out, ev.selectable(b), ev.selectable(a), cond)
    return out


def _logic(op: str):
    """`&` / `|` of two conditions (lane masks: VCC or a saved SGPR pair, or a bool where one folded), into VCC."""
    def lower(ev, out, a, b):
        if isinstance(a, bool) or isinstance(b, bool):
            known, mask = (a, b) if isinstance(a, bool) else (b, a)
            if known == (op == "and"):  # True & m, False | m: m
                return mask
            return known
        ev.b.emit(f"s_{op}_b64", VCC, a, b, defs=(VCC,), uses=(a, b))
        return VCC
    return lower


def _not(ev, out, mask):
    ev.b.emit("s_not_b64", VCC, mask, defs=(VCC,), uses=(mask,), comment="(inactive lanes are never selected)")
    return VCC


# ---- 32-bit int lowerings: the rows of the ANY domain computed on ints (INT_LOWERINGS) and the INT rows --------------
# Operands are ints (constants), SGPRs or VGPRs. Literals outside -16..64 fit VOP2's src0 only: VOP3 (v_mul_lo_u32,
# v_bfe) takes none on gfx9, so they go through a VGPR there.

def _int_vop2(op: str, commutative: bool, reverse: str | None = None):
    """A VOP2 int op: src1 must be a VGPR (swap commutative operands, or use the reversed form)."""
    def lower(ev, out, a, b):
        if not _is_vgpr(b):
            if _is_vgpr(a) and commutative:
                a, b = b, a
            elif _is_vgpr(a) and reverse:
                ev.b.emit(reverse, out, b, a)
                return out
            else:
                b = ev.vgpr(b)
        ev.b.emit(op, out, a, b)
        return out
    return lower


def _vop3_int(ev, x):
    """An int operand of a VOP3 instruction: an inline constant or a register (a literal goes through a VGPR)."""
    return ev.vgpr(x) if isinstance(x, int) and not -16 <= x <= 64 else x


def _int_mul(ev, out, a, b):
    a, b = _vop3_int(ev, a), _vop3_int(ev, b)
    if not _is_vgpr(a) and not _is_vgpr(b):
        b = ev.vgpr(b)  # one SGPR or constant per VOP3 on the constant bus
    ev.b.emit("v_mul_lo_u32", out, a, b)
    return out


def _int_neg(ev, out, x):
    ev.b.emit("v_sub_u32", out, 0, ev.vgpr(x))
    return out


def _int_abs(ev, out, x):
    """|x| as torch (INT_MIN stays INT_MIN): max(x, -x)."""
    x = ev.vgpr(x)
    t = ev.temp()
    ev.b.emit("v_sub_u32", t, 0, x)
    ev.b.emit("v_max_i32", out, x, t)
    return out


_INT_COMPARE = {**_COMPARE, "ne": ("ne", "ne")}  # v_cmp_<op>_i32: "ne" is plain (no NaN to be unordered)


def _int_if_then_else(ev, out, cond, a, b):
    if isinstance(cond, bool):
        return a if cond else b
    false = b if isinstance(b, int) and -16 <= b <= 64 else ev.vgpr(b)  # the mask takes the one constant bus
    ev.b.emit("v_cndmask_b32", out, false, ev.vgpr(a), cond)
    return out


def _shift(op: str):
    """x << n, x >> n (arithmetic): the reversed VOP2 forms take the count first, the value (a VGPR) second."""
    def lower(ev, out, x, n):
        ev.b.emit(op, out, n, ev.vgpr(x))
        return out
    return lower


def _bitnot(ev, out, x):
    ev.b.emit("v_xor_b32", out, -1, ev.vgpr(x))
    return out


def _power_of_two(x) -> int | None:
    return x.bit_length() - 1 if isinstance(x, int) and x > 0 and x & (x - 1) == 0 else None


def _floordiv(ev, out, a, b):
    k = _power_of_two(b)
    if k is not None:  # floor(a / 2^k) is the arithmetic shift, negative a included
        ev.b.emit("v_ashrrev_i32", out, k, ev.vgpr(a))
        return out
    q, _ = _divmod_floor(ev, a, b)
    ev.b.emit("v_mov_b32", out, q)
    return out


def _mod(ev, out, a, b):
    k = _power_of_two(b)
    if k is not None:  # a mod 2^k rounding toward -inf: the low k bits (two's complement)
        ev.b.emit("v_and_b32", out, b - 1, ev.vgpr(a))
        return out
    _, rem = _divmod_floor(ev, a, b)
    ev.b.emit("v_mov_b32", out, rem)
    return out


# 2^32 - 512 as f32 (0x4F7FFFFE): LLVM's scale of the reciprocal estimate in its 32-bit udiv expansion
# (AMDGPUCodeGenPrepare expandDivRem32), chosen so that the estimate of 2^32 / y never exceeds the true quotient
RCP_SCALE_BITS = 0x4F7FFFFE


def _divmod_floor(ev, a, b) -> tuple:
    """(floor(a / b), a - b * floor(a / b)) of 32-bit ints as TVM's floordiv / floormod (Python's // and %): the
    magnitudes divided as LLVM expands a 32-bit udiv (an f32 reciprocal estimate, one Newton step in integers, two
    corrections), the signs applied (a truncated quotient), then one step toward -inf where the remainder's sign
    differs from the divisor's. Division by 0 gives an unspecified value (torch raises; C and TVM leave it
    undefined)."""
    emit = ev.b.emit
    a, b = ev.vgpr(a), ev.vgpr(b)
    t = [ev.temp() for _ in range(9)]
    sa, sb, ua, ub, z, q, rem, u, w = t
    emit("v_ashrrev_i32", sa, 31, a, comment="sign of a (0 or -1)")
    emit("v_ashrrev_i32", sb, 31, b)
    emit("v_add_u32", ua, a, sa)
    emit("v_xor_b32", ua, ua, sa, comment="|a|")
    emit("v_add_u32", ub, b, sb)
    emit("v_xor_b32", ub, ub, sb, comment="|b|")
    emit("v_cvt_f32_u32", z, ub)
    emit("v_rcp_iflag_f32", z, z)
    emit("v_mul_f32", z, _bits_f32(RCP_SCALE_BITS), z)
    emit("v_cvt_u32_f32", z, z, comment="~2^32 / |b|, never above")
    emit("v_sub_u32", u, 0, ub)
    emit("v_mul_lo_u32", u, u, z)
    emit("v_mul_hi_u32", u, z, u)
    emit("v_add_u32", z, z, u, comment="refined")
    emit("v_mul_hi_u32", q, ua, z, comment="quotient estimate")
    emit("v_mul_lo_u32", u, q, ub)
    emit("v_sub_u32", rem, ua, u)
    for _ in range(2):  # the estimate is low by at most 2
        emit("v_cmp_ge_u32", VCC, rem, ub, defs=(VCC,))
        emit("v_sub_u32", u, rem, ub)
        emit("v_cndmask_b32", rem, rem, u, VCC)
        emit("v_add_u32", u, 1, q)
        emit("v_cndmask_b32", q, q, u, VCC)
    emit("v_xor_b32", w, sa, sb, comment="the quotient's sign")
    emit("v_xor_b32", q, q, w)
    emit("v_sub_u32", q, q, w, comment="truncated quotient")
    emit("v_xor_b32", rem, rem, sa)
    emit("v_sub_u32", rem, rem, sa, comment="its remainder (the sign of a)")
    emit("v_xor_b32", w, rem, b)
    emit("v_cmp_gt_i32", VCC, 0, w, defs=(VCC,), comment="signs of remainder and b differ...")
    flags = ev.b.s.alloc(2, align=2, what="a nonzero remainder")
    emit("v_cmp_ne_u32", flags, 0, rem, defs=(flags,))
    emit("s_and_b64", VCC, VCC, flags, defs=(VCC,), uses=(VCC, flags), comment="...and it is not 0")
    ev.b.s.free(flags)
    emit("v_add_u32", u, -1, q)
    emit("v_cndmask_b32", q, q, u, VCC, comment="floor")
    emit("v_add_u32", u, rem, b)
    emit("v_cndmask_b32", rem, rem, u, VCC)
    return q, rem


INT_LOWERINGS = {
    "add": _int_vop2("v_add_u32", True),
    "sub": _int_vop2("v_sub_u32", False, reverse="v_subrev_u32"),
    "mul": _int_mul,
    "max": _int_vop2("v_max_i32", True),
    "min": _int_vop2("v_min_i32", True),
    "neg": _int_neg,
    "abs": _int_abs,
    **{op: _compare(op, _INT_COMPARE, "i32") for op in _INT_COMPARE},
    "if_then_else": _int_if_then_else,
}


LOWERINGS = {
    "floordiv": _floordiv,
    "mod": _mod,
    "bitand": _int_vop2("v_and_b32", True),
    "bitor": _int_vop2("v_or_b32", True),
    "bitxor": _int_vop2("v_xor_b32", True),
    "shl": _shift("v_lshlrev_b32"),
    "shr": _shift("v_ashrrev_i32"),
    "bitnot": _bitnot,
    "add": lambda ev, out, a, b: ev._emit2("add", a, b, out),
    "sub": lambda ev, out, a, b: ev._emit2("sub", a, b, out),
    "mul": lambda ev, out, a, b: ev._emit2("mul", a, b, out),
    "div": _divide_or_scale,
    "neg": _neg,
    "max": lambda ev, out, a, b: ev._max_min("max", a, b, out),
    "min": lambda ev, out, a, b: ev._max_min("min", a, b, out),
    "abs": _abs,
    "exp": _exp,
    "exp2": _exp2,
    "log": _log,
    "log2": _log2,
    "sqrt": _sqrt,
    "rsqrt": _rsqrt,
    "tanh": _tanh,
    "sigmoid": _sigmoid,
    "erf": _erf,
    **{op: _compare(op) for op in _COMPARE},
    "and": _logic("and"),
    "or": _logic("or"),
    "not": _not,
    "if_then_else": _if_then_else,
}


def _element_index(ctx: Context, e: N.ElemRef, r: int) -> tuple:
    """Index of a global element read at fragment element r: parallel indices -> layout coords."""
    store = ctx.current_parallel
    coords = ctx.layouts[store.buffer].coords(r, ctx.threads)
    subs = dict(zip(store.indices, coords))
    return tuple(sympy.expand(substitute(i, subs)) for i in e.index)


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
        found = register_of(x, tuple(substitute(i, subs) for i in e.index))
        if found is None:
            raise CompileError(f"internal: {e.buffer.name} ({x.describe()}) does not hold the element "
                               f"T.Parallel reads for element {r} of {store.buffer.name} ({loop.describe()})",
                               location=store.loc)
        out.append(found)
    return out


def _prefetch_global_reads(ctx: Context, s: TileOp, elems: int) -> dict:
    """{(global buffer, index): VGPR with the element's held value} for every global element the loop reads, all
    loads issued before the first conversion (an int64 element: its low word)."""
    out = {}
    refs = [e for e in N.walk_expr(s.value) if isinstance(e, N.ElemRef) and e.buffer.scope == N.GLOBAL]
    for ref in refs:
        g = ref.buffer
        mask = list(range(1, len(g.shape)))
        width = min(g.dtype.bytes, 4)
        for r in range(elems):
            index = _element_index(ctx, ref, r)
            key = (g, index)
            if key in out:
                continue
            reg = ctx.b.v.alloc()
            ctx.access.load(reg, width, g, index, mask, comment=f"{g.name}[...] for element {r}",
                            op=dtype_convert.load_opcode(g.dtype, width))
            out[key] = reg
    for (g, _), reg in out.items():
        if g.dtype.is_16bit:
            unpack_16bit_to_f32(ctx.b, reg, reg, False, g.dtype)
        elif g.dtype.is_fp8:
            ctx.b.emit(f"v_cvt_f32_{dtype_convert.fp8_mnemonic(g.dtype)}", reg, reg)
    return out


# ---- a T.Parallel that only feeds the next reduction ------------------------------------------------------

def _bodies(stmts):
    """Every statement list of `stmts`, nested loop bodies included."""
    yield stmts
    for s in stmts:
        for body in s.bodies():
            yield from _bodies(body)


def _fusable(ctx: Context, p, r, readers: dict) -> bool:
    """`p` (T.Parallel) writes all of an unpacked fp32 fragment from other buffers only, and `r`, the reduction right
    after it, is the one statement that reads it: each element can be computed where the reduction uses it."""
    buf = p.buffer
    lay = ctx.layouts.get(buf)
    refs = [e for e in N.walk_expr(p.value) if isinstance(e, N.ElemRef)]
    return (r.src is buf and buf.dtype == float32 and lay is not None and not lay.packed and lay.regs.file == "v"
            and tuple(p.extents) == tuple(buf.shape) and readers.get(buf) == [r]
            and all(e.buffer is not buf and e.buffer.scope != N.GLOBAL for e in refs))


def fused_producers(ctx: Context) -> dict:
    """{Reduce: T.Parallel} for each T.Parallel whose fragment only the reduction right after it reads (RMSNorm's
    `squares[i, j] = x[i, j] * x[i, j]; T.reduce_sum(squares, ...)`). The reduction computes each element as it
    combines it, so the fragment's registers live one element at a time instead of all at once (32 registers a
    thread for a row of 8192 over 256 threads); the values and their order are those of the unfused code."""
    if ctx.fused is None:
        readers: dict = {}
        for body in _bodies(ctx.kernel.body):
            for s in body:
                if s.bodies():
                    continue  # a loop's reads are its body's, counted there
                for region in s.reads():
                    readers.setdefault(region.buffer, []).append(s)
        ctx.fused = {}
        for body in _bodies(ctx.kernel.body):
            for p, r in zip(body, body[1:]):
                if p.opname == "parallel" and r.opname == "reduce" and _fusable(ctx, p, r, readers):
                    ctx.fused[r] = p
    return ctx.fused


# the value a T.fill gives a reduction's destination that combining with clear=False leaves every result as it is:
# maximum(x, -inf) == x and minimum(x, +inf) == x for every x, NaN and signed zeros included
_IDENTITIES = {"max": -math.inf, "min": math.inf}


def identity_fills(ctx: Context) -> dict:
    """{Reduce: Fill} for each `T.fill(dst, identity)` right before a `T.reduce_*(src, dst, clear=False)` of an fp32
    VGPR fragment (flash attention's `T.fill(scores_max, -T.infinity(...)); T.reduce_max(acc_s, scores_max,
    clear=False)`): the reduction gives what clear=True gives, writing dst directly, and the fill, which it
    overwrites, emits nothing (a v_mov, a combine and a copy of the result fewer a row, every trip)."""
    if ctx.identity_filled is None:
        ctx.identity_filled = {}
        seen = Counter(id(x) for body in _bodies(ctx.kernel.body) for x in body)  # (a statement placed twice: no)
        for body in _bodies(ctx.kernel.body):
            for f, r in zip(body, body[1:]):
                if f.opname == "fill" and r.opname == "reduce" and not r.clear and f.buffer is r.dst \
                        and seen[id(f)] == seen[id(r)] == 1 \
                        and r.op in _IDENTITIES and float(f.value) == _IDENTITIES[r.op] \
                        and _direct_f32(ctx, r.dst) and _direct_f32(ctx, r.src):
                    ctx.identity_filled[r] = f
    return ctx.identity_filled


def _direct_f32(ctx: Context, buf) -> bool:
    lay = ctx.layouts.get(buf)
    return buf.scope == N.FRAGMENT and buf.dtype == float32 and lay is not None and not lay.packed \
        and lay.regs.file == "v"


def is_fused_producer(ctx: Context, p) -> bool:
    """True for a T.Parallel that its reduction evaluates (its own lowering emits nothing)."""
    return any(q is p for q in fused_producers(ctx).values())


def lower_parallel(ctx: Context, s: TileOp):
    if is_fused_producer(ctx, s):
        return  # the reduction right after computes each element where it uses it (passes/reduce.py)
    paths = _uniform_select_paths(ctx, s)
    if paths is None:
        _lower_elements(ctx, s)
        return
    _lower_with_uniform_paths(ctx, s, paths)


def _uniform_select_paths(ctx: Context, s: TileOp):
    """For `x[i, j] = T.if_then_else(a OP b, c1, c2)` with a and b index expressions, c1 and c2 constants and x an
    fp32 fragment in VGPRs (causal attention's mask `bx * block_M + i >= k * block_N + j`): (SGPR or int U, OP,
    threshold where all elements are true, threshold where all are false) such that every element's a - b is
    U + an offset in [lo, hi] (the lanes' part and the elements' constants). Where U says so at run time, a scalar
    branch writes c1 (or c2) in every element: the tiles of a causal loop below the diagonal (all but one or two)
    take a move an element instead of a compare and a select. None where the statement is not of that form, the
    elements differ by more than constants, or nothing uniform varies (the compiler folds that case itself)."""
    e = s.value
    if not (isinstance(e, N.Call) and e.fn == "if_then_else") or not all(
            isinstance(x, N.Const) and isinstance(x.value, (int, float)) for x in e.args[1:]):
        return None
    cond = e.args[0]
    if not (isinstance(cond, N.Call) and cond.fn in ("lt", "le", "gt", "ge")
            and all(isinstance(x, (N.IndexValue, N.Const)) for x in cond.args)):
        return None
    lay = ctx.layouts[s.buffer]
    if lay.regs.file != "v" or lay.packed or s.buffer.dtype != float32:
        return None
    ctx.current_parallel = s
    ev = ElementEvaluator(ctx, {})
    pairs = [tuple(ev._index_expr(x, r) for x in cond.args) for r in range(lay.elems)]
    folded = all(ev._index_comparison(cond, r) is not None for r in range(lay.elems))
    ctx.current_parallel = None
    if folded or any(a is None or b is None for a, b in pairs):
        return None
    split = [sympy.expand(a - b).as_coeff_Add() for a, b in pairs]
    shared = {rest for _, rest in split}
    if len(shared) != 1:
        return None
    lanes = ctx.b.lane_symbols
    terms = sympy.Add.make_args(shared.pop())
    uniform = sympy.Add(*(t for t in terms if not t.free_symbols & lanes))
    lane_span = value_range(sympy.Add(*(t for t in terms if t.free_symbols & lanes)),
                            {t: (0, ctx.threads - 1) for t in lanes})
    if uniform == 0 or lane_span is None:
        return None
    constants = [int(c) for c, _ in split]
    lo, hi = lane_span[0] + min(constants), lane_span[1] + max(constants)
    # all true / all false as U >= t (ge-style thresholds) or U <= t (le-style): (op, t_true, t_false)
    op = cond.fn
    thresholds = {"ge": ("ge", -lo, "lt", -hi), "gt": ("gt", -lo, "le", -hi),
                  "le": ("le", -hi, "gt", -lo), "lt": ("lt", -hi, "ge", -lo)}[op]
    return ctx.lower.operand(uniform), thresholds


def _lower_with_uniform_paths(ctx: Context, s: TileOp, paths):
    """`SCC = all true; s_cbranch_scc1 TRUE; SCC = all false; s_cbranch_scc1 FALSE; elements; s_branch END; TRUE:
    c1 everywhere; s_branch END; FALSE: c2 everywhere; END:` in a frame of its own, so that what the element path
    computes for reuse lands before the first branch (passes/control.py says why)."""
    from ..amdgcn.builder import Frame
    from ..amdgcn.isa import Inst, LABEL

    b = ctx.b
    uniform, (true_op, true_at, false_op, false_at) = paths
    labels = {"true": b.label("all_true"), "false": b.label("all_false"), "end": b.label("end_select")}
    frame = Frame([])
    b.frames.append(frame)
    try:
        if not isinstance(uniform, Reg):
            uniform = b.sgpr_constant(uniform)
        for which, op, at in (("true", true_op, true_at), ("false", false_op, false_at)):
            b.emit(f"s_cmp_{op}_i32", uniform, int(at), comment=f"every element {which}?")
            b.emit("s_cbranch_scc1", labels[which])
        _lower_elements(ctx, s)
        for which, value in (("true", s.value.args[1]), ("false", s.value.args[2])):
            b.emit("s_branch", labels["end"])
            b.frames[-1].insts.append(Inst(labels[which], kind=LABEL))
            for r in range(ctx.layouts[s.buffer].elems):
                ctx.write_f32(s.buffer, r, _f32(float(value.value)))
        b.frames[-1].insts.append(Inst(labels["end"], kind=LABEL))
    finally:
        b.frames.pop()
        b.frames[-1].insts.extend(frame.insts)


def _lower_elements(ctx: Context, s: TileOp):
    ctx.current_parallel = s
    lay = ctx.layouts[s.buffer]
    prefetched = _prefetch_global_reads(ctx, s, lay.elems)
    ev = ElementEvaluator(ctx, prefetched, share_rows=True)
    if _scaled_in_pairs(ctx, s, lay, ev):
        ctx.current_parallel = None
        return
    direct = lay.regs.file == "v" and not lay.packed
    step = 2 if lay.packed else 1
    dtype = s.buffer.dtype
    kind = dtype_convert.kind_of(dtype)
    source = s.value.buffer.dtype if isinstance(s.value, N.ElemRef) else None
    for r in range(0, lay.elems, step):
        values = []
        for e in range(step):
            dst = ctx.element_reg(s.buffer, r + e) if direct else None
            value, own = ev.eval_value(s.value, r + e, dst, want=kind)
            if own != kind or dtype.bytes != 4 and not dtype.is_16bit:  # a conversion T.cast's rules make
                value = dtype_convert.convert(ctx.b, ev.temp, value, own, dtype, pack16=False, src_dtype=source)
            values.append(value)
        if not (direct and isinstance(values[0], float)):  # (a constant goes straight into a VGPR element)
            values = [ev.vgpr(v) if not _is_vgpr(v) else v for v in values]
        if lay.packed:
            ctx.write_f32(s.buffer, r, values[0], values[1])
        else:
            ctx.write_f32(s.buffer, r, values[0])
        ev.free_temps()
    ev.free_row_values()
    for reg in prefetched.values():
        ctx.b.v.free(reg)
    ctx.current_parallel = None


def _scaled_in_pairs(ctx: Context, s: TileOp, lay, ev: ElementEvaluator) -> bool:
    """`x[i, j] = x[i, j] * y[i]` (or `y[i] * x[i, j]`) on an fp32 fragment in VGPRs, y an fp32 fragment read at
    fewer indices (flash attention's rescale of its output by each row's factor): two elements an instruction,
    v_pk_mul_f32 on register pairs (gfx90a and later; the emulated device runs it, tests/test_isa_table.py assembles
    it), y's one register read for both halves (op_sel_hi) where both elements take the same factor. Returns False,
    emitting nothing, where the statement has another form or x's registers do not pair up, or where the kernel runs
    MFMAs on an arch whose packed-f32 ops would wait out their holds (Arch.packed_f32_scales)."""
    value, x = s.value, s.buffer
    if ctx.gemm_plans and not ctx.b.arch.packed_f32_scales:  # Arch.packed_f32_scales: under MFMAs, one op each
        return False
    if not (isinstance(value, N.Call) and value.fn == "mul" and len(value.args) == 2 and x.dtype == float32
            and lay.regs.file == "v" and not lay.packed and lay.elems % 2 == 0 and lay.regs.count >= 2):
        return False
    own = [a for a in value.args if isinstance(a, N.ElemRef) and a.buffer is x and tuple(a.index) == tuple(s.indices)]
    factor = [a for a in value.args if not any(a is o for o in own)]
    if len(own) != 1 or len(factor) != 1 or not isinstance(factor[0], N.ElemRef):
        return False
    y = factor[0]
    y_lay = ctx.layouts.get(y.buffer)
    if y.buffer.scope != N.FRAGMENT or y.buffer.dtype != float32 or y_lay is None or y_lay.packed \
            or y_lay.regs.file != "v" or tuple(y.index) == tuple(s.indices):
        return False
    pairs = [(ctx.element_reg(x, r), ctx.element_reg(x, r + 1), ev.register_of(y, r), ev.register_of(y, r + 1))
             for r in range(0, lay.elems, 2)]
    base = lay.regs.index
    if any(b0.index != a0.index + 1 or (a0.index - base) % 2 or f0 != f1 for a0, b0, f0, f1 in pairs):
        return False  # (consecutive factors in one pair would also do; flash attention's rows need only this)
    b = ctx.b
    lows = {}  # y's register -> a VGPR pair holding it in its low half
    for a0, _, f, _ in pairs:
        if f not in lows:
            # one pair for this fragment's row factor f in every such statement (flash attention's rescale, once a
            # tile): the copies into it then name one register, which amdgcn/coalesce.py merges with the factor's
            if (x, f) not in ctx.row_factor_pairs:
                ctx.row_factor_pairs[(x, f)] = b.v.alloc(2, align=2, what="row factor pair")
            lows[f] = ctx.row_factor_pairs[(x, f)]
            b.emit("v_mov_b32", lows[f][0], y_lay.regs[f], defs=(lows[f][0],), uses=(y_lay.regs[f],))
        pair = lay.regs[a0.index - base:a0.index - base + 2]
        b.emit("v_pk_mul_f32", pair, pair, lows[f], suffix="op_sel_hi:[1,0]", defs=(pair,), uses=(pair, lows[f]))
    for reg in lows.values():
        b.v.free(reg)
    return True


def lower_fill(ctx: Context, s: TileOp):
    if any(f is s for f in identity_fills(ctx).values()):
        return  # the reduction right after writes every element (identity_fills)
    lay = ctx.layouts[s.buffer]
    if s.buffer.dtype.is_int or s.buffer.dtype.is_fp8:  # the value converted as T.cast converts it
        value = elemfn.convert_constant(s.buffer.dtype.name, s.value)
        if lay.regs.file == "a":  # an int32 T.gemm accumulator (int8 operands)
            _fill_int_accumulator(ctx, lay.regs, value)
            return
        for i in range(lay.nregs):
            ctx.b.valu("v_mov_b32", lay.regs[i], value)
        return
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


def _fill_int_accumulator(ctx: Context, acc: Reg, value: int):
    """Set every AGPR of an int32 accumulator to `value`: 0 has the bits of +0.0, so the MFMA fill of
    `_fill_accumulator` serves; another value goes through a VGPR, one v_accvgpr_write each."""
    if value == 0:
        _fill_accumulator(ctx, acc, 0.0)
        return
    b = ctx.b
    src = b.v.alloc(what="accumulator fill value")
    b.valu("v_mov_b32", src, value)
    for i in range(acc.count):
        b.valu("v_accvgpr_write_b32", acc[i], src)
    b.v.free(src)


def _is_inline_f32(value: float) -> bool:
    """Whether the f32 operand `value` is an inline constant (isa.float_literal spells the others as 32-bit literal
    bits; an MFMA's srcC takes no literal)."""
    return not float_literal(value).startswith("0x")


def torch_bits_16(value: float, dtype) -> int:
    """The 16-bit pattern of `value` in bf16/f16 (round to nearest even), via torch."""
    import torch

    t = torch.tensor([value], dtype=torch.float32).to(getattr(torch, dtype.name))  # (a DType's name is torch's)
    return int(t.view(torch.int16).item()) & 0xFFFF

