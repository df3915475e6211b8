"""Global memory access and value conversions shared by the lowering passes.

Global addresses: byte offset = sum(index_d * stride_d * elem_bytes), split by SymPy into a uniform
part (folded into the V# base, see abi.KernelAbi.resource), a per-lane part (voffset VGPR) and a
constant (the 12-bit `offset:` field, the rest folded into voffset). Ragged edges: rows past the end
fall outside NUM_RECORDS; columns past the end of an inner dimension are masked by steering voffset
to an out-of-range value, so the hardware returns 0 for loads and drops stores.

Inside a loop the uniform part's loop-variable terms (the advance) stay out of the V#, so the V# is
built once before the loop and the loop only computes the advance (an SGPR) each step. Where the advance
moves along inner dims only, or no lane can be past the end of dim 0, it is the instruction's soffset: an
element's in-range verdict is then the same whether or not the hardware counts soffset in the range check
(docs/isa-notes.md: not settled), because lanes past the end of dim 0 (if any) are out of range by voffset
alone and every other lane outside the tensor is masked to OUT_OF_RANGE_OFFSET. An advance along a dim 0
with a ragged end is added to voffset instead (one VALU op per access).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import sympy

from ..errors import CompileError
from .abi import BUFFER_REACH, OUT_OF_RANGE_OFFSET, KernelAbi
from .addr import ExprLowering, Xor, add_constant, linear_form, split_floor_div, split_linear, split_uniform, value_range
from .isa import VALU, VCC, Inst, Reg, is_inline_int
from .symcache import free_symbols, memo, sym

if TYPE_CHECKING:  # the machine layer reads IR objects by duck typing; it never imports the IR
    from ..ir import nodes as N

LOAD_OPS = {1: "buffer_load_ubyte", 2: "buffer_load_ushort", 4: "buffer_load_dword", 8: "buffer_load_dwordx2",
            12: "buffer_load_dwordx3", 16: "buffer_load_dwordx4"}
STORE_OPS = {1: "buffer_store_byte", 2: "buffer_store_short", 4: "buffer_store_dword", 8: "buffer_store_dwordx2",
             12: "buffer_store_dwordx3", 16: "buffer_store_dwordx4"}
BF16_ROUND_BIAS = 0x7FFF
BF16_QUIET_BIT = 0x400000
PERM_HIGH_HALVES = 0x07060302  # v_perm_b32 selector: {hi[31:16], lo[31:16]}


def access_width(buffer: N.Buffer, run_elems: int, masked_last_dim: bool) -> int:
    """Widest legal access (bytes, <= 16) for runs of `run_elems` elements starting at multiples of it."""
    es = buffer.dtype.bytes
    if not buffer.spec.aligned16:
        return es
    width = 16
    run_bytes = run_elems * es
    # the tensor's end: an access straddling it is out of range as a whole, losing its valid part
    # (a 1-d tensor of odd length in 16-bit); rows of 2-d tensors end at multiples of the row stride
    constraints = [run_bytes, buffer.spec.nbytes] + [st * es for st in buffer.spec.strides[:-1]]
    if masked_last_dim:
        constraints.append(buffer.shape[-1] * es)
    while width > es and any(not provably_multiple(c, width) for c in constraints):
        width //= 2
    return width


def provably_less(a, b) -> bool:
    """a < b for every value of the symbols in them (a T.dynamic size's, say): False where SymPy cannot tell."""
    if isinstance(a, int) and isinstance(b, int):
        return a < b
    return bool((sympy.sympify(b) - a - 1).is_nonnegative)


def provably_multiple(expr, n: int) -> bool:
    """expr (an int, or SymPy: a T.dynamic size's `16 * M_div16` form is a multiple of 16) is a multiple of n."""
    if isinstance(expr, int):
        return expr % n == 0
    expr = sympy.expand(sympy.sympify(expr))
    return all(int(c) % n == 0 if c.is_Integer else False
               for c in (term.as_coeff_Mul()[0] for term in sympy.Add.make_args(expr))) or expr == 0


def masked_dims(buffer: N.Buffer, starts, extents) -> list:
    """Inner dims whose tile can run past the tensor's edge (dim 0 is covered by NUM_RECORDS)."""
    dims = []
    for d in range(1, len(buffer.shape)):
        e, s = extents[d], starts[d]
        if provably_multiple(buffer.shape[d], e) and provably_multiple(s, e):
            continue
        dims.append(d)
    return dims


class Address(NamedTuple):
    """The operands of a buffer access: V#, voffset VGPR, soffset (SGPR or 0), `offset:` immediate, and
    whether voffset is a temporary the caller frees after issuing the access."""
    srd: Reg
    voffset: Reg
    soffset: Reg | int
    imm: int
    temp: bool


@memo
def _exact_span(expr, tid, threads: int) -> tuple:
    """(min, max) of integer `expr` in `tid` over 0 .. threads - 1, by evaluating it for each (in integers, where
    the expression is made of the forms address arithmetic uses, else by sympy.lambdify, which costs milliseconds)."""
    values = _lane_values(expr, tid, threads)
    if values is None:
        values = sympy.lambdify(tid, expr, modules="numpy")(np.arange(threads, dtype=np.int64))
    values = np.broadcast_to(values, threads)
    return int(values.min()), int(values.max())


@memo  # the lane offsets of a tile's accesses share most of their terms (floor(tid / 8), Mod(tid, 64), ...)
def _lane_values(expr, tid, threads: int):
    """expr at tid = 0 .. threads - 1 (an int64 array, never written to: memoised, or an int where expr does not
    depend on tid), exactly: integers, sums, products, floor divisions and Mod by positive integers; None for any
    other form."""
    if expr.is_Symbol:
        return np.arange(threads, dtype=np.int64) if expr == tid else None
    if expr.is_Integer:
        return int(expr)
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        parts = [_lane_values(a, tid, threads) for a in expr.args]
        if any(p is None for p in parts):
            return None
        total = parts[0]
        for p in parts[1:]:
            total = total + p if isinstance(expr, sympy.Add) else total * p
        return total
    div = split_floor_div(expr)
    if div is not None:
        num = _lane_values(div[0], tid, threads)
        return None if num is None else num // div[1]
    if isinstance(expr, sympy.Mod) and expr.args[1].is_Integer and expr.args[1] > 0:
        x = _lane_values(expr.args[0], tid, threads)
        return None if x is None else x % int(expr.args[1])
    if isinstance(expr, Xor):
        a, b = (_lane_values(x, tid, threads) for x in expr.args)
        return None if a is None or b is None else np.bitwise_xor(a, b)
    return None


@memo
def _sum_of_terms(terms: tuple):
    """The SymPy sum of (atom, integer coefficient) terms, memoised."""
    return sympy.Add(*(c * a for a, c in terms))


def _reach_exact(span, imm: int, width: int) -> bool:
    """Whether every lane's 32-bit voffset (its range `span`, None where unknown) + imm is exact: in-tile offsets below
    BUFFER_REACH, negative ones (before the origin: out of range) above -BUFFER_REACH. An offset past 2^32 would wrap
    back into the buffer: a stray access."""
    return span is not None and span[0] + imm > -BUFFER_REACH and span[1] + imm + width <= BUFFER_REACH


class _LoopOrigin(NamedTuple):
    """What _in_loop_address derives from an access origin (index, shift 0) in the open loops, the same for every
    shift: per dim its byte offset's constant (None where its form has none), the dims that move with the loops,
    dim 0's index range, the moving terms' sum, their largest coefficient and range, the other terms split into
    uniform and per-lane parts, the lane part's span, and the inner dims' lane terms."""
    consts: tuple
    moving: tuple
    rows: tuple | None
    moves: object
    advance_max: int
    steps: tuple | None
    uniform: object
    lane: object
    span: tuple | None
    inner: tuple


class GlobalAccess:
    def __init__(self, abi: KernelAbi):
        self.abi = abi
        self.b = abi.b
        self.lower: ExprLowering = abi.lower
        self.loop_ranges: dict = {}  # loop variable -> (first, last value), set by the loop lowering
        self._splits: dict = {}  # (buffer, index) -> split_linear of their sum (_split)
        self._loop_origins: dict = {}  # (buffer, index, loop variables, their ranges) -> _LoopOrigin or None

    def address(self, buffer: N.Buffer, index, mask_dims, width: int, max_imm: int | None = None,
                shift: tuple | None = None) -> Address:
        """The operands that access element `index` (+ `shift`, integers per dim) `width` bytes wide; the immediate
        is at most `max_imm` (default: the MUBUF field's limit; 0 for LDS DMA, where it also offsets the LDS side).

        `shift` gives the same operands as `index[d] + shift[d]` would, without building those SymPy sums: the
        accesses of a tile (a copy's slots, the epilogue's runs) differ from a few origins by integers, and the
        analysis below is affine in them, so it reuses each origin's memoised linear form and lane facts."""
        limit = (self.b.arch.mubuf_max_imm_offset if max_imm is None else max_imm) + 1
        shift = shift or (0,) * len(index)
        return (self._in_loop_address(buffer, index, shift, mask_dims, width, limit)
                or self._address(buffer, index, shift, mask_dims, width, limit))

    def _split(self, buffer: N.Buffer, index, shift) -> tuple:
        """split_linear of the byte offset of index + shift: (uniform part, lane part, constant, value_range of the
        lane part). Only the constant depends on the shift, so the rest is derived once per origin."""
        key = (buffer, index)
        split = self._splits.get(key)
        strides = buffer.spec.strides
        if split is None:
            es = buffer.dtype.bytes
            form: dict = {}
            for idx, st in zip(index, strides):
                if isinstance(st, int):
                    linear_form(idx, st * es, form)
                else:  # a stride of T.dynamic sizes: its products with the index terms are the atoms
                    linear_form(sympy.expand(sympy.sympify(idx) * st), es, form)
            uniform, lane, const = split_linear(form, self.b.lane_symbols)
            split = self._splits[key] = (uniform, lane, const, value_range(lane, self._lane_ranges()))
        uniform, lane, const, span = split
        es = buffer.dtype.bytes
        const += sum(k * st * es for k, st in zip(shift, strides) if isinstance(st, int))
        moved = [k * st * es for k, st in zip(shift, strides) if k and not isinstance(st, int)]
        if moved:  # a shift along a dim of dynamic stride moves the uniform origin (its own V#)
            uniform = uniform + sympy.Add(*moved)
        return uniform, lane, const, span

    def _address(self, buffer: N.Buffer, index, shift, mask_dims, width: int, limit: int) -> Address:
        """A V# at the access's whole uniform offset (rebuilt wherever that offset changes)."""
        uniform, lane, const, span = self._split(buffer, index, shift)
        srd = below = None
        if span is not None and uniform is not sympy.S.Zero and span[0] + const < 0:
            # lanes below the tile origin (a halo such as X[bx * 64 + i - 1]): they may still be
            # inside the tensor, so the origin moves down to the lowest lane instead
            lowest = span[0] + const
            if lowest <= -BUFFER_REACH:
                raise CompileError(f"{buffer.name}: a tile reaching {-lowest} bytes below its origin is not supported")
            srd, below = self.abi.clamped_resource(buffer, uniform + lowest)
            const -= lowest
        imm = const % limit if const >= 0 else 0
        # voffset = lane + const - imm, whose range is span's moved by that integer (value_range adds it exactly)
        if not _reach_exact(span and (span[0] + const - imm, span[1] + const - imm), imm, width):
            mask_dims = self._mask_every_dim(buffer, add_constant(lane, const - imm))
        srd = srd or self.abi.resource(buffer, uniform)
        voffset, temp = self.lower.vgpr_plus(lane, const - imm), False
        if below is not None:
            voffset, temp = self.b.v.alloc(what="voffset"), True
            self.b.emit("v_add_u32", voffset, below, self.lower.vgpr_plus(lane, const - imm),
                        comment="origin below the start")
        return self._finish(buffer, index, shift, mask_dims, Address(srd, voffset, 0, imm, temp))

    def _finish(self, buffer, index, shift, mask_dims, addr: Address) -> Address:
        """`addr` with voffset steered out of range for lanes outside the tensor on a masked dim."""
        if not mask_dims:
            return addr
        masked = self._masked(buffer, index, shift, mask_dims, addr.voffset)
        if addr.temp:
            self.b.v.free(addr.voffset)
        return addr._replace(voffset=masked, temp=True)

    def _in_loop_address(self, buffer: N.Buffer, index, shift, mask_dims, width: int, limit: int) -> Address | None:
        """The access with its loop-variable terms (the advance) kept out of the V#, or None where that
        does not apply (no open loop variable in the address, but for LDS DMA, an advance that is not a sum of loop
        variables with a known range, a tile reaching below its origin, or offsets that 32 bits cannot
        hold: the caller then builds the V# at the whole offset, as outside loops).

        The V# is at the loop-invariant uniform offset (built before the loop, NUM_RECORDS up to the
        tensor's end); valid elements lie at advance + voffset + imm < NUM_RECORDS because the whole
        offset stays below BUFFER_REACH. The advance is the soffset where `_soffset_is_exact` says so,
        else it is added to voffset. For LDS DMA (`limit` 1) the constant joins the advance, so the
        per-lane VGPRs are shared by every step, and outside loops too (a pipeline's prologue: its copies of stages
        0 .. S-2 then reuse the steady loop's VGPRs, the constant alone in soffset, instead of building a V# and a
        swizzled voffset per slot: ~380 fewer instructions in the 256x256x64 NN prologue of 3 K phases)."""
        loop_vars = set().union(*(f.symbols for f in self.b.frames[1:]))
        if not loop_vars and limit != 1:
            return None
        if not all(isinstance(st, int) for st in buffer.spec.strides):
            return None  # a stride of T.dynamic sizes: the V# at the whole offset (the advance is no constant)
        origin = self._loop_origin(buffer, index, frozenset(loop_vars))
        if origin is None:
            return None
        es = buffer.dtype.bytes
        consts = [c if not k else (c or 0) + k * st * es for c, k, st in zip(origin.consts, shift, buffer.spec.strides)]
        rows_inside = origin.rows is not None and 0 <= origin.rows[0] + shift[0] and \
            provably_less(origin.rows[1] + shift[0], buffer.shape[0])
        in_soffset = rows_inside or (0 not in origin.moving and self._rows_past_end_by_voffset(buffer))
        row_const_in_lane = in_soffset and not rows_inside
        # each dim's constant joins the advance (LDS DMA) or the per-lane part
        to_advance = [c is not None and limit == 1 and (d > 0 or not row_const_in_lane) for d, c in enumerate(consts)]
        step_const = sum(c for c, moved in zip(consts, to_advance) if moved)
        in_lane = [c for c, moved in zip(consts, to_advance) if c is not None and not moved]
        if row_const_in_lane:
            # what the inner dims add to voffset (their lane terms, their constants where constants stay per lane)
            # must be >= 0 on every lane: else a lane past dim 0's end could have a voffset inside NUM_RECORDS
            inner_const = sum(c for c in consts[1:] if c is not None) if in_lane else 0
            inner = self._lane_span(_sum_of_terms(origin.inner))
            if inner is None or inner[0] + inner_const < 0:
                return None
        if max(origin.advance_max, abs(step_const)) >= BUFFER_REACH:
            return None  # a coefficient SALU literals cannot hold; its advance would pass 2 GiB anyway
        advance = add_constant(origin.moves, step_const)
        steps = origin.steps and (origin.steps[0] + step_const, origin.steps[1] + step_const)
        uniform, lane, const, span = origin.uniform, origin.lane, sum(in_lane), origin.span
        if steps is not None and span is not None and steps[0] < 0 <= span[0] + const + steps[0] and limit != 1:
            # an advance that decreases (a reversed loop: `(n - 1 - k) * block`): the part of the constant that
            # keeps it >= 0 on every trip joins it, so neither the advance nor any lane's offset is negative
            advance, const, steps = add_constant(advance, -steps[0]), const + steps[0], (0, steps[1] - steps[0])
        if steps is None or span is None or steps[0] < 0 or span[0] + const < 0:
            return None
        if span[1] + const + steps[1] + width > BUFFER_REACH:
            return None
        imm = const % limit
        srd = self.abi.resource(buffer, uniform)
        step = self.lower.sgpr(advance)
        if isinstance(step, int) and not is_inline_int(step):  # a constant advance (outside loops)
            step = self.b.sgpr_constant(step)
        voffset = self.lower.vgpr_plus(lane, const - imm)
        if in_soffset:
            return self._finish(buffer, index, shift, mask_dims, Address(srd, voffset, step, imm, False))
        moved = self.b.v.alloc(what="voffset + loop advance")
        self.b.emit("v_add_u32", moved, step, voffset, comment="loop advance")
        return self._finish(buffer, index, shift, mask_dims, Address(srd, moved, 0, imm, True))

    def _loop_origin(self, buffer: N.Buffer, index, loop_vars: frozenset):
        """_LoopOrigin of an access origin in the open loops (None where _in_loop_address does not apply to it: no
        loop variable in it, or one without a known range), derived once per origin and loop state."""
        key = (buffer, index, loop_vars, tuple(self.loop_ranges.items()))
        if key not in self._loop_origins:
            self._loop_origins[key] = self._derive_loop_origin(buffer, index, loop_vars)
        return self._loop_origins[key]

    def _derive_loop_origin(self, buffer: N.Buffer, index, loop_vars: frozenset):
        es = buffer.dtype.bytes
        forms = [linear_form(idx, st * es) for idx, st in zip(index, buffer.spec.strides)]
        moving = tuple(d for d, form in enumerate(forms) if any(free_symbols(a) & loop_vars for a in form))
        if (loop_vars and not moving) or not loop_vars <= set(self.loop_ranges):
            return None  # no loop variables at all (LDS DMA outside loops): the advance is the constant alone
        advance, rest = {}, {}  # the terms (constants apart) that move with the loop variables, the others
        for form in forms:
            for atom, coeff in form.items():
                if atom is not sympy.S.One:
                    target = advance if free_symbols(atom) & loop_vars else rest
                    target[atom] = target.get(atom, 0) + coeff
        moves = _sum_of_terms(tuple(advance.items()))
        uniform, lane, _ = split_linear(rest, self.b.lane_symbols)
        inner = tuple((a, c) for form in forms[1:] for a, c in form.items()
                      if a in rest and free_symbols(a) & self.b.lane_symbols)
        return _LoopOrigin(
            consts=tuple(form.get(sympy.S.One) for form in forms), moving=moving,
            rows=value_range(index[0], {**self.loop_ranges, **self._lane_ranges()}),
            moves=moves, advance_max=max(map(abs, advance.values()), default=0),
            steps=value_range(moves, self.loop_ranges),
            uniform=uniform, lane=lane, span=self._lane_span(lane), inner=inner)

    @staticmethod
    def _rows_past_end_by_voffset(buffer: N.Buffer) -> bool:
        """Rows do not overlap (the tensor ends within its last row), so an offset to a row past dim 0's end,
        measured from the tile origin, is past NUM_RECORDS whatever the inner dims add (when not negative)."""
        return provably_less(buffer.spec.nbytes, buffer.shape[0] * buffer.spec.strides[0] * buffer.dtype.bytes + 1)

    def _lane_ranges(self) -> dict:
        return {sym: (0, self.abi.kernel.threads - 1) for sym in self.b.lane_symbols}

    def _lane_span(self, lane) -> tuple | None:
        """(min, max) of a per-lane offset over the workgroup's threads: exact where it depends on the thread id
        alone (interval arithmetic only bounds an XOR-swizzled offset: a bound below the true minimum could send
        the K loop's address back to a per-step V#), else value_range's bounds."""
        symbols = free_symbols(sym(lane))
        if len(symbols) == 1 and symbols <= self.b.lane_symbols:
            return _exact_span(sym(lane), next(iter(symbols)), self.abi.kernel.threads)
        return value_range(lane, self._lane_ranges())

    def _mask_every_dim(self, buffer: N.Buffer, lane) -> list:
        """A tile whose voffsets may wrap: mask every dim by compare (dim 0 included), so lanes outside
        the tensor get OUT_OF_RANGE_OFFSET and lanes inside it, all below BUFFER_REACH from the
        origin when the whole tensor is, compute exact offsets (32-bit arithmetic wraps only past it)."""
        nbytes = buffer.spec.nbytes  # of T.dynamic sizes: below BUFFER_REACH, which the launch checks
        if isinstance(nbytes, int) and nbytes > BUFFER_REACH:
            raise CompileError(
                f"a tile of {buffer.name} spans more than {BUFFER_REACH >> 30} GiB per lane offset "
                f"({lane} bytes) in a tensor of {buffer.spec.nbytes} bytes: 32-bit buffer offsets cannot "
                "reach it; use a smaller tile or a tensor with smaller strides")
        return list(range(len(buffer.shape)))

    def _masked(self, buffer, index, shift, mask_dims, voffset: Reg) -> Reg:
        """A fresh VGPR: voffset where the element is inside the tensor on every masked dim, else an
        offset past any NUM_RECORDS. The test is `lane part < shape - uniform part - constant` (and
        `lane part >= -uniform part - constant` where the index can go below 0), so the per-lane
        operand is shared by all accesses of a run and only the uniform limit differs."""
        b = self.b
        tests = []  # (compare, uniform limit, lane part): limit > lane ("gt") or limit <= lane ("le")
        for d in mask_dims:
            u, l, c = split_uniform(index[d], b.lane_symbols)
            c += shift[d]
            lhs = self.lower.vgpr(l) if l != 0 else b.vgpr_constant(0)
            tests.append(("gt", self.lower.sgpr(sympy.sympify(buffer.shape[d]) - u - c), lhs))
            span = value_range(l, self._lane_ranges())
            if span is None or span[0] + c < 0:
                tests.append(("le", self.lower.sgpr(-u - c), lhs))
        (cmp, limit, lhs), rest = tests[0], tests[1:]
        b.emit(f"v_cmp_{cmp}_i32", VCC, limit, lhs, defs=(VCC,), comment="inside the tensor?")
        for cmp, limit, lhs in rest:
            pair = b.s.alloc(2, align=2)
            if isinstance(limit, int) and not is_inline_int(limit):
                limit = b.sgpr_constant(limit)
            b.emit(f"v_cmp_{cmp}_i32_e64", pair, limit, lhs)
            b.emit("s_and_b64", VCC, VCC, pair, defs=(VCC,))
            b.s.free(pair)
        out = b.v.alloc(what="masked voffset")
        b.emit("v_cndmask_b32", out, b.vgpr_constant(OUT_OF_RANGE_OFFSET), voffset, VCC,
               comment="outside: an offset past NUM_RECORDS")
        return out

    def load(self, dst: Reg, width: int, buffer: N.Buffer, index, mask_dims, comment="", shift=None, resource=None,
             op=None):
        """`resource`: a function of the access's V# giving the V# to load with (a pipelined copy past the end);
        `op`: the load instruction where not the plain one of `width` (a sign-extending byte or short load)."""
        a = self.address(buffer, index, mask_dims, width, shift=shift)
        srd = a.srd if resource is None else resource(a.srd)
        self.b.emit(op or LOAD_OPS[width], dst, a.voffset, srd, a.soffset, suffix=f"offen offset:{a.imm}",
                    comment=comment)
        if a.temp:
            self.b.v.free(a.voffset)  # the address is read at issue

    def store(self, src: Reg, width: int, buffer: N.Buffer, index, mask_dims, comment="", shift=None):
        a = self.address(buffer, index, mask_dims, width, shift=shift)
        self.b.emit(STORE_OPS[width], src, a.voffset, a.srd, a.soffset, suffix=f"offen offset:{a.imm}",
                    comment=comment)
        if a.temp:
            self.b.v.free(a.voffset)


# ---- conversions between fp32 registers and 16-bit storage ---------------------------------------

def unpack_16bit_to_f32(b, dst: Reg, src: Reg, high: bool, dtype):
    """dst (f32) = the low or high 16-bit half of src interpreted as bf16/f16."""
    if dtype.name == "bfloat16":
        if high:
            b.valu("v_and_b32", dst, 0xFFFF0000, src)
        else:
            b.valu("v_lshlrev_b32", dst, 16, src)
    else:
        if high:
            b.valu("v_lshrrev_b32", dst, 16, src)
            b.valu("v_cvt_f32_f16", dst, dst)
        else:
            b.valu("v_cvt_f32_f16", dst, src)


def _round_f32_to_bf16_high(b, tmp: Reg, x: Reg):
    """tmp[31:16] = bf16(x), round to nearest even; NaN stays NaN (quiet). The Insts are built with their defs and
    uses stated (what b.valu would infer): without a bf16 convert (gfx942) the epilogue runs this for every value."""
    append = b.frames[-1].insts.append
    append(Inst("v_bfe_u32", (tmp, x, 16, 1), (tmp,), (x,), VALU))
    bias = b.sgpr_constant(BF16_ROUND_BIAS)  # after the first instruction, as the SGPR's s_mov always was
    append(Inst("v_add3_u32", (tmp, x, tmp, bias), (tmp,), (x, tmp, bias), VALU))
    append(Inst("v_cmp_u_f32", (VCC, x, x), (VCC,), (x, x), VALU))
    quiet = b.v.alloc()
    append(Inst("v_or_b32", (quiet, BF16_QUIET_BIT, x), (quiet,), (x,), VALU))
    append(Inst("v_cndmask_b32", (tmp, tmp, quiet, VCC), (tmp,), (tmp, quiet, VCC), VALU))
    b.v.free(quiet)


def _is_vgpr(x) -> bool:
    return isinstance(x, Reg) and x.file == "v"


def pack_f32_pair(b, dst: Reg, lo: Reg, hi, dtype):
    """dst = {dtype(hi), dtype(lo)} (RNE). `hi` None packs lo alone (upper half 0)."""
    arch = b.arch
    if dtype.name == "float16" and arch.has_cvt_pk_f16_f32:
        b.valu("v_cvt_pk_f16_f32", dst, lo, hi if hi is not None else 0)
        return
    if dtype.name == "float16" and _is_vgpr(hi) and dst not in (lo, hi):
        # lo into the low half (GFX9 zeroes the high one), then hi into the high half, the low kept (SDWA): two
        # instructions where two conversions and a v_pack_b32_f16 took three; the same v_cvt_f16_f32, so the same
        # rounding. A VALU reading dst right after waits a state (Arch.valu_hazards.dst_sel_to_valu_read).
        b.valu("v_cvt_f16_f32", dst, lo)
        b.emit("v_cvt_f16_f32_sdwa", dst, hi, suffix="dst_sel:WORD_1 dst_unused:UNUSED_PRESERVE src0_sel:DWORD")
        return
    if dtype.name == "float16":
        t0 = b.v.alloc()
        b.valu("v_cvt_f16_f32", t0, lo)
        if hi is None:
            b.valu("v_and_b32", dst, 0xFFFF, t0)
        else:
            t1 = b.v.alloc()
            b.valu("v_cvt_f16_f32", t1, hi)
            b.valu("v_pack_b32_f16", dst, t0, t1)
            b.v.free(t1)
        b.v.free(t0)
        return
    if arch.has_cvt_pk_bf16_f32:
        b.valu("v_cvt_pk_bf16_f32", dst, lo, hi if hi is not None else 0)
        return
    t0 = b.v.alloc()
    _round_f32_to_bf16_high(b, t0, lo)
    if hi is None:
        b.valu("v_lshrrev_b32", dst, 16, t0)
    else:
        t1 = b.v.alloc()
        _round_f32_to_bf16_high(b, t1, hi)
        b.valu("v_perm_b32", dst, t1, t0, b.sgpr_constant(PERM_HIGH_HALVES))
        b.v.free(t1)
    b.v.free(t0)
