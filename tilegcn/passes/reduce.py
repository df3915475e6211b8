"""Reduction lowering: T.reduce_sum / max / min / absmax / abssum of a fragment along one dimension.

Input: a Reduce statement whose source and destination have layouts. The reduction is planned from the two
layouts' coords (`plan_reduction`): the source registers of a thread are grouped by the destination register
(a *slot*) of the output element they belong to, and the threads that hold parts of one output element must be
exactly the threads that differ in some thread-id bits. Output code:
per slot, the thread's own elements combined in element order (in-thread), then across the lanes of those bits
(passes/xlane.py: DPP, ds_swizzle, ds_bpermute, v_permlane*_swap), then across waves through LDS scratch that
`scratch_buffers` reserves before the LDS allocation (so the LDS budget counts it).

The destination's layout is the *slice* of the source's (ir/layout.py Slice, given by layout inference from
the op's constraint): every thread keeps the output elements of the rows it held, replicated over the thread-id
bits that were reduced, so a destination may have fewer elements than the workgroup has threads.

A T.Parallel whose fragment only the reduction right after it reads (`elementwise.fused_producers`) is evaluated
here, element by element as the in-thread step combines them, so that fragment never holds registers.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy

from ..amdgcn.isa import Reg
from ..amdgcn.memory import _lane_values
from ..errors import CompileError
from ..ir import nodes as N
from ..ir.ops import statements_of
from ..ir.types import float32
from .context import Context
from .elementwise import ElementEvaluator, fused_producers, identity_fills
from .gemm import lds_barrier
from .layout import TID
from .xlane import ABS_MASK, Abs, Reducer, scratch_bytes


@dataclass
class ReductionPlan:
    slots: list  # per destination register slot: the source elements r (of every thread) reduced into it, in order
    reduce_bits: int  # thread-id bits whose threads hold different partials of one output element

    def lane_bits(self, wave_size: int) -> int:
        return self.reduce_bits & (wave_size - 1)

    def wave_bits(self, wave_size: int) -> int:
        return self.reduce_bits >> (wave_size.bit_length() - 1)


def _per_thread(expr, threads: int) -> np.ndarray:
    """Integer `expr` (SymPy in TID) at every thread id (exactly, in integers where memory._lane_values knows the
    form, else through sympy.lambdify)."""
    expr = sympy.sympify(expr)
    values = _lane_values(expr, TID, threads)
    if values is None:
        values = sympy.lambdify(TID, expr, modules="numpy")(np.arange(threads, dtype=np.int64))
    return np.broadcast_to(np.asarray(values, dtype=np.int64), (threads,))


def _flat(coords, shape, skip: int | None, threads: int) -> np.ndarray:
    """Per thread, the row-major flat index of `coords` in `shape` without dim `skip`."""
    flat = np.zeros(threads, dtype=np.int64)
    for d, extent in enumerate(shape):
        if d != skip:
            flat = flat * extent + _per_thread(coords[d], threads)
    return flat


def _refuse(s, why: str):
    raise CompileError(f"T.reduce_{s.op} of {s.src.name}{list(s.src.shape)} along dim {s.dim}: {why}; "
                       "this layout is not supported yet (reduce a fragment that T.copy loads or a T.gemm "
                       "accumulator)", location=s.loc)


def _invariant_bits(arrays, threads: int) -> int:
    """The thread-id bits whose flip changes none of `arrays` (per-thread values) for any thread."""
    tids = np.arange(threads)
    bits = 0
    for k in range(max(threads - 1, 0).bit_length()):
        if all(np.array_equal(a, a[tids ^ (1 << k)]) for a in arrays):
            bits |= 1 << k
    return bits


def _by_output(src_lay, s, threads: int) -> tuple:
    """({output flat index per thread, as bytes: [source elements r]}, {same key: the array}), in element order."""
    classes: dict = {}
    arrays: dict = {}
    for r in range(src_lay.elems):
        flat = _flat(src_lay.coords(r, threads), s.src.shape, s.dim, threads)
        classes.setdefault(flat.tobytes(), []).append(r)
        arrays[flat.tobytes()] = flat
    return classes, arrays


def _output_bits(s, arrays: dict, threads: int) -> int:
    """The thread-id bits over which the threads holding parts of one output element differ; refuses layouts where
    those threads are not exactly the group of some bits (the butterfly's precondition)."""
    bits = _invariant_bits(arrays.values(), threads)
    held = [set(a.tolist()) for a in arrays.values()]
    out_numel = s.src.numel // s.src.shape[s.dim]
    groups = threads >> bin(bits).count("1")
    if any(len(h) != groups for h in held) or len(set().union(*held)) != out_numel or \
            sum(len(h) for h in held) != out_numel:
        _refuse(s, "the threads holding parts of one output element are not the threads that differ in some "
                   "thread-id bits")
    return bits


def plan_reduction(src_lay, dst_lay, s, threads: int) -> ReductionPlan:
    """Which source elements reduce into which destination register, and over which thread-id bits. Works from the
    two layouts' coords alone (evaluated for every thread), so any pair of layouts where each thread holds the
    outputs of the source elements it holds will do."""
    classes, arrays = _by_output(src_lay, s, threads)
    out_bits = _output_bits(s, arrays, threads)
    by_key = {}
    for slot in range(dst_lay.elems):
        coords = dst_lay.coords(slot, threads)
        skip = s.dim if len(s.dst.shape) == len(s.src.shape) else None
        by_key[_flat(coords, s.dst.shape, skip, threads).tobytes()] = slot
    if sorted(by_key) != sorted(classes) or len(by_key) != dst_lay.elems:
        _refuse(s, f"the layout of {s.dst.name} does not keep each output element on the threads that hold its parts")
    slots = [classes[key] for key, _ in sorted(by_key.items(), key=lambda kv: kv[1])]
    source_copies = _invariant_bits([_per_thread(c, threads) for r in range(src_lay.elems)
                                     for c in src_lay.coords(r, threads)], threads)
    return ReductionPlan(slots, out_bits & ~source_copies)


def reductions(kernel: N.Kernel) -> list:
    return statements_of(kernel.body, "reduce")


def scratch_buffers(kernel: N.Kernel, layouts: dict, arch) -> dict:
    """{Reduce: shared Buffer} for the reductions that cross waves: LDS scratch of one fp32 per output slot and
    lane group (xlane.scratch_bytes)."""
    out = {}
    for s in reductions(kernel):
        plan = plan_reduction(layouts[s.src], layouts[s.dst], s, kernel.threads)
        if plan.wave_bits(arch.wave_size):
            words = scratch_bytes(kernel.threads, len(plan.slots), plan.lane_bits(arch.wave_size)) // 4
            out[s] = N.Buffer(f"{s.dst.name}_partials", N.SHARED, float32, (words,), loc=s.loc)
    return out


# ---- lowering ----------------------------------------------------------------------------------------------

def _read(ctx: Context, s, r: int, temps: list, producer):
    """Source element r as an fp32 VGPR (as Abs(VGPR) for absmax / abssum); temporaries go into `temps`. With a
    fused T.Parallel (an ElementEvaluator of it, see fused_producers) element r is computed into a temporary: the
    fragment itself is never written."""
    if producer is not None:
        value = producer.vgpr(producer.eval(ctx.current_parallel.value, r))
        temps.extend(producer.temps)
        producer.temps = []
    else:
        value, temp = ctx.read_f32(s.src, r)
        if temp:
            temps.append(value)
    return Abs(value) if s.op.startswith("abs") else value


def _in_thread(ctx: Context, s, red: Reducer, rs: list, acc: Reg, producer, twins: dict | None = None) -> Reg:
    """acc = op over this thread's source elements `rs`, in element order (a sum: as a tree, see _summed_in_pairs);
    returns the register holding it: acc, or, where `twins` (a dict) asks for the value in two registers, one of a
    pair holding it twice (the other recorded in twins)."""
    b = ctx.b
    temps: list = []
    first = _read(ctx, s, rs[0], temps, producer)
    if len(rs) == 1:
        if isinstance(first, Abs):
            b.valu("v_and_b32", acc, ABS_MASK, first.reg)
        else:
            b.valu("v_mov_b32", acc, first)
    elif red.takes_three() and not isinstance(first, Abs):
        _in_thread_by_threes(ctx, s, red, rs, acc, producer, first, temps)
    elif (summed := _summed_in_pairs(ctx, s, red, rs, acc, producer, twins)) is not None:
        acc = summed
    else:
        red.combine(acc, first, _read(ctx, s, rs[1], temps, producer))
        for r in rs[2:]:
            red.combine(acc, acc, _read(ctx, s, r, temps, producer))
            for t in temps:
                b.v.free(t)
            temps = []
    for t in temps:
        b.v.free(t)
    return acc


def _in_thread_by_threes(ctx: Context, s, red: Reducer, rs: list, acc: Reg, producer, first, temps: list):
    """acc = max / min over `rs` two new elements an instruction (v_maximum3_f32, or gfx942's v_max3_f32 with a NaN
    mask: Reducer.combine3; flash attention's row max over a 32 x 64 score tile per wave: 16 instead of 31 a row
    slot)."""
    b = ctx.b
    second = _read(ctx, s, rs[1], temps, producer)
    if len(rs) == 2:
        red.combine(acc, first, second)
    else:
        red.combine3(acc, first, second, _read(ctx, s, rs[2], temps, producer))
    _free(b, temps)
    rest = rs[3:]
    for i in range(0, len(rest), 2):
        x = _read(ctx, s, rest[i], temps, producer)
        y = _read(ctx, s, rest[i + 1], temps, producer) if i + 1 < len(rest) else x
        red.combine3(acc, acc, x, y)
        _free(b, temps)
    red.end_threes(acc)


def _summed_in_pairs(ctx: Context, s, red: Reducer, rs: list, acc: Reg, producer, twins: dict | None = None):
    """acc = the sum of this thread's elements `rs` as a tree of v_pk_add_f32 (two sums an instruction, gfx90a and
    later): pair k of the elements plus pair k + n/2 at each level, then the last pair's two halves. About half the
    instructions of a sequential sum and a chain of log2 depth (flash attention's row sum over 32 values: 16 where it
    was 31, the longest chain 6 where it was 31). Needs fp32 elements held in VGPR pairs (r, r + 1) that the register
    allocator places at even registers; None, emitting nothing, elsewhere (the caller sums in element order).
    Returns the register holding the sum: acc, or with `twins` (a dict: the first cross-lane step is a
    v_permlane*_swap, which needs the value in two registers) the low half of a pair whose last v_pk_add_f32 gives
    both halves the sum (lo + hi and hi + lo, equal bit for bit), the high half recorded as its twin: no copy.
    Not where the arch says packed-f32 sums do not pay (Arch.packed_f32_sums: gfx942)."""
    if red.integer or red.op != "sum" or s.op != "sum" or producer is not None or len(rs) < 4 \
            or not red.arch.packed_f32_sums:
        return None
    lay = ctx.layouts[s.src]
    if lay.packed or lay.regs.file != "v" or s.src.dtype != float32:
        return None
    pairs = []
    for a, c in zip(rs[::2], rs[1::2]):
        pair = _aligned_pair(ctx.b, lay.regs[a], lay.regs[c])
        if pair is None:
            return None
        pairs.append(pair)
    b = ctx.b
    level, odd = pairs, rs[len(pairs) * 2:]
    while len(level) > 1:
        half = len(level) // 2
        out = []
        for x, y in zip(level[:half], level[half:2 * half]):
            sums = x if x not in pairs else b.v.alloc(2, align=2, what=f"{s.dst.name} pair sums")
            b.emit("v_pk_add_f32", sums, x, y, defs=(sums,), uses=(x, y))
            out.append(sums)
        level = out + level[2 * half:]
    last = level[0]
    if twins is not None and not odd:
        # one pair for this destination slot in every such reduction (flash attention's row sum, once a tile): the
        # moves into the destination then all read one register, which amdgcn/coalesce.py merges with it
        key = (s.dst, acc)
        if key not in ctx.row_factor_pairs:
            ctx.row_factor_pairs[key] = b.v.alloc(2, align=2, what=f"{s.dst.name} sum, twice")
        both = ctx.row_factor_pairs[key]
        b.emit("v_pk_add_f32", both, last, last, suffix="op_sel:[0,1] op_sel_hi:[1,0]", defs=(both,),
               uses=(last,), comment="the two halves' sum in both halves")
        twins[both[0]] = both[1]
        return both[0]
    red.combine(acc, last[0], last[1])
    for r in odd:
        red.combine(acc, acc, lay.regs[r])
    return acc


def _aligned_pair(b, lo: Reg, hi: Reg) -> Reg | None:
    """The VGPR pair lo:hi as one 2-register operand where the register allocator will place lo at an even register
    (its virtual group's alignment, or the ISA's tuple alignment of a group of several registers, is even and lo
    sits an even distance into the group); None otherwise."""
    if not (lo.virtual and hi.virtual and hi.index == lo.index + 1):
        return None
    groups = b.v.groups
    group = groups[b.v.group_of[lo.index]]
    if b.v.group_of[hi.index] != b.v.group_of[lo.index]:
        return None
    align = max(group.align, b.arch.register_alignment("v", group.count))
    if align % 2 or (lo.index - group.base) % 2:
        return None
    return Reg("v", lo.index, 2, virtual=True)


def _free(b, temps: list):
    for t in temps:
        b.v.free(t)
    temps.clear()


def _in_threads(ctx: Context, s, red: Reducer, plan: ReductionPlan, direct: bool, twins: dict | None) -> list:
    """The in-thread step for every destination slot: one fp32 VGPR each (the destination's own where `direct`,
    unless the value went to a pair for `twins`: see _in_thread)."""
    dst_lay = ctx.layouts[s.dst]
    fused = fused_producers(ctx).get(s)
    ctx.current_parallel = fused
    producer = ElementEvaluator(ctx, {}) if fused is not None else None
    values = []
    for slot, rs in enumerate(plan.slots):
        acc = dst_lay.regs[slot] if direct else ctx.b.v.alloc(what=f"{s.dst.name} partial")
        values.append(_in_thread(ctx, s, red, rs, acc, producer, twins))
    ctx.current_parallel = None
    return values


def lower_reduce(ctx: Context, s):
    """In-thread, across lanes, across waves; the results land in the destination's registers (fp32 ones directly,
    where the old values are not needed), combined with the old values for clear=False."""
    b = ctx.b
    plan = plan_reduction(ctx.layouts[s.src], ctx.layouts[s.dst], s, ctx.threads)
    dst_lay = ctx.layouts[s.dst]
    clear = s.clear or s in identity_fills(ctx)  # (combining with the identity T.fill gave changes nothing)
    direct = clear and not dst_lay.packed and dst_lay.regs.file == "v"
    red = Reducer(b, s.op, integer=_integer_reduction(s))
    lane_bits, wave_bits = plan.lane_bits(b.arch.wave_size), plan.wave_bits(b.arch.wave_size)
    twins = {} if red.first_step_swaps(lane_bits) else None
    values = _in_threads(ctx, s, red, plan, direct, twins)
    red.across_lanes(values, lane_bits, twins)
    red.free()
    if wave_bits:
        red.across_waves(values, lane_bits, wave_bits, ctx.threads, ctx.shared[ctx.reduce_scratch[s]],
                         lambda access: lds_barrier(ctx, access))
    if direct:
        _store(ctx, s.dst, values)  # (moves only for a value held in a twin pair: amdgcn/coalesce.py drops them)
        return
    if not clear:
        for slot, x in enumerate(values):
            old, temp = ctx.read_f32(s.dst, slot)
            red.combine(x, x, old)
            if temp:
                b.v.free(old)
    _store(ctx, s.dst, values)
    for x in values:
        b.v.free(x)


def _integer_reduction(s) -> bool:
    """Whether `s` combines 32-bit ints (an int source: sum, max, min into an int destination)."""
    if not s.src.dtype.is_int and not s.dst.dtype.is_int:
        return False
    if s.src.dtype.is_int != s.dst.dtype.is_int:
        raise CompileError(f"T.reduce_{s.op} of {s.src.name} ({s.src.dtype.name}) into {s.dst.name} "
                           f"({s.dst.dtype.name}): an int fragment reduces into an int fragment; T.copy it into a "
                           "fragment of the other dtype first (T.copy converts)", location=s.loc)
    if s.op.startswith("abs"):
        raise CompileError(f"T.reduce_{s.op} of the int fragment {s.src.name}: absmax / abssum reduce float "
                           "fragments; T.copy it into a float32 fragment first", location=s.loc)
    if s.src.dtype.bytes < 4 and s.op == "sum":
        raise CompileError(f"T.reduce_sum of the {s.src.dtype.name} fragment {s.src.name}: its sum would not wrap "
                           f"to {s.src.dtype.name}; T.copy it into an int32 fragment first", location=s.loc)
    return True


def _store(ctx: Context, dst: N.Buffer, values: list):
    if not ctx.layouts[dst].packed:
        for slot, x in enumerate(values):
            ctx.write_f32(dst, slot, x)
        return
    for slot in range(0, len(values), 2):
        ctx.write_f32(dst, slot, values[slot], values[slot + 1] if slot + 1 < len(values) else None)
