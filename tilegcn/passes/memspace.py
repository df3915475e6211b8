"""Memory spaces: element reads and writes of shared buffers and element stores to global tensors inside
T.Parallel, and tile copies global -> shared and shared -> global, staged through fragments.

Input: traced, verified tile IR. Output: the same IR where, through a fresh fp32 fragment each ("staging fragment";
a copy between two buffers of one 16-bit dtype stages in that dtype, the values passing unchanged),
- a T.Parallel statement reading shared buffer S first copies S into a fragment and reads that fragment at the same
  indices (`G_smem[j]` in T.Parallel(M, N) becomes the broadcast read of a vector fragment, which layout inference
  gives the slice of the loop's layout);
- a T.Parallel statement storing into S stores into a fragment of the loop's extents, then copies it to S;
- one reading a fragment or shared buffer at an index computed from the loop's (`B_local[i, j // 2]`, `x[j, i]`:
  other threads' elements) first writes a fragment to a scratch shared buffer, then gathers (a copy of a
  GatherRegion: one ds_read per element at the computed index) into a fragment of the loop's extents, which it
  reads at the loop indices; the index must stay in the buffer at the loop's corners;
- one storing into a global tensor at `Mean[bx * blk_m + i]` stores into a fragment, then copies it to the region of
  the tensor the loop indices cover (masked at ragged edges, each element written once: passes/copy.py);
- T.copy global -> shared (a shared buffer that is not a T.gemm operand), shared -> global and shared -> shared go
  through a fragment of the tile's shape (converting dtypes on the way), and T.fill of a shared buffer fills a
  fragment of its shape, then copies it in.
The copies between shared buffers and fragments are one ds_read / ds_write per element at its row-major LDS address
(passes/lds_elements.py), placing the barriers a read of other threads' writes needs. Staging fragments are free for
layout inference: they take the layout of the fragments their statement touches, else the default blocked one.

Why through fragments: every global access then reuses passes/copy.py's addressing, vector widths, masks and
single-writer stores, and layout inference alone decides which thread handles which element. The price is an LDS
round trip and registers per statement, which the norm kernels that need this (one pass over a row) can afford.
A T.gemm operand's shared tile is XOR-swizzled (passes/gemm_plan.py), so element access to it is refused.
"""
from __future__ import annotations

import dataclasses
import itertools

import sympy

from ..errors import CompileError
from ..ir import nodes as N
from ..ir.ops import op_class, statements_of, whole
from ..ir.types import float32


class Stager:
    """Makes staging fragments for one kernel and knows its T.gemm operand tiles."""

    def __init__(self, kernel: N.Kernel):
        self.fragments: list = []
        self.shared: list = []  # scratch shared buffers of gathered fragments
        self.replaced = False  # a statement was replaced (by others, or by one needing no staging fragment)
        self.gemm_operands = {r.buffer for s in statements_of(kernel.body, "gemm") for r in s.reads()
                              if r.buffer.scope == N.SHARED}

    def fragment(self, of: N.Buffer, shape, loc, dtype=None) -> N.Buffer:
        """A fresh fragment of `shape` staging buffer `of` (named after it in kernel.ir and the asm): `dtype` where
        given, else fp32 for float buffers and `of`'s own dtype for int and fp8 ones (their values pass unchanged; a
        store converts once)."""
        if dtype is None:
            dtype = of.dtype if of.dtype.is_int or of.dtype.is_fp8 else float32
        buf = N.Buffer(f"{of.name}_staged{len(self.fragments)}", N.FRAGMENT, dtype, tuple(shape), loc=loc)
        self.fragments.append(buf)
        return buf

    def scratch(self, of: N.Buffer, loc) -> N.Buffer:
        """A fresh shared buffer of fragment `of`'s shape and dtype, through which other threads read its elements."""
        buf = N.Buffer(f"{of.name}_lds{len(self.shared)}", N.SHARED, of.dtype, tuple(of.shape), loc=loc)
        self.shared.append(buf)
        return buf

    def check_element_access(self, shared: N.Buffer, what: str, loc) -> None:
        if shared in self.gemm_operands:
            raise CompileError(f"{what} shared buffer {shared.name}, a T.gemm operand: its tile is stored XOR-swizzled "
                               "for the matrix cores, so tilegcn does not address its elements. Copy the global tile "
                               "into a second shared buffer or a fragment for element work", location=loc)

    def copy(self, src: N.Region, dst: N.Region, loc):
        return op_class("copy")(src, dst, loc=loc)


def stage_memory_accesses(kernel: N.Kernel) -> N.Kernel:
    """The kernel with its shared / global element accesses and shared copies staged through fragments (each op's
    `staged` hook says how), the staging fragments added to its buffers."""
    stager = Stager(kernel)
    body = _stage_body(kernel.body, stager)
    if not stager.fragments and not stager.replaced:
        return kernel
    return dataclasses.replace(kernel, body=body, buffers=list(kernel.buffers) + stager.fragments + stager.shared)


def _stage_body(stmts: list, stager: Stager) -> list:
    out = []
    for s in stmts:
        if s.bodies():
            s = s.with_bodies(tuple(_stage_body(b, stager) for b in s.bodies()))
        staged = s.staged(stager)
        out.extend([s] if staged is None else staged)
        stager.replaced |= staged is not None
    return out


# ---- T.Parallel -----------------------------------------------------------------------------------------------

def stage_parallel(s, stager: Stager) -> list | None:
    """The statements replacing ParallelStore `s` where it reads shared buffers or stores to shared / global."""
    out, value = _stage_gathers(s, stager)
    if out:
        s = dataclasses.replace(s, value=value)
    reads = {}  # shared buffer -> its staging fragment
    for ref in (e for e in N.walk_expr(s.value) if isinstance(e, N.ElemRef) and e.buffer.scope == N.SHARED):
        # an index only an atomic update may use (language/proxies.py); a computed one is a gather (staged above)
        if getattr(ref, "refusal", None) and not getattr(ref, "gather", False):
            raise CompileError(ref.refusal, location=s.loc)
        if ref.buffer not in reads:
            stager.check_element_access(ref.buffer, "T.Parallel reads", s.loc)
            _check_read_shape(ref, s)
            reads[ref.buffer] = stager.fragment(ref.buffer, ref.buffer.shape, s.loc)
    if not reads and not out and s.buffer.scope == N.FRAGMENT:
        return None
    out += [stager.copy(whole(shared), whole(frag), s.loc) for shared, frag in reads.items()]
    value = _reading(s.value, reads)
    if s.buffer.scope == N.FRAGMENT:
        return out + [dataclasses.replace(s, value=value)]
    if s.buffer.scope == N.SHARED:
        stager.check_element_access(s.buffer, "T.Parallel writes", s.loc)
        dst = whole(s.buffer)
    else:
        dst = global_region(s)
    target = stager.fragment(s.buffer, s.extents, s.loc)
    store = dataclasses.replace(s, buffer=target, value=value, index=None)
    return out + [store, stager.copy(whole(target), dst, s.loc)]


def _stage_gathers(s, stager: Stager) -> tuple:
    """(statements, new value) for the reads of ParallelStore `s` at computed indices of other threads' elements
    (`B_local[i, j // 2]`, language/proxies.py marks them `gather`): each buffer read so goes to LDS (a fragment
    through a scratch shared buffer of its shape, written once per read statement), then every thread reads the
    elements its loop elements name into a fragment of the loop's extents, which the statement reads at [i, j]."""
    out, by_ref, scratch = [], {}, {}
    for ref in (e for e in N.walk_expr(s.value) if getattr(e, "gather", False)):
        source = ref.buffer
        _check_gather_bounds(ref, s)
        if source.scope == N.FRAGMENT:
            if source not in scratch:
                scratch[source] = stager.scratch(source, s.loc)
                out.append(stager.copy(whole(source), whole(scratch[source]), s.loc))
            source = scratch[source]
        else:
            stager.check_element_access(source, "T.Parallel reads", s.loc)
        region = N.GatherRegion(source, (0,) * len(s.extents), tuple(s.extents), tuple(ref.index), tuple(s.indices))
        frag = stager.fragment(source, s.extents, s.loc)
        out.append(stager.copy(region, whole(frag), s.loc))
        by_ref[id(ref)] = N.ElemRef(frag, tuple(s.indices))
    return out, (_replacing(s.value, by_ref) if by_ref else s.value)


def _check_gather_bounds(ref: N.ElemRef, s) -> None:
    """A gathered index stays inside its buffer at the corners of the loop (where the affine and floor-divided
    indices users write take their extremes): an element outside would read another buffer's LDS bytes."""
    corners = itertools.product(*((0, extent - 1) for extent in s.extents))
    for corner in corners:
        values = dict(zip(s.indices, corner))
        for axis, (k, size) in enumerate(zip(ref.index, ref.buffer.shape)):
            value = sympy.sympify(sympy.sympify(k).xreplace(values))
            if value.is_Integer and not 0 <= int(value) < size:
                where = f"[{_user_index(ref.index, s.indices)}] in T.Parallel{tuple(s.extents)}"
                raise CompileError(f"{ref.buffer.scope} {ref.buffer.name}{list(ref.buffer.shape)} read at {where}: "
                                   f"at {dict(zip((str(i)[1:] for i in s.indices), corner))} the index on dim "
                                   f"{axis} is {value}, outside its size {size}", location=s.loc)


def _replacing(e: N.Expr, by_ref: dict) -> N.Expr:
    """`e` with each element read whose id is in `by_ref` replaced by its value there."""
    if id(e) in by_ref:
        return by_ref[id(e)]
    if not dataclasses.is_dataclass(e):
        return e
    changes = {}
    for f in dataclasses.fields(e):
        value = getattr(e, f.name)
        if isinstance(value, N.Expr):
            changes[f.name] = _replacing(value, by_ref)
        elif isinstance(value, tuple) and any(isinstance(v, N.Expr) for v in value):
            changes[f.name] = tuple(_replacing(v, by_ref) if isinstance(v, N.Expr) else v for v in value)
    return dataclasses.replace(e, **changes) if changes else e


def _check_read_shape(ref: N.ElemRef, s) -> None:
    """A shared buffer read at loop indices (all, or some in order: a broadcast) has the extents of those indices as
    its shape, as a fragment must (checked here so that the error names the user's buffer, not its staging copy)."""
    if all(sympy.sympify(k).is_Integer for k in ref.index):
        return
    expected = tuple(s.extents[list(s.indices).index(k)] for k in ref.index if k in s.indices)
    if tuple(ref.buffer.shape) != expected or len(expected) != len(ref.index):
        where = f"[{_user_index(ref.index, s.indices)}] in T.Parallel{tuple(s.extents)}"
        raise CompileError(f"shared {ref.buffer.name}{list(ref.buffer.shape)} read at {where}: its shape must be the "
                           f"extents of those indices {list(expected)}", location=s.loc)


def _reading(e: N.Expr, by: dict) -> N.Expr:
    """`e` with its element reads of the buffers in `by` reading their staging fragments, at the same indices."""
    if isinstance(e, N.ElemRef):
        return N.ElemRef(by[e.buffer], e.index) if e.buffer in by else e
    if not by or not dataclasses.is_dataclass(e):
        return e
    changes = {}
    for f in dataclasses.fields(e):
        value = getattr(e, f.name)
        if isinstance(value, N.Expr):
            changes[f.name] = _reading(value, by)
        elif isinstance(value, tuple) and any(isinstance(v, N.Expr) for v in value):
            changes[f.name] = tuple(_reading(v, by) if isinstance(v, N.Expr) else v for v in value)
    return dataclasses.replace(e, **changes) if changes else e


def _user_index(index, loop: tuple) -> str:
    names = {i: sympy.Symbol(str(i)[1:]) for i in loop}  # p_i -> i, as the user wrote it
    return ", ".join(str(sympy.sympify(k).xreplace(names)) for k in index)


def global_region(s) -> N.Region:
    """The region of global tensor `s.buffer` that ParallelStore `s` writes at `s.index`: each dim indexed by a
    start (block ids, loop variables, constants) plus at most one T.Parallel index, the T.Parallel indices in order
    over the dims, each of them used (else several loop elements would store to one tensor element)."""
    g, loop = s.buffer, list(s.indices)
    where = f"{g.name}[{_user_index(s.index, s.indices)}] in T.Parallel{tuple(s.extents)}"
    if len(s.index) != len(g.shape):
        raise CompileError(f"{where}: {g.name} has {len(g.shape)} dims, indexed with {len(s.index)}", location=s.loc)
    starts, extents, order = [], [], []
    for k in (sympy.expand(sympy.sympify(k)) for k in s.index):
        used = [i for i in loop if k.has(i)]
        start = k.xreplace({i: 0 for i in used})
        if len(used) > 1 or (used and sympy.expand(k - used[0] - start) != 0):
            raise CompileError(f"{where}: each index of a global store must be a start plus one T.Parallel index "
                               f"(`Y[bx * blk_m + i, j]`); got {_user_index((k,), s.indices)}", location=s.loc)
        starts.append(start)
        extents.append(s.extents[loop.index(used[0])] if used else 1)
        order += [loop.index(i) for i in used]
    missing = [str(loop[d])[1:] for d in range(len(loop)) if d not in order and s.extents[d] > 1]
    if missing or order != sorted(order):
        why = f"T.Parallel index {', '.join(missing)} is not used, so its elements would all store to one place" \
            if missing else "the T.Parallel indices must index the tensor's dims in their loop order"
        raise CompileError(f"{where}: {why}", location=s.loc)
    return N.Region(g, tuple(starts), tuple(extents))


# ---- T.copy ---------------------------------------------------------------------------------------------------

def stage_copy(s, stager: Stager) -> list | None:
    """The statements replacing Copy `s` where it moves a tile between global memory and a shared buffer that is not
    a T.gemm operand (global -> fragment -> shared, shared -> fragment -> global); None to keep it."""
    src, dst = s.src.buffer, s.dst.buffer
    scopes = (src.scope, dst.scope)
    if scopes == (N.FRAGMENT, N.SHARED):
        return None  # a gemm operand tile too: passes/lds_elements.py writes it swizzled as its plan reads it
    if N.SHARED in scopes and N.FRAGMENT in scopes:
        stager.check_element_access(src, "T.copy of", s.loc)
        return None
    if scopes == (N.GLOBAL, N.SHARED) and dst in stager.gemm_operands:
        return None  # passes/gemm.py's swizzled operand copy
    if scopes == (N.SHARED, N.SHARED) and dst in stager.gemm_operands:
        raise CompileError(f"T.copy from shared {src.name} into {dst.name}, a T.gemm operand: its tile is stored "
                           "XOR-swizzled for the matrix cores and filled from global memory only; copy the global "
                           f"tile into {dst.name} directly", location=s.loc)
    if scopes not in ((N.GLOBAL, N.SHARED), (N.SHARED, N.GLOBAL), (N.SHARED, N.SHARED)):
        return None
    for shared in (b for b in (src, dst) if b.scope == N.SHARED):
        stager.check_element_access(shared, "T.copy of", s.loc)
    tile = s.dst.extents if dst.scope == N.SHARED else s.src.extents
    # 16-bit values moved unchanged stay 16-bit, two a register (half the VGPRs of fp32, no conversions); other
    # copies stage as Stager.fragment chooses (fp32 for floats, the buffer's own dtype for int and fp8)
    dtype = src.dtype if src.dtype == dst.dtype and src.dtype.is_16bit else None
    frag = stager.fragment(dst if dst.scope == N.SHARED else src, tile, s.loc, dtype)
    return [stager.copy(s.src, whole(frag), s.loc), stager.copy(whole(frag), s.dst, s.loc)]


def stage_fill(s, stager: Stager) -> list:
    """T.fill of a shared buffer (not a T.gemm operand): a staging fragment of its shape filled, then copied in."""
    stager.check_element_access(s.buffer, "T.fill of", s.loc)
    frag = stager.fragment(s.buffer, s.buffer.shape, s.loc)
    return [dataclasses.replace(s, buffer=frag), stager.copy(whole(frag), whole(s.buffer), s.loc)]
