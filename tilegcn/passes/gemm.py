"""Gemm lowering: T.gemm on MFMA, and the global -> shared copies that feed it.

Input: Gemm statements and Copy(global -> shared) statements whose shared buffer is a gemm operand.
Output, following the GemmPlan (gemm_plan.py): register-path copies into K-major, XOR-swizzled LDS
tiles (buffer_load + ds_write_b128, or ds_write_b16 when the operand must be transposed), then per
k-step pair one ds_read_b128 per operand fragment (the next pair's reads issued before this pair's
MFMAs, into a second register set) and the MFMA sequence into accumulators held in AGPRs.
Barriers: a write to LDS after LDS was read waits at an s_barrier (other waves may still read the
previous tile); a read after a write waits at one too (the wait pass adds the counters before it).
"""
from __future__ import annotations

import functools

import numpy as np
import sympy

from ..amdgcn.abi import WORKITEM_ID
from ..amdgcn.isa import EXEC, VCC
from ..amdgcn.memory import access_width, masked_dims
from ..errors import CompileError
from ..ir import nodes as N
from .context import Context
from .gemm_plan import TID, WAVE, plan_gemm

DS_WRITE_HALF = ("ds_write_b16", "ds_write_b16_d16_hi")  # low / high 16 bits of the data VGPR


def _gemm_dims(s: N.Gemm):
    M, N_ = s.C.shape
    K = s.A.shape[0] if s.transpose_A else s.A.shape[1]
    return M, N_, K


@functools.lru_cache(maxsize=256)
def cached_plan(arch_name: str, dtype_name: str, M: int, N_: int, K: int, threads: int, ta: bool, tb: bool):
    """Plans depend on the tile config only, not on the problem shape: new shapes reuse them."""
    return plan_gemm(arch_name, dtype_name, M, N_, K, threads, ta, tb)


def plan_gemms(kernel: N.Kernel, arch):
    """({accumulator: plan}, {shared operand buffer: (plan, 'A'|'B')}) for every T.gemm."""
    acc_plans, operands = {}, {}
    for s in N.walk(kernel.body):
        if not isinstance(s, N.Gemm):
            continue
        M, N_, K = _gemm_dims(s)
        try:
            plan = cached_plan(arch.name, s.A.dtype.name, M, N_, K, kernel.threads, s.transpose_A, s.transpose_B)
        except CompileError as e:
            raise type(e)(e.raw_message, location=s.loc) from None
        for buf, role in ((s.C, None), (s.A, "A"), (s.B, "B")):
            known = acc_plans.get(buf) if role is None else operands.get(buf, (None, None))[0]
            if known is not None and known != plan:
                raise CompileError(f"{buf.name} is used by two T.gemm with different shapes", location=s.loc)
        acc_plans[s.C] = plan
        operands[s.A], operands[s.B] = (plan, "A"), (plan, "B")
    return acc_plans, operands


def acc_coords(plan, r: int) -> tuple:
    """(i, j) in the C tile of accumulator register r of this thread, as SymPy in TID.

    The plan's swapped-operand D layout: D'[p][q] with q = i (lane % dim) and
    p = j = 4*G*(reg // 4) + 4*(lane // dim) + reg % 4, G = 64 / dim lane groups."""
    d_regs = plan.mfma.d_regs
    rep, reg = divmod(r, d_regs)
    rm, rn = divmod(rep, plan.repeats_N)
    wave, lane = sympy.floor(TID / WAVE), sympy.Mod(TID, WAVE)
    wm, wn = sympy.floor(wave / plan.waves_N), sympy.Mod(wave, plan.waves_N)
    dim, groups = plan.dim, WAVE // plan.dim
    i = wm * plan.wave_tile_M + rm * dim + sympy.Mod(lane, dim)
    j = wn * plan.wave_tile_N + rn * dim + 4 * groups * (reg // 4) + 4 * sympy.floor(lane / dim) + reg % 4
    return i, j


def accumulator_coords(plan):
    return functools.partial(acc_coords, plan)


# ---- LDS synchronisation ----------------------------------------------------------------------------------

def lds_barrier(ctx: Context, access: str):
    """Emit s_barrier when `access` ('write' or 'read') follows the other kind of LDS access."""
    if (access, ctx.lds_state) in (("write", "read"), ("read", "written")):
        ctx.b.emit("s_barrier", comment=f"LDS {access} after {'reads' if access == 'write' else 'writes'}")
    ctx.lds_state = "written" if access == "write" else "read"


def _lds_address(ctx: Context, family, key, extra: int, offsets_of_all_threads):
    """(VGPR base, offset:) for the LDS byte address family[key] + extra.

    The plan's base is 0 at a reference thread and may be negative elsewhere; it is shifted to be
    non-negative on every thread (the 32-bit address sum must not rely on wrapping), and the constant
    is split so `offset:` stays within its 16 bits. `offsets_of_all_threads`: the numeric offsets of
    this access for every thread (numpy), from which the base's minimum follows."""
    index = family.base_of[key]
    low = int(np.min(offsets_of_all_threads)) - family.const[key]
    const = family.const[key] + extra + low
    limit = ctx.b.arch.ds_max_imm_offset + 1
    high, imm = divmod(const, limit)
    return ctx.lower.vgpr(family.bases[index] - low + high * limit), imm


class _ExecMask:
    """Runs of a copy beyond its last run: lanes with slot*threads + tid >= runs are switched off."""

    def __init__(self, ctx: Context, active_lanes: int):
        self.ctx, self.active = ctx, active_lanes
        self.saved = None

    def __enter__(self):
        if self.active >= self.ctx.threads:
            return self
        b = self.ctx.b
        self.saved = b.s.alloc(2, align=2, what="saved exec")
        b.emit("v_cmp_gt_u32", VCC, b.sgpr_constant(self.active) if self.active > 64 else self.active,
               WORKITEM_ID, defs=(VCC,))
        b.emit("s_and_saveexec_b64", self.saved, VCC, defs=(self.saved, EXEC), uses=(VCC, EXEC))
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            self.ctx.b.emit("s_mov_b64", EXEC, self.saved, defs=(EXEC,), uses=(self.saved,))
            self.ctx.b.s.free(self.saved)


# ---- global -> shared ---------------------------------------------------------------------------------------

def _misalignment(src: N.Buffer) -> str:
    """Why an operand tensor cannot be read in 4-byte pieces, in the user's terms."""
    if not src.spec.aligned16:
        return ("its data pointer is not 16-byte aligned (a view that starts inside a row, such as "
                "A[:, 1:]), and T.gemm operands are read in 16-byte pieces; pass a copy (.clone())")
    stride = next((st for st in src.spec.strides[:-1] if st * src.dtype.bytes % 4), src.shape[-1])
    if stride == src.shape[-1]:
        return f"rows of {stride} {src.dtype.name} elements are not 4-byte aligned: T.gemm needs an even row length"
    return (f"its row stride of {stride} {src.dtype.name} elements is odd (a view into a wider tensor); "
            "pass a copy (.contiguous() or .clone())")


def lower_shared_copy(ctx: Context, s: N.Copy):
    src, dst = s.src.buffer, s.dst.buffer
    if (src.scope, dst.scope) != (N.GLOBAL, N.SHARED):
        raise CompileError(f"T.copy from {src.scope} to {dst.scope} is not supported yet", location=s.loc)
    if dst not in ctx.gemm_operands:
        raise CompileError(f"shared buffer {dst.name} is not a T.gemm operand: shared memory is only "
                           "supported as gemm operand staging for now", location=s.loc)
    plan, operand = ctx.gemm_operands[dst]
    cp = plan.copy_plan(operand)
    region = s.src
    if len(src.shape) != 2 or tuple(region.extents) != tuple(cp.tile_shape):
        raise CompileError(f"copy into {dst.name}{list(dst.shape)} from a {len(src.shape)}-d tile "
                           f"{tuple(region.extents)}; expected a 2-d {cp.tile_shape} tile", location=s.loc)
    if src.spec.strides[-1] != 1:
        raise CompileError(f"{src.name} has strides {src.spec.strides}: tilegcn needs the last dimension "
                           "contiguous (stride 1); call .contiguous()", location=s.loc)
    mask = masked_dims(src, region.starts, region.extents)
    width = access_width(src, 8, 1 in mask)
    if width < 4:
        raise CompileError(f"{src.name}: {_misalignment(src)}", location=s.loc)
    b = ctx.b
    per = width // src.dtype.bytes
    base = ctx.shared[dst] - plan.operand_lds_offset(operand)
    staged = []
    tids = np.arange(ctx.threads)
    for slot in range(cp.slots):
        regs = b.v.alloc(4, align=4, what=f"staging {dst.name}")
        row = _family_expr(cp.global_row_family, slot)
        col = _family_expr(cp.global_col_family, slot)
        with _ExecMask(ctx, cp.runs - slot * ctx.threads):
            for piece in range(8 // per):
                index = (region.starts[0] + row, region.starts[1] + col + piece * per)
                dw = width // 4
                ctx.access.load(regs[piece * dw:(piece + 1) * dw], width, src, index, mask,
                                comment=f"{src.name} -> {dst.name} slot {slot}")
        staged.append((slot, regs))
    lds_barrier(ctx, "write")
    for slot, regs in staged:
        with _ExecMask(ctx, cp.runs - slot * ctx.threads):
            for e in range(cp.writes_per_slot):
                numeric = cp.lds_offsets(tids, slot)[e]
                vaddr, imm = _lds_address(ctx, cp.lds_offsets_family, (slot, e), base, numeric)
                if cp.kind == "b128":
                    b.emit("ds_write_b128", vaddr, regs, suffix=f"offset:{imm}")
                else:
                    b.emit(DS_WRITE_HALF[e % 2], vaddr, regs[e // 2], suffix=f"offset:{imm}",
                           comment=f"transpose element {e}")
        b.v.free(regs)


def _family_expr(family, key):
    return family.base_expr(key) + family.const[key]


# ---- the MFMA loop body ---------------------------------------------------------------------------------

def lower_gemm(ctx: Context, s: N.Gemm):
    b = ctx.b
    plan = ctx.gemm_plans[s.C]
    acc = ctx.layouts[s.C].regs
    op_name = plan.mfma.name(s.A.dtype.short)
    lds_barrier(ctx, "read")
    bases = {"A": ctx.shared[s.A] - plan.operand_lds_offset("A"),
             "B": ctx.shared[s.B] - plan.operand_lds_offset("B")}
    reps = {"A": plan.repeats_M, "B": plan.repeats_N}
    sets = [{op: [b.v.alloc(4, align=4, what=f"{op} fragment") for _ in range(reps[op])] for op in "AB"}
            for _ in range(min(2, plan.read_steps))]

    tids = np.arange(ctx.threads)

    def issue_reads(step: int):
        regs = sets[step % len(sets)]
        for read in plan.reads(step):
            numeric = plan.operand_read_offsets(read.operand, tids // WAVE, tids % WAVE, read.rep, step)
            vaddr, imm = _lds_address(ctx, plan.read_offsets(read.operand), (read.rep, step), bases[read.operand],
                                      numeric)
            b.emit("ds_read_b128", regs[read.operand][read.rep], vaddr, suffix=f"offset:{imm}")

    issue_reads(0)
    for step in range(plan.read_steps):
        if step + 1 < plan.read_steps:
            issue_reads(step + 1)
        regs = sets[step % len(sets)]
        for issue in plan.mfma_sequence(step):
            (read_b, first_b, n_b), (read_a, first_a, n_a) = issue.src_a, issue.src_b
            src_a = regs["B"][read_b.rep][first_b:first_b + n_b]
            src_b = regs["A"][read_a.rep][first_a:first_a + n_a]
            d = acc[issue.acc_first:issue.acc_first + issue.acc_count]
            b.emit(op_name, d, src_a, src_b, d, defs=(d,), uses=(src_a, src_b, d))
    for group in sets:
        for regs in group.values():
            for r in regs:
                b.v.free(r)
