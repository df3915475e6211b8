"""SymPy integer expressions -> SALU/VALU instructions, with common-subexpression elimination.

Uniform values (block ids, loop variables, runtime scalars) live in SGPRs; anything that depends on
the thread id lives in VGPRs. Powers of two become shifts and masks; other constant divisors use a
multiply-high by a magic number. Every (expression, register file) pair is computed once, in the
outermost loop frame where its symbols exist (loop-invariant code motion for free).
"""
from __future__ import annotations

import math

import sympy

from ..errors import CompileError
from .builder import KernelBuilder
from .isa import Reg, is_inline_int
from .symcache import free_symbols, memo, sym

MASK32 = (1 << 32) - 1
_MAGIC_DIVIDEND_LIMIT = 1 << 16  # floor(n / d) by multiply-high is exact for n, d < 2**16


def is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def log2(n: int) -> int:
    return n.bit_length() - 1


class Xor(sympy.Function):
    """a ^ b of two non-negative 32-bit integers, an atom of address expressions (one v_xor_b32 / s_xor_b32).

    The LDS swizzles (passes/gemm_plan.py) are XORs of a chunk index with a few row bits. Written as arithmetic
    (each bit as Mod(floor(a / 2^k) + floor(b / 2^k), 2)), a swizzled base took ~40 VALU and most of the address
    lowering's SymPy time; as an atom it is one instruction, and the analyses bound it (value_range) or evaluate
    it (memory._lane_values, lambdify through _numpycode) like the other atoms."""

    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, a, b):
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) ^ int(b))
        if b.is_zero:
            return a
        if a.is_zero:
            return b
        return None

    def _numpycode(self, printer):
        a, b = (printer._print(x) for x in self.args)
        return f"numpy.bitwise_xor(numpy.int64({a}), numpy.int64({b}))"


# Pure functions of SymPy expressions are memoised (see symcache.py): the same address expressions come back for
# every ds_read, ds_write and store of a kernel.
@memo
def split_floor_div(expr):
    """(numerator, divisor) of floor(x / d), or None."""
    if isinstance(expr, sympy.floor):
        arg = expr.args[0]
        coeff, rest = arg.as_coeff_Mul()
        if coeff.is_Rational and not coeff.is_Integer and coeff > 0:  # floor(p/q * x)
            return coeff.p * rest, int(coeff.q)
        terms = [t.as_coeff_Mul() for t in sympy.Add.make_args(arg)]
        if all(c.is_Rational and not r.is_Mul for c, r in terms):
            # a sum of rational multiples of atoms (floor(x/4 + 3/2)): the common denominator, without the
            # cost of sympy.together (which gives the same numerator for such sums; it would also factor
            # products of symbols, hence the guard)
            den = math.lcm(*(int(c.q) for c, _ in terms))
            return (sympy.Add(*(c * den * r for c, r in terms)), den) if den > 1 else None
        num, den = sympy.fraction(sympy.together(arg))
        if den.is_Integer and den > 1:
            return num, int(den)
    return None


@memo  # the lane offsets and loop advances of a tile's accesses come back with each access's constant
def add_constant(expr, const: int):
    """expr + const, the same SymPy object (equal, same hash and args) that `expr + const` builds.

    SymPy's Add.flatten re-sorts and re-examines every term of the sum (~0.1-0.3 ms for an XOR-swizzled address);
    when `expr` holds no number, the canonical sum is that number followed by expr's terms, already in canonical
    order, which is built directly here (tests/test_lowering_memo.py checks it against SymPy)."""
    if const == 0:
        return expr
    if isinstance(expr, sympy.Add):
        if expr.args[0].is_Number:
            return expr + const
        return expr._new_rawargs(sympy.Integer(const), *expr.args)
    if isinstance(expr, (sympy.Mul, sympy.Symbol, sympy.floor, sympy.Mod)) and expr.is_commutative:
        return sympy.Add._from_args((sympy.Integer(const), expr), True)
    return expr + const


def split_const(expr):
    """(constant int, rest) of an expression."""
    expr = sym(expr)
    c, rest = expr.as_coeff_Add()
    if not c.is_Integer:
        return 0, expr
    return int(c), rest


def linear_form(expr, scale: int = 1, out: dict | None = None) -> dict:
    """expr * scale as {atom: integer coefficient} (atom 1 holds the constant).

    Distributes integer factors over sums, nothing else (floor, Mod and products of symbols stay
    atoms): the cheap part of sympy.expand that address splitting needs."""
    out = {} if out is None else out
    for atom, coeff in _linear_terms(sym(expr)):
        out[atom] = out.get(atom, 0) + scale * coeff
    return out


@memo  # the accesses of one tile share most of their terms
def _linear_terms(expr) -> tuple:
    """linear_form(expr) as (atom, coefficient) pairs, in the order the atoms first appear."""
    if expr.is_Integer:
        return ((sympy.S.One, int(expr)),)
    if isinstance(expr, sympy.Add):
        form: dict = {}
        for term in expr.args:
            for atom, coeff in _linear_terms(term):
                form[atom] = form.get(atom, 0) + coeff
        return tuple(form.items())
    if isinstance(expr, sympy.Mul):
        coeff, rest = expr.as_coeff_Mul()
        if coeff.is_Integer and coeff != 1:
            return tuple((atom, int(coeff) * c) for atom, c in _linear_terms(rest))
    return ((expr, 1),)


def split_uniform(expr, lane_symbols):
    """(uniform part, lane-varying part, constant) of a sum."""
    return split_linear(linear_form(expr), lane_symbols)


def split_linear(form: dict, lane_symbols):
    """(uniform part, lane-varying part, constant) of a linear form."""
    terms = tuple((atom, coeff) for atom, coeff in form.items() if atom is not sympy.S.One and coeff != 0)
    return (*_split_terms(terms, frozenset(lane_symbols)), form.get(sympy.S.One, 0))


@memo  # the accesses of one tile (the epilogue's stores, a copy's runs) differ in their constants only
def _split_terms(terms: tuple, lane_symbols: frozenset) -> tuple:
    """(uniform sum, lane-varying sum) of (atom, integer coefficient) terms."""
    uniform, varying = [], []
    for atom, coeff in terms:
        (varying if free_symbols(atom) & lane_symbols else uniform).append(coeff * atom)
    return sympy.Add(*uniform), sympy.Add(*varying)


def value_range(expr, ranges: dict):
    """(lowest, highest) value of an integer expression whose symbols lie in `ranges` ({symbol: (lo,
    hi)}), by interval arithmetic (a bound, exact for the linear address forms tilegcn builds), or
    None when a symbol's range is unknown or the expression has another form."""
    return _value_range(sym(expr), tuple(ranges.items()))


@memo
def _value_range(expr, ranges: tuple):
    if expr.is_Integer:
        return int(expr), int(expr)
    if expr.is_Symbol:
        return dict(ranges).get(expr)
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        parts = [_value_range(a, ranges) for a in expr.args]
        if None in parts:
            return None
        lo, hi = parts[0]
        for plo, phi in parts[1:]:
            if isinstance(expr, sympy.Add):
                lo, hi = lo + plo, hi + phi
            else:
                corners = (lo * plo, lo * phi, hi * plo, hi * phi)
                lo, hi = min(corners), max(corners)
        return lo, hi
    div = split_floor_div(expr)
    if div is not None:
        r = _value_range(div[0], ranges)
        return None if r is None else (r[0] // div[1], r[1] // div[1])
    if isinstance(expr, sympy.Mod) and expr.args[1].is_Integer and expr.args[1] > 0:
        return 0, int(expr.args[1]) - 1
    if isinstance(expr, Xor):
        return _xor_range(*(_value_range(a, ranges) for a in expr.args))
    return None


def _xor_range(ra, rb):
    """Bounds of a ^ b for a, b in ranges ra, rb (non-negative): the XOR changes only the bits below the other
    operand's highest bit, so each operand's range widened over those bits bounds it; the tighter of the two."""
    if ra is None or rb is None or ra[0] < 0 or rb[0] < 0:
        return None
    bounds = []
    for (lo, hi), (_, other_hi) in ((ra, rb), (rb, ra)):
        low_bits = (1 << other_hi.bit_length()) - 1
        bounds.append((lo & ~low_bits, hi | low_bits))
    return max(b[0] for b in bounds), min(b[1] for b in bounds)


class ExprLowering:
    def __init__(self, b: KernelBuilder):
        self.b = b
        self._depth = 0  # nesting of vgpr() calls
        self._temps: dict = {}  # intermediate values of the outermost vgpr() call in progress
        self._lanes = frozenset()  # the lane symbols, as the outermost vgpr() call in progress found them

    # -- SGPR (uniform) -------------------------------------------------------------------------
    def sgpr(self, expr) -> Reg | int:
        """A uniform expression as an int (constant) or an SGPR."""
        expr = sym(expr)
        if expr.is_Integer:
            return int(expr)
        hit = self.b.cse_get("s", expr)
        if hit is not None:
            return hit
        if expr in self.b.symbol_regs:
            return self.b.symbol_regs[expr]
        if free_symbols(expr) & self.b.lane_symbols:
            raise CompileError(f"internal: {expr} is not uniform")
        frame = self.b.frame_of(expr)
        out = self.b.alloc_in_frame("s", frame)
        self._sgpr_into(out, expr, frame)
        self.b.cse_put("s", expr, out, frame)
        return out

    def sgpr64(self, expr) -> Reg | int:
        """A uniform byte offset as an int or a 64-bit SGPR pair, computed modulo 2^64.

        Each term of the linear form is an atom (a symbol, floor, Mod: 32-bit values, as sgpr()
        computes them) or a product of atoms, times an integer coefficient; products are widened
        to 64 bits (s_mul_hi_u32) and terms added with a carry, so offsets past 4 GiB are exact.
        A term with a negative coefficient is refused: the offset could go below the tensor's start,
        where a V# cannot range-check it."""
        expr = sym(expr)
        if expr.is_Integer:
            return int(expr)
        hit = self.b.cse_get("s64", expr)
        if hit is not None:
            return hit
        form = linear_form(expr)
        const = form.pop(sympy.S.One, 0)
        negative = [f"{c}*{a}" for a, c in form.items() if c < 0]
        if negative:
            raise CompileError(f"tile origin {expr} (bytes) decreases as {', '.join(negative)} grows: tilegcn "
                               "needs global tile origins that do not decrease with block ids, loop "
                               "variables and scalars (the negative part cannot be range-checked)")
        frame = self.b.frame_of(expr)
        out = self.b.alloc_in_frame("s", frame, 2, align=2, what="64-bit offset")
        emit = lambda *a, **k: self.b.emit(*a, frame=frame, **k)  # noqa: E731
        terms = [(atom, coeff) for atom, coeff in form.items() if coeff]
        self._term64_into(out, *terms[0], emit)
        if len(terms) > 1:
            tmp = self.b.s.alloc(2, align=2)
            for atom, coeff in terms[1:]:
                self._term64_into(tmp, atom, coeff, emit)
                emit("s_add_u32", out[0], out[0], tmp[0])
                emit("s_addc_u32", out[1], out[1], tmp[1])
            self.b.s.free(tmp)
        if const:
            emit("s_add_u32", out[0], out[0], const & MASK32)
            emit("s_addc_u32", out[1], out[1], (const >> 32) & MASK32)
        self.b.cse_put("s64", expr, out, frame)
        return out

    def _term64_into(self, out: Reg, atom, coeff: int, emit):
        """out (a pair) = atom * coeff: a product of 32-bit atoms widened to 64 bits."""
        factors = list(sympy.Mul.make_args(atom)) if isinstance(atom, sympy.Mul) else [atom]
        emit("s_mov_b32", out[0], self.sgpr(factors[0]))
        high_zero = not _signed(factors[0])
        if not high_zero:
            emit("s_ashr_i32", out[1], out[0], 31, comment="a signed scalar: sign-extend")
        for f in factors[1:]:
            self._mul64(out, self.sgpr(f), high_zero, emit, signed=_signed(f))
            high_zero = False
        if coeff != 1:
            self._mul64(out, coeff, high_zero, emit)
        elif high_zero:
            emit("s_mov_b32", out[1], 0)

    def _mul64(self, x: Reg, factor, high_zero: bool, emit, signed: bool = False):
        """x (a pair) *= factor (an SGPR, `signed` int32 or unsigned, or an int below 2^64), modulo 2^64."""
        if isinstance(factor, int) and is_pow2(factor) and factor < 1 << 32:
            if high_zero:
                emit("s_mov_b32", x[1], 0)
            emit("s_lshl_b64", x, x, log2(factor))
            return
        lo, hi = (factor & MASK32, factor >> 32) if isinstance(factor, int) else (factor, 0)
        tmp = self.b.s.alloc()
        if high_zero:
            emit("s_mul_hi_u32", x[1], x[0], lo)
        else:
            emit("s_mul_i32", x[1], x[1], lo)
            emit("s_mul_hi_u32", tmp, x[0], lo)
            emit("s_add_u32", x[1], x[1], tmp)
        if signed:
            emit("s_ashr_i32", tmp, factor, 31)
            hi = tmp
        if hi:
            emit("s_mul_i32", tmp, x[0], hi)
            emit("s_add_u32", x[1], x[1], tmp)
        emit("s_mul_i32", x[0], x[0], lo)
        self.b.s.free(tmp)

    def _sgpr_into(self, out: Reg, expr, frame: int):
        emit = lambda *a, **k: self.b.emit(*a, frame=frame, **k)  # noqa: E731
        if isinstance(expr, sympy.Add):
            const, rest = split_const(expr)
            terms = [self.sgpr(t) for t in sympy.Add.make_args(rest)]
            emit("s_add_u32", out, terms[0], terms[1] if len(terms) > 1 else const)
            for t in terms[2:]:
                emit("s_add_u32", out, out, t)
            if len(terms) > 1 and const:
                emit("s_add_u32", out, out, const)
            return
        if isinstance(expr, sympy.Mul):
            coeff, rest = expr.as_coeff_Mul()
            coeff = int(coeff)
            factors = [self.sgpr(f) for f in sympy.Mul.make_args(rest)]
            if coeff == 1 and len(factors) >= 2:
                emit("s_mul_i32", out, factors[0], factors[1])
                factors = factors[2:]
            else:
                first = factors.pop(0)
                if is_pow2(coeff):
                    emit("s_lshl_b32", out, first, log2(coeff))
                else:
                    emit("s_mul_i32", out, first, coeff)
            for f in factors:
                emit("s_mul_i32", out, out, f)
            return
        if _is_power(expr):
            base = self.sgpr(expr.base)
            emit("s_mul_i32", out, base, base)
            for _ in range(int(expr.exp) - 2):
                emit("s_mul_i32", out, out, base)
            return
        div = split_floor_div(expr)
        if div is not None:
            num, d = div
            src = self.sgpr(num)
            if is_pow2(d):
                emit("s_lshr_b32", out, src, log2(d))
            else:
                emit("s_mul_hi_u32", out, src, magic(d))
            return
        if isinstance(expr, sympy.Mod):
            x, d = expr.args
            d = int(d)
            if is_pow2(d):
                emit("s_and_b32", out, self.sgpr(x), d - 1)
            else:
                q = self.sgpr(sympy.floor(x / d))
                emit("s_mul_i32", out, q, -d)
                emit("s_add_u32", out, out, self.sgpr(x))
            return
        if isinstance(expr, Xor):
            emit("s_xor_b32", out, *(self.sgpr(a) for a in expr.args))
            return
        if isinstance(expr, sympy.ceiling):  # T.ceildiv of a device value: ceil(x / d) = floor((x + d - 1) / d)
            num, den = expr.args[0].as_numer_denom()
            if den.is_Integer and den > 0:
                emit("s_mov_b32", out, self.sgpr(sympy.floor((num + den - 1) / den)))
                return
        if isinstance(expr, (sympy.Min, sympy.Max)):  # T.min / T.max of indices (device loop bounds): signed
            op = "s_min_i32" if isinstance(expr, sympy.Min) else "s_max_i32"
            args = [self.sgpr(a) for a in expr.args]
            emit(op, out, args[0], args[1])
            for a in args[2:]:
                emit(op, out, out, a)
            return
        raise CompileError(f"cannot lower uniform index expression {expr}")

    # -- VGPR (per lane) ------------------------------------------------------------------------
    def vgpr(self, expr) -> Reg:
        """Any expression in a VGPR (uniform ones are moved in).

        The result is kept for reuse (CSE). Intermediate values computed on the way are freed once
        the outermost value is done, except simple ones (`tid % 64`, `tid // 64`) that many addresses
        share: long address chains (the XOR swizzle) would otherwise hold registers for a whole loop."""
        return self._vgpr(sym(expr))

    def _vgpr(self, expr) -> Reg:
        """vgpr() of a SymPy expression (the operands _vgpr_shape lists are)."""
        b = self.b
        outer = len(b.frames) == 1
        hit = (b.frames[0].cse.get(("v", expr)) if outer else b.cse_get("v", expr)) or \
            (self._temps.get(expr) if self._temps else None)
        if hit is not None:
            return hit
        if expr.is_Symbol:  # symbol_regs holds symbols only
            hit = b.symbol_regs.get(expr)
            if hit is not None and hit.file == "v":
                return hit
        frame = 0 if outer else b.frame_of(expr)
        if self._depth == 0:
            self._lanes = self._lane_set()
        shape = _vgpr_shape(expr, self._lanes)
        if shape[0] is _SHIFTED:  # made by vgpr_plus, perhaps, under its key only
            hit = b.cse_get("v", _plus_key(shape[2], shape[1]))
            if hit is not None:
                return hit
        out = b.v.alloc()  # what alloc_in_frame("v", frame) gives
        self._depth += 1
        try:
            self._vgpr_into(out, expr, shape, frame)
        finally:
            self._depth -= 1
        if self._depth == 0 or shape[-1]:
            b.cse_put("v", expr, out, frame)
            if shape[0] is _SHIFTED:
                b.cse_put("v", _plus_key(shape[2], shape[1]), out, frame)
            if self._depth == 0:
                self._temps.clear()  # their registers end with their last use (regalloc): nothing to free
        else:
            self._temps[expr] = out
        return out

    def _lane_set(self) -> frozenset:
        """The builder's lane symbols, frozen (a memo key); they are only ever added to, so an equal count means the
        same set as last time."""
        if len(self._lanes) != len(self.b.lane_symbols):
            self._lanes = frozenset(self.b.lane_symbols)
        return self._lanes

    def vgpr_plus(self, base, const: int) -> Reg:
        """vgpr(add_constant(base, const)) without building that SymPy sum where `base` varies per lane and holds no
        number: such a sum is one v_add_u32 of `const` and base's VGPR (_SHIFTED), and the accesses of a tile (a
        copy's slots, the epilogue's runs, a gemm's fragment reads) are a few bases plus many integers. The value is
        kept in the CSE under (base, const) (_plus_key), which _vgpr consults too, so both paths find the same
        register, exactly when vgpr(add_constant(base, const)) would (the key is put and dropped with the value's)."""
        base = sym(base)
        b = self.b
        key = _plus_key(base, const)
        hit = b.cse_get("v", key) if const else None  # only shiftable bases have such keys (_SHIFTED's rest is)
        if hit is not None:
            return hit
        lanes = self._lane_set()
        if const == 0 or not _shiftable(base, lanes) or self._depth:
            return self._vgpr(add_constant(base, const))
        frame = b.frame_of(base) if len(b.frames) > 1 else 0
        out = b.v.alloc()
        self._depth += 1
        try:
            src = self._vgpr(base)  # as _vgpr_into lowers a _SHIFTED operand: nested, so temporaries stay temporary
        finally:
            self._depth -= 1
        b.valu("v_add_u32", out, const, src, frame=frame)
        b.cse_put("v", key, out, frame)
        self._temps.clear()
        return out

    def operand(self, expr):
        """An expression as a VALU operand: int constant, SGPR (uniform) or VGPR."""
        expr = sym(expr)
        if expr.is_Integer:
            return int(expr)
        if not free_symbols(expr) & self.b.lane_symbols:
            return self.sgpr(expr)
        return self._vgpr(expr)

    def _operands(self, kinds: tuple) -> list:
        """operand() of each (kind, term) that _vgpr_shape classified."""
        return [x if kind is _CONSTANT else self._vgpr(x) if kind is _LANE else self.sgpr(x) for kind, x in kinds]

    def _vop3_operand(self, expr):
        """VOP3 takes no 32-bit literal on gfx9: constants outside the inline range go to an SGPR."""
        x = self.operand(expr)
        if isinstance(x, int) and not is_inline_int(x):
            return self.b.sgpr_constant(x)
        return x

    def _vgpr_into(self, out: Reg, expr, shape: tuple, frame: int):
        b = self.b
        form = shape[0]
        if form is _UNIFORM:
            b.valu("v_mov_b32", out, self.operand(expr), frame=frame)
        elif form is _SHIFTED:  # a constant plus a sum that other addresses share
            b.valu("v_add_u32", out, shape[1], self._vgpr(shape[2]), frame=frame)
        elif form is _SUM:
            const, terms = shape[1], self._operands(shape[2])
            terms.sort(key=_is_vgpr)  # VGPR last (VOP2 src1)
            if const:
                terms.insert(0, const)
            acc = terms.pop()
            while terms:
                if len(terms) >= 2 and _vop3_legal(terms[-2:] + [acc]):
                    b_, c_ = terms.pop(), terms.pop()
                    b.valu("v_add3_u32", out, acc, b_, c_, frame=frame)
                else:
                    b.valu("v_add_u32", out, terms.pop(), acc, frame=frame)
                acc = out
            if acc is not out:
                b.valu("v_mov_b32", out, acc, frame=frame)
        elif form is _PRODUCT:
            coeff, factors = shape[1], self._operands(shape[2])
            factors.sort(key=_is_vgpr)
            acc = factors.pop()
            for f in factors:
                b.valu("v_mul_lo_u32", out, f, acc, frame=frame)
                acc = out
            if coeff != 1:
                if is_pow2(coeff):
                    b.valu("v_lshlrev_b32", out, log2(coeff), acc, frame=frame)
                else:
                    b.valu("v_mul_lo_u32", out, self._vop3_operand(coeff), acc, frame=frame)
                acc = out
            if acc is not out:
                b.valu("v_mov_b32", out, acc, frame=frame)
        elif form is _QUOTIENT:
            num, d = shape[1], shape[2]
            src = self._vgpr(num)
            if is_pow2(d):
                b.valu("v_lshrrev_b32", out, log2(d), src, frame=frame)
            else:
                b.valu("v_mul_hi_u32", out, b.sgpr_constant(magic(d)), src, frame=frame)
        elif form is _REMAINDER:
            x, d, quotient = shape[1], shape[2], shape[3]
            if quotient is None:
                b.valu("v_and_b32", out, d - 1, self._vgpr(x), frame=frame)
            else:
                q = self._vgpr(quotient)
                b.valu("v_mul_lo_u32", out, b.sgpr_constant(-d), q, frame=frame)
                b.valu("v_add_u32", out, self.operand(x), out, frame=frame)
        elif form is _XOR:
            terms = self._operands(shape[1])
            terms.sort(key=_is_vgpr)  # VGPR last (VOP2 src1)
            b.valu("v_xor_b32", out, *terms, frame=frame)
        else:
            raise CompileError(f"cannot lower index expression {expr}")


# What _vgpr_into does with a node, and the operands it needs, memoised per expression (and set of lane symbols):
# the lowering of a long address recomputes its subexpressions that are not simple for every address that contains
# them (see ExprLowering.vgpr), and asking SymPy again each time (as_coeff_Add and as_coeff_Mul build new objects,
# free_symbols walks the tree) cost more than the instructions' own bookkeeping.
_UNIFORM, _SHIFTED, _SUM, _PRODUCT, _QUOTIENT, _REMAINDER, _XOR, _UNSUPPORTED = (
    "uniform", "shifted", "sum", "product", "quotient", "remainder", "xor", "unsupported")
_CONSTANT, _SCALAR, _LANE = "constant", "scalar", "lane"  # operand kinds: int, SGPR, VGPR


@memo
def _vgpr_shape(expr, lanes: frozenset) -> tuple:
    """(form, its parts..., whether the value is simple enough to keep for other addresses (_is_simple))."""
    simple = _is_simple(expr)
    if not free_symbols(expr) & lanes:
        return _UNIFORM, simple
    # Sums and products read their number (SymPy keeps it first) and terms off `args`, as as_coeff_Add and
    # as_coeff_Mul do, without building the rest as a new SymPy object unless it is an operand itself (_SHIFTED).
    args = expr.args
    if isinstance(expr, sympy.Add):
        if args[0].is_Integer:  # a number, and lane terms (expr varies per lane): a shifted sum
            return _SHIFTED, int(args[0]), expr._new_rawargs(*args[1:]), simple
        return _SUM, 0, _operand_kinds(args, lanes), simple
    if isinstance(expr, sympy.Mul):
        if args[0].is_Number:
            return _PRODUCT, int(args[0]), _operand_kinds(args[1:], lanes), simple
        return _PRODUCT, 1, _operand_kinds(args, lanes), simple
    if _is_power(expr):  # x**n (SymPy's form of x*x, as sympy.expand leaves `(j % 3) * j`): a product of n x's
        return _PRODUCT, 1, _operand_kinds((expr.base,) * int(expr.exp), lanes), simple
    div = split_floor_div(expr)
    if div is not None:
        return _QUOTIENT, div[0], div[1], simple
    if isinstance(expr, sympy.Mod):
        x, d = expr.args
        d = int(d)
        return _REMAINDER, x, d, None if is_pow2(d) else sympy.floor(x / d), simple
    if isinstance(expr, Xor):
        return _XOR, _operand_kinds(args, lanes), simple
    return _UNSUPPORTED, simple


def _is_power(expr) -> bool:
    """x**n with n an int >= 2: SymPy's form of a product of equal factors."""
    return isinstance(expr, sympy.Pow) and expr.exp.is_Integer and expr.exp >= 2


def _plus_key(base, const: int) -> tuple:
    """The CSE key of base + const (a _SHIFTED value) that vgpr_plus and _vgpr both use."""
    return ("+", base, const)


@memo
def _shiftable(base, lanes: frozenset) -> bool:
    """Whether add_constant(base, c) is a _SHIFTED sum whose rest is `base` itself, for any integer c != 0: base
    varies per lane and holds no number (add_constant then puts c in front of base's own terms)."""
    if not free_symbols(base) & lanes or base.is_Number:
        return False
    if isinstance(base, sympy.Add):
        return not base.args[0].is_Number
    return isinstance(base, (sympy.Mul, sympy.Symbol, sympy.floor, sympy.Mod)) and base.is_commutative


def _operand_kinds(terms, lanes: frozenset) -> tuple:
    """(kind, int value or expression) of each term, as ExprLowering.operand() would lower it."""
    kinds = []
    for t in terms:
        t = sym(t)
        if t.is_Integer:
            kinds.append((_CONSTANT, int(t)))
        else:
            kinds.append((_LANE if free_symbols(t) & lanes else _SCALAR, t))
    return tuple(kinds)


def _is_vgpr(operand) -> bool:
    return isinstance(operand, Reg) and operand.file == "v"


def _signed(atom) -> bool:
    """A runtime int scalar (int32, may be negative); block ids, loop variables, floor and Mod of them
    are not negative."""
    return atom.is_Symbol and not atom.is_nonnegative


@memo
def _is_simple(expr) -> bool:
    """One operation on atoms: worth keeping for other addresses."""
    return all(a.is_Atom or (a.is_Mul and all(x.is_Atom for x in a.args)) for a in expr.args)


def _vop3_legal(operands) -> bool:
    """gfx9 VOP3: no 32-bit literal, and at most one SGPR (the constant bus)."""
    literals = [o for o in operands if isinstance(o, int) and not is_inline_int(o)]
    sgprs = {o for o in operands if isinstance(o, Reg) and o.file == "s"}
    return not literals and len(sgprs) <= 1


def magic(d: int) -> int:
    """m with floor(n / d) == (n * m) >> 32 for 0 <= n < 2**16 (d < 2**16)."""
    if not 1 < d < _MAGIC_DIVIDEND_LIMIT:
        raise CompileError(f"cannot divide by {d} in index math (divisors must be below 65536)")
    return -(-(1 << 32) // d)
