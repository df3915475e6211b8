"""Layout inference: a layout (tilegcn/ir/layout.py) for every fragment, by a fixed point over the kernel.

Input: a kernel after pipelining and its gemm plans. Output: {fragment Buffer: Layout}.

Every statement states what it needs of the layouts of the fragments it touches (`constraints`, the one place
that knows statement kinds):
  Force(x, L)        x must have layout L (a T.gemm accumulator: the plan's MFMA accumulator layout)
  Same(x, y)         x and y have one layout (a T.Parallel reading a fragment at its own indices, a fragment copy)
  SliceOf(x, y, d)   x is y's layout with dims d reduced away (a broadcast read x[i] in T.Parallel(M, N) over y,
                     a reduction of y into x)
  Whole(x)           every thread holds all of x (a read at a constant index, x[0])
  Vector(x, bytes)   x is copied to or from memory of elements this wide (the blocked layout's run length)
Forced layouts seed the map; Same and SliceOf propagate it both ways until nothing changes; then the largest
fragment still free takes the blocked layout (runs of 16 bytes where its copies allow) and propagation resumes.
Where two uses disagree (a row vector broadcast over an MFMA accumulator and over a blocked tile), the later use
reads a converted copy: a LayoutConvert statement (through LDS) is inserted before it and inference starts over;
kernel.ir shows it. Disagreeing forced layouts (one accumulator in two different gemms) are refused.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import CompileError
from ..ir import nodes as N
from ..ir.types import float32 as FLOAT32
from ..ir.layout import MAX_ACCESS_BYTES, Blocked, Layout, MfmaAccumulator, Replicated, Slice


@dataclass(frozen=True)
class Force:
    buffer: N.Buffer
    layout: Layout
    stmt: N.Stmt


@dataclass(frozen=True)
class Same:
    a: N.Buffer
    b: N.Buffer
    stmt: N.Stmt
    read: tuple | None = None  # a T.Parallel's read of `a` at these indices (None: a fragment copy a -> b)


@dataclass(frozen=True)
class SliceOf:
    buffer: N.Buffer  # the reduced / broadcast fragment
    parent: N.Buffer
    dims: tuple
    stmt: N.Stmt
    read: tuple | None = None  # the indices `buffer` is read at (None: a reduction's destination)


@dataclass(frozen=True)
class Whole:
    buffer: N.Buffer
    stmt: N.Stmt
    read: tuple | None = None


@dataclass(frozen=True)
class Vector:
    buffer: N.Buffer
    element_bytes: int


def accumulator_layout(plan, threads: int) -> MfmaAccumulator:
    return MfmaAccumulator((plan.block_M, plan.block_N), threads, plan.dim, plan.mfma.d_regs, plan.waves_N,
                           plan.repeats_M, plan.repeats_N)


def constraints(s: N.Stmt, kernel: N.Kernel, gemm_plans: dict):
    """What statement `s` needs of fragment layouts (the only per-statement-kind code of this pass)."""
    if isinstance(s, N.Gemm) and s.C in gemm_plans:
        yield Force(s.C, accumulator_layout(gemm_plans[s.C], kernel.threads), s)
    elif isinstance(s, N.Copy):
        src, dst = s.src.buffer, s.dst.buffer
        if src.scope == dst.scope == N.FRAGMENT:
            yield Same(src, dst, s)
        elif N.FRAGMENT in (src.scope, dst.scope) and N.GLOBAL in (src.scope, dst.scope):
            frag, other = (src, dst) if src.scope == N.FRAGMENT else (dst, src)
            yield Vector(frag, other.dtype.bytes)
    elif isinstance(s, N.ParallelStore):
        yield from _parallel_constraints(s)


def _parallel_constraints(s: N.ParallelStore):
    for e in N.walk_expr(s.value):
        if not isinstance(e, N.ElemRef) or e.buffer.scope != N.FRAGMENT:
            continue
        x, index = e.buffer, tuple(e.index)
        if index == tuple(s.indices):
            if tuple(x.shape) != tuple(s.buffer.shape):
                raise CompileError(f"fragments {x.name}{list(x.shape)} and {s.buffer.name}{list(s.buffer.shape)} "
                                   "in one T.Parallel must have the same shape", location=s.loc)
            yield Same(x, s.buffer, s, index)
        elif all(getattr(i, "is_Integer", False) for i in index):
            yield Whole(x, s, index)
        else:
            kept = [s.indices.index(i) for i in index]  # the proxies let only loop indices, in order, through
            dropped = tuple(d for d in range(len(s.indices)) if d not in kept)
            if tuple(x.shape) != tuple(s.extents[d] for d in kept):
                raise CompileError(f"{x.name}{list(x.shape)} read at [{', '.join(map(str, index))}] in "
                                   f"T.Parallel{tuple(s.extents)}: its shape must be the extents of those indices",
                                   location=s.loc)
            yield SliceOf(x, s.buffer, dropped, s, index)


def _where(stmt) -> str:
    return f" (at {stmt.loc})" if stmt is not None and stmt.loc else ""


class _Inference:
    def __init__(self, kernel: N.Kernel, gemm_plans: dict):
        self.kernel, self.threads = kernel, kernel.threads
        self.fragments = [b for b in kernel.buffers if b.scope == N.FRAGMENT]
        self.rules = [c for s in N.walk(kernel.body) for c in constraints(s, kernel, gemm_plans)]
        self.layouts: dict = {}
        self.why: dict = {}  # Buffer -> the statement that gave its layout

    def run(self) -> dict:
        for rule in self.rules:
            if isinstance(rule, Force):
                try:
                    self._set(rule.buffer, rule.layout, rule.stmt)
                except _Disagree as d:
                    raise d.error() from None
        while True:
            self._propagate()
            free = [b for b in self.fragments if b not in self.layouts]
            if not free:
                return self.layouts
            first = max(free, key=lambda b: b.numel)  # (stable: the first declared of the largest)
            self._set(first, self._default(first), None)

    def _set(self, buf: N.Buffer, layout: Layout, stmt) -> bool:
        known = self.layouts.get(buf)
        if known is None:
            if tuple(layout.shape) != tuple(buf.shape):
                raise CompileError(f"fragment {buf.name}{list(buf.shape)} would take the layout of a "
                                   f"{list(layout.shape)} fragment{_where(stmt)}", location=buf.loc)
            self.layouts[buf], self.why[buf] = layout, stmt
            return True
        if known != layout:
            raise _Disagree(buf, known, layout, stmt, self.why[buf])
        return False

    def _propagate(self):
        changed = True
        while changed:
            changed = False
            for rule in self.rules:
                changed |= self._apply(rule)

    def _apply(self, rule) -> bool:
        try:
            return self._apply_rule(rule)
        except _Disagree as d:
            raise _Conflict(rule, d) from None

    def _apply_rule(self, rule) -> bool:
        lay = self.layouts
        if isinstance(rule, Same):
            if rule.a in lay:
                return self._set(rule.b, lay[rule.a], rule.stmt)
            if rule.b in lay:
                return self._set(rule.a, lay[rule.b], rule.stmt)
        elif isinstance(rule, SliceOf):
            if rule.parent in lay:
                return self._set(rule.buffer, Slice(lay[rule.parent], rule.dims), rule.stmt)
            known = lay.get(rule.buffer)
            if isinstance(known, Slice) and known.dims == rule.dims and known.parent.shape == rule.parent.shape:
                return self._set(rule.parent, known.parent, rule.stmt)
        elif isinstance(rule, Whole):
            return self._set(rule.buffer, Replicated(tuple(rule.buffer.shape), self.threads), rule.stmt)
        return False

    def _default(self, buf: N.Buffer) -> Blocked:
        """The blocked layout, with the longest run that keeps every thread's elements in whole 16-byte accesses
        of the fragments it shares a layout with and the memory they are copied from or to."""
        group = self._same_group(buf)
        sizes = [b.dtype.bytes for b in group]
        sizes += [r.element_bytes for r in self.rules if isinstance(r, Vector) and r.buffer in group]
        return blocked_layout(buf, MAX_ACCESS_BYTES // min(sizes), self.threads)

    def _same_group(self, buf: N.Buffer) -> set:
        group, todo = {buf}, [buf]
        while todo:
            x = todo.pop()
            for r in self.rules:
                if isinstance(r, Same) and x in (r.a, r.b):
                    other = r.b if x is r.a else r.a
                    if other not in group:
                        group.add(other)
                        todo.append(other)
        return group


class _Disagree(Exception):
    """Fragment `buffer` has layout `known` (given at `known_at`) and statement `stmt` needs `wanted`."""

    def __init__(self, buffer, known, wanted, stmt, known_at):
        super().__init__(buffer.name)
        self.buffer, self.known, self.wanted, self.stmt, self.known_at = buffer, known, wanted, stmt, known_at

    def error(self) -> CompileError:
        return CompileError(
            f"fragment {self.buffer.name} is used with two layouts: {self.known.describe()}{_where(self.known_at)} "
            f"and {self.wanted.describe()}{_where(self.stmt)}, and no layout conversion can reconcile them here; "
            "compute the two uses from separate fragments",
            location=(self.stmt.loc if self.stmt is not None else self.buffer.loc))


class _Conflict(Exception):
    def __init__(self, rule, disagree: _Disagree):
        super().__init__(disagree.buffer.name)
        self.rule, self.disagree = rule, disagree


MAX_CONVERSIONS = 64  # a kernel needing more has uses that disagree everywhere; refused rather than looping


def _insert_conversion(kernel: N.Kernel, conflict: _Conflict) -> N.Kernel:
    """`kernel` with the use in `conflict.rule` reading a converted copy of its fragment (a LayoutConvert
    statement right before it), or a fragment copy turned into the conversion itself."""
    rule, n = conflict.rule, sum(1 for b in kernel.buffers if b.scope == N.SHARED and b.name.endswith("_lds"))
    stmt = rule.stmt
    if isinstance(stmt, N.Copy) and isinstance(rule, Same) and rule.read is None:
        scratch = _scratch(stmt.src.buffer, n)
        return _rewrite(kernel, stmt, [N.LayoutConvert(stmt.src.buffer, stmt.dst.buffer, scratch, loc=stmt.loc)],
                        [scratch])
    if isinstance(stmt, N.ParallelStore) and getattr(rule, "read", None) is not None:
        x = rule.a if isinstance(rule, Same) else rule.buffer
        if x is not stmt.buffer:
            converted = N.Buffer(f"{x.name}_as{n}", N.FRAGMENT, x.dtype, tuple(x.shape), loc=x.loc)
            scratch = _scratch(x, n)
            value = _replace_reads(stmt.value, x, rule.read, converted)
            store = N.ParallelStore(stmt.extents, stmt.indices, stmt.buffer, value, loc=stmt.loc)
            return _rewrite(kernel, stmt, [N.LayoutConvert(x, converted, scratch, loc=stmt.loc), store],
                            [converted, scratch])
    raise conflict.disagree.error()


def _scratch(x: N.Buffer, n: int) -> N.Buffer:
    """LDS for converting x: its elements as fp32."""
    return N.Buffer(f"{x.name}_as{n}_lds", N.SHARED, FLOAT32, tuple(x.shape), loc=x.loc)


def _replace_reads(e: N.Expr, x: N.Buffer, index: tuple, by: N.Buffer) -> N.Expr:
    if isinstance(e, N.ElemRef):
        return N.ElemRef(by, e.index) if e.buffer is x and tuple(e.index) == index else e
    if isinstance(e, N.BinOp):
        return N.BinOp(e.op, _replace_reads(e.a, x, index, by), _replace_reads(e.b, x, index, by))
    if isinstance(e, N.Call):
        return N.Call(e.fn, tuple(_replace_reads(a, x, index, by) for a in e.args))
    if isinstance(e, N.Cast):
        return N.Cast(e.dtype, _replace_reads(e.x, x, index, by))
    return e


def _rewrite(kernel: N.Kernel, old: N.Stmt, new: list, buffers: list) -> N.Kernel:
    """A new kernel (the traced one is never changed) with statement `old` replaced by `new` wherever it is."""

    def body(stmts):
        out = []
        for s in stmts:
            if s is old:
                out.extend(new)
            elif isinstance(s, N.Loop):
                out.append(dataclasses.replace(s, body=body(s.body)))
            else:
                out.append(s)
        return out

    return dataclasses.replace(kernel, body=body(kernel.body), buffers=list(kernel.buffers) + buffers)


def blocked_layout(buffer: N.Buffer, run: int, threads: int) -> Blocked:
    """Runs of up to `run` elements along the last dim; a fragment with fewer elements than threads is replicated
    (thread t holds element t % numel)."""
    numel, cols = buffer.numel, buffer.shape[-1]
    run = min(run, cols)
    while run > 1 and (cols % run or numel % (run * threads)):
        run //= 2
    if numel > threads and numel % threads:
        raise CompileError(f"fragment {buffer.name}{list(buffer.shape)} has {numel} elements: more than the "
                           f"{threads} threads but not a multiple of them, so they cannot be spread evenly; "
                           f"use a multiple of {threads} elements (or fewer than {threads})", location=buffer.loc)
    return Blocked(tuple(buffer.shape), threads, run)


def infer_layouts(kernel: N.Kernel, gemm_plans: dict) -> tuple:
    """(kernel, {fragment Buffer: Layout}) for every fragment (gemm_plans: accumulator Buffer -> GemmPlan). Where
    two uses of a fragment disagree, the kernel returned is a new one with a LayoutConvert before the second use
    (which then reads a converted fragment), and a shared scratch buffer for it."""
    for _ in range(MAX_CONVERSIONS):
        try:
            return kernel, _Inference(kernel, gemm_plans).run()
        except _Conflict as conflict:
            kernel = _insert_conversion(kernel, conflict)
    raise CompileError(f"layout inference gave up after {MAX_CONVERSIONS} layout conversions", location=kernel.loc)
