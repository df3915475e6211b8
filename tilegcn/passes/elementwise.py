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

from ..amdgcn.isa import Reg
from ..amdgcn.memory import pack_f32_pair, unpack_16bit_to_f32
from ..ir import nodes as N
from .context import Context

LOG2_E = 1.4426950408889634
_VOP2 = {"add": "v_add_f32", "mul": "v_mul_f32", "max": "v_max_f32", "min": "v_min_f32", "sub": "v_sub_f32"}
_COMMUTATIVE = {"add", "mul", "max", "min"}
_FOLD = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
         "div": lambda a, b: _f32_div(a, b), "max": max, "min": min}


def _f32(x: float) -> float:
    """x rounded to fp32 as the device holds it: past the fp32 range it is +-inf (IEEE), not an error."""
    with np.errstate(over="ignore"):
        return float(np.float32(x))


def _f32_div(a: float, b: float) -> float:
    """IEEE fp32 a / b for constants: x/0 is +-inf and 0/0 is NaN, as on the device (no ZeroDivisionError)."""
    with np.errstate(all="ignore"):
        return float(np.float32(a) / np.float32(b))


def _is_vgpr(x) -> bool:
    return isinstance(x, Reg) and x.file == "v"


class ElementEvaluator:
    """Evaluates one element expression for element r into VGPR temporaries."""

    def __init__(self, ctx: Context, prefetched: dict):
        self.ctx, self.b, self.prefetched = ctx, ctx.b, prefetched
        self.temps: list = []

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
            value, is_temp = self.ctx.read_f32(e.buffer, r)
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
            if isinstance(b, float):
                return self._emit2("mul", a, _f32_div(1.0, b), out)
            rcp = self.temp()
            self.b.emit("v_rcp_f32", rcp, b)
            return self._emit2("mul", a, rcp, out)
        return self._emit2(e.op, a, b, out)

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
            return _f32({"exp2": lambda v: 2.0 ** v, "exp": math.exp, "abs": abs}[e.fn](x))
        out = dst or self.temp()
        if e.fn == "exp2":
            self.b.emit("v_exp_f32", out, x)
        elif e.fn == "exp":
            self._emit2("mul", LOG2_E, self.vgpr(x), out)
            self.b.emit("v_exp_f32", out, out)
        elif e.fn == "abs":
            self.b.emit("v_and_b32", out, 0x7FFFFFFF, self.vgpr(x))
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


def _prefetch_global_reads(ctx: Context, s: N.ParallelStore, elems: int) -> dict:
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


def lower_parallel(ctx: Context, s: N.ParallelStore):
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


def lower_fill(ctx: Context, s: N.Fill):
    lay = ctx.layouts[s.buffer]
    value = _f32(s.value)
    if lay.regs.file == "a":
        for i in range(lay.nregs):
            ctx.b.emit("v_accvgpr_write_b32", lay.regs[i], value)
        return
    if lay.packed:
        half = torch_bits_16(value, s.buffer.dtype)
        value = (half << 16) | half
    for i in range(lay.nregs):
        ctx.b.emit("v_mov_b32", lay.regs[i], value)


def torch_bits_16(value: float, dtype) -> int:
    """The 16-bit pattern of `value` in bf16/f16 (round to nearest even), via torch."""
    import torch

    t = torch.tensor([value], dtype=torch.float32).to(dtype.torch)
    return int(t.view(torch.int16).item()) & 0xFFFF

