"""Layout inference: a layout (tilegcn/ir/layout.py) for every fragment, by a fixed point over the kernel.

Input: a kernel after pipelining and its gemm plans. Output: {fragment Buffer: Layout}.

Every op states what it needs of the layouts of the fragments it touches (TileOp.layout_constraints, with the
constraint objects of ir/layout.py):
  Force(x, L)        x must have layout L (a T.gemm accumulator: the plan's MFMA accumulator layout)
  Same(x, y)         x and y have one layout (a T.Parallel reading a fragment at its own indices, a fragment copy)
  SliceOf(x, y, d)   x is y's layout with dims d reduced away (a broadcast read x[i] in T.Parallel(M, N) over y,
                     a reduction of y into x)
  ExpandOf(x, y, d)  x is y's layout with dims d added, whole in every thread (x[k, i] in T.Parallel over y[i],
                     k constant)
  Whole(x)           every thread holds all of x (a read at a constant index, x[0])
  Vector(x, bytes)   x is copied to or from memory of elements this wide (the blocked layout's run length)
Forced layouts seed the map; Same and SliceOf propagate it both ways until nothing changes; then the largest
fragment still free takes the blocked layout (runs of 16 bytes where its copies allow) and propagation resumes.
Where two uses disagree (a row vector broadcast over an MFMA accumulator and over a blocked tile), the later use
reads a converted copy: the op's `converted` hook puts a convert_layout op (ops/convert_layout.py, through LDS)
before it, and inference starts over; kernel.ir shows it. A conversion where every thread already holds its
destination elements is register moves (no LDS). Disagreeing forced layouts are refused.
"""
from __future__ import annotations

import dataclasses

from ..errors import CompileError
from ..ir import nodes as N
from ..ir.types import float32 as FLOAT32
from ..ir.layout import (MAX_ACCESS_BYTES, Blocked, ExpandOf, Expanded, Force, Layout, MfmaAccumulator, MfmaOperand,
                         Replicated, Same, Slice, SliceOf, Vector, Whole, in_thread_sources)
from ..ir.ops import statements_of


def accumulator_layout(plan, threads: int) -> MfmaAccumulator:
    return MfmaAccumulator((plan.block_M, plan.block_N), threads, plan.dim, plan.mfma.d_regs, plan.waves_N,
                           plan.repeats_M, plan.repeats_N)


def operand_layout(plan, threads: int) -> MfmaOperand:
    """The layout of a fragment A operand of the gemm `plan` (MfmaOperand: the k order its B reads follow)."""
    return MfmaOperand((plan.block_M, plan.block_K), threads, "A", plan.dim, plan.mfma.k_per_lane, plan.waves_N,
                       plan.a_k_chunks)


def constraints(kernel: N.Kernel, gemm_plans: dict) -> list:
    """Every op's layout constraints (TileOp.layout_constraints), in program order."""
    return [c for s in N.walk(kernel.body) for c in s.layout_constraints(gemm_plans, kernel.threads)]


def _where(stmt) -> str:
    return f" (at {stmt.loc})" if stmt is not None and stmt.loc else ""


class _Inference:
    def __init__(self, kernel: N.Kernel, gemm_plans: dict):
        self.kernel, self.threads = kernel, kernel.threads
        self.fragments = [b for b in kernel.buffers if b.scope == N.FRAGMENT]
        self.rules = constraints(kernel, gemm_plans)
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
            first = self._unexpanded(max(free, key=lambda b: b.numel))  # (stable: the first declared of the largest)
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
                return self._set(rule.buffer, _sliced(lay[rule.parent], rule.dims, rule.keepdims), rule.stmt)
            known = lay.get(rule.buffer)
            if isinstance(known, Slice) and (known.dims, known.keepdims) == (rule.dims, rule.keepdims) \
                    and known.parent.shape == tuple(rule.parent.shape):
                return self._set(rule.parent, known.parent, rule.stmt)
        elif isinstance(rule, ExpandOf):
            if rule.child in lay:
                return self._set(rule.buffer, Expanded(lay[rule.child], rule.dims, tuple(rule.buffer.shape)),
                                 rule.stmt)
            known = lay.get(rule.buffer)
            if isinstance(known, Expanded) and known.dims == rule.dims:
                return self._set(rule.child, known.child, rule.stmt)
        elif isinstance(rule, Whole):
            return self._set(rule.buffer, Replicated(tuple(rule.buffer.shape), self.threads), rule.stmt)
        return False

    def _unexpanded(self, buf: N.Buffer) -> N.Buffer:
        """The fragment to give a default layout in place of `buf`: where `buf` is read expanded (ExpandOf) over a
        fragment still free, that one (`buf` then follows it), so the expanded read never disagrees with a
        default of its own."""
        for rule in self.rules:
            if isinstance(rule, ExpandOf) and rule.buffer is buf and rule.child not in self.layouts:
                return self._unexpanded(rule.child)
        return buf

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


def _sliced(parent: Layout, dims: tuple, keepdims: bool) -> Layout:
    """`parent` with `dims` reduced away; an expanded layout reduced along the dims it added is its child again
    (one object, so the fragment a reduction of it feeds and the one it was expanded from agree)."""
    if isinstance(parent, Expanded) and parent.dims == dims and not keepdims:
        return parent.child
    return Slice(parent, dims, keepdims)


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
    """`kernel` with the op whose constraint disagrees replaced by what its `converted` hook gives (a layout
    conversion, then the op on the converted fragment); the disagreement's error where it gives nothing."""
    new_buffers: list = []
    taken = {b.name for b in kernel.buffers}

    def fresh(x: N.Buffer) -> tuple:
        n = 0
        while f"{x.name}_as{n}" in taken:
            n += 1
        name = f"{x.name}_as{n}"
        copy = N.Buffer(name, N.FRAGMENT, x.dtype, tuple(x.shape), loc=x.loc)
        scratch = N.Buffer(f"{name}_lds", N.SHARED, FLOAT32, tuple(x.shape), loc=x.loc)  # fp32 values
        taken.update((copy.name, scratch.name))
        new_buffers.extend((copy, scratch))
        return copy, scratch

    stmt = conflict.rule.stmt
    replacement = stmt.converted(conflict.rule, fresh) if stmt is not None else None
    if replacement is None:
        raise conflict.disagree.error()
    used = {b for s in replacement for r in (*s.reads(), *s.writes()) for b in (r.buffer,)}
    new_buffers = [b for b in new_buffers if b in used]
    return dataclasses.replace(kernel, body=_replace(kernel.body, stmt, replacement),
                               buffers=list(kernel.buffers) + new_buffers)


def _in_registers_where_possible(kernel: N.Kernel, layouts: dict) -> N.Kernel:
    """The layout conversions whose every thread already holds its destination elements (from a replicated
    layout, or into a slice of the source's) become register moves: their LDS scratch is dropped."""
    for op in statements_of(kernel.body, "convert_layout"):
        if op.scratch is not None and in_thread_sources(layouts[op.src], layouts[op.dst]) is not None:
            kernel = dataclasses.replace(kernel, body=_replace(kernel.body, op, [dataclasses.replace(op, scratch=None)]),
                                         buffers=[b for b in kernel.buffers if b is not op.scratch])
    return kernel


def _replace(stmts: list, old, new: list) -> list:
    """`stmts` (a new list; nested bodies rebuilt) with statement `old` replaced by `new` wherever it is."""
    out = []
    for s in stmts:
        if s is old:
            out.extend(new)
        elif s.bodies():
            out.append(s.with_bodies(tuple(_replace(body, old, new) for body in s.bodies())))
        else:
            out.append(s)
    return out


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
            layouts = _Inference(kernel, gemm_plans).run()
        except _Conflict as conflict:
            kernel = _insert_conversion(kernel, conflict)
            continue
        return _in_registers_where_possible(kernel, layouts), layouts
    raise CompileError(f"layout inference gave up after {MAX_CONVERSIONS} layout conversions", location=kernel.loc)
