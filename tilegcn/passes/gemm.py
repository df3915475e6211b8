"""Gemm lowering: T.gemm on MFMA, and the global -> shared copies that feed it.

Input: Gemm statements and Copy(global -> shared) statements whose shared buffer is a gemm operand.
Output, following the GemmPlan (gemm_plan.py): register-path copies into XOR-swizzled LDS tiles, K-major
(buffer_load + ds_write_b128, or, when the operand must be transposed, v_perm_b32 packing the 16-bit halves of
runs at consecutive k into k pairs + ds_write_b32/b64/b128) or, on gfx950, as stored ((K, X) tiles:
ds_write_b128), then per k-step pair one ds_read_b128 per operand fragment, two ds_read_b64_tr_b16 from a (K, X)
tile (the next pair's reads issued before this pair's MFMAs, into a second register set) and the MFMA sequence
into accumulators held in AGPRs.
Barriers: a write to LDS after LDS was read waits at an s_barrier (other waves may still read the
previous tile); a read after a write waits at one too (the wait pass adds the counters before it).

Pipelined loops (passes/pipelining.py): AsyncCopy into stage s is an LDS DMA where `dma_lane_bytes` says so (by
default gfx950, an operand kept as stored in LDS, 16-byte rows; `tilegcn.jit(copy=...)` picks a path: "lds_dma" also
takes gfx942's 4-byte buffer_load_dword ... lds), else buffer_loads into staging VGPRs fixed per (buffer, stage)
whose ds_writes are deferred to the WaitGroup that retires the group. Every LDS write of a stage names it as a memory
effect (`waitcnt.lds_tag`), and a WaitGroup ends in one s_barrier that publishes exactly the retired stages, so the wait
pass emits the exact vmcnt / lgkmcnt for them and leaves the younger stages in flight.
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field

import sympy

from ..amdgcn import isa
from ..amdgcn.abi import WORKITEM_ID
from ..amdgcn.addr import linear_form, split_const
from ..amdgcn.isa import M0, VCC, Inst, Reg
from ..amdgcn.waitcnt import lds_tag
from ..amdgcn.memory import access_width, masked_dims, provably_multiple
from ..amdgcn.symcache import memo
from ..errors import CompileError
from ..ir import nodes as N
from ..ir.layout import mfma_acc_offsets, mfma_acc_origin
from ..ir.ops import TileOp, statements_of
from .context import Context, LaneMask
from .gemm_plan import CHUNK, TID, WAVE, plan_gemm
from .lds import stage_counts

PERM_LOW_HALVES, PERM_HIGH_HALVES = 0x05040100, 0x07060302  # v_perm_b32 selectors: {s0[15:0], s1[15:0]}, [31:16]
DMA_LOAD = {4: "buffer_load_dword", 16: "buffer_load_dwordx4"}  # LDS DMA per lane bytes (with `lds`)
DS_WRITE_HALF = ("ds_write_b16", "ds_write_b16_d16_hi")  # low / high 16 bits of the data VGPR


def _gemm_dims(s: TileOp):
    M, N_ = s.C.shape
    K = s.A.shape[0] if s.transpose_A else s.A.shape[1]
    return M, N_, K


@functools.lru_cache(maxsize=256)
def cached_plan(arch_name: str, dtype_name: str, M: int, N_: int, K: int, threads: int, ta: bool, tb: bool,
                a_in_registers: bool = False, policy: str | None = None, scaled: bool = False,
                a_k_free: bool = False):
    """Plans depend on the tile config only, not on the problem shape: new shapes reuse them."""
    return plan_gemm(arch_name, dtype_name, M, N_, K, threads, ta, tb, a_in_registers=a_in_registers, policy=policy,
                     scaled=scaled, a_k_free=a_k_free)


def plan_gemms(kernel: N.Kernel, arch):
    """({accumulator: plan}, {shared operand buffer: (plan, 'A'|'B')}) for every T.gemm."""
    acc_plans, operands = {}, {}
    for s in statements_of(kernel.body, "gemm"):
        M, N_, K = _gemm_dims(s)
        try:
            plan = cached_plan(arch.name, s.A.dtype.name, M, N_, K, kernel.threads, s.transpose_A, s.transpose_B,
                               s.A.scope == N.FRAGMENT, s.policy, s.scaled, _loaded_only(kernel, s.A))
        except CompileError as e:
            raise type(e)(e.raw_message, location=s.loc) from None
        shared = [(buf, role) for buf, role in ((s.A, "A"), (s.B, "B")) if buf.scope == N.SHARED]
        for buf, role in [(s.C, None)] + shared:
            known = acc_plans.get(buf) if role is None else operands.get(buf, (None, None))[0]
            if known is not None and known != plan:
                raise CompileError(f"{buf.name} is used by two T.gemm with different shapes", location=s.loc)
        acc_plans[s.C] = plan
        operands.update({buf: (plan, role) for buf, role in shared})
    return acc_plans, operands


def _loaded_only(kernel: N.Kernel, frag: N.Buffer) -> bool:
    """Whether fragment `frag` is written only by copies from global memory (flash attention's Q after
    passes/operand_registers.py): its layout is free, no register computation fixes its k order."""
    if frag.scope != N.FRAGMENT:
        return False
    writers = [x for x in N.walk(kernel.body) if not x.bodies() and frag in {w.buffer for w in x.writes()}]
    return bool(writers) and all(r.buffer.scope == N.GLOBAL for x in writers for r in x.reads())


def acc_coords(plan, r: int) -> tuple:
    """(i, j) in the C tile of accumulator register r of this thread, as SymPy in TID.

    The plan's swapped-operand D layout: D'[p][q] with q = i (lane % dim) and
    p = j = 4*G*(reg // 4) + 4*(lane // dim) + reg % 4, G = 64 / dim lane groups."""
    return _acc_coords(plan.mfma.d_regs, plan.repeats_N, plan.waves_N, plan.dim, plan.wave_tile_M, plan.wave_tile_N, r)


@memo  # pure SymPy construction, asked for every accumulator register of every epilogue
def _acc_coords(d_regs: int, repeats_N: int, waves_N: int, dim: int, wave_tile_M: int, wave_tile_N: int, r: int):
    i0, j0 = _acc_origin(waves_N, dim, wave_tile_M, wave_tile_N)
    di, dj = _acc_offsets(d_regs, repeats_N, dim, r)
    return i0 + di, j0 + dj  # one SymPy addition each


def _acc_offsets(d_regs: int, repeats_N: int, dim: int, r: int) -> tuple:
    """(i, j) of accumulator register r minus those of register 0: integers, the same on every thread."""
    return mfma_acc_offsets(d_regs, repeats_N, dim, r)


def acc_origin_and_offsets(plan, r: int) -> tuple:
    """((i0, j0), (di, dj)) with acc_coords(plan, r) == (i0 + di, j0 + dj): an origin in TID shared by every
    register of the thread, and integer offsets (the epilogue's accesses differ by these only)."""
    return (_acc_origin(plan.waves_N, plan.dim, plan.wave_tile_M, plan.wave_tile_N),
            _acc_offsets(plan.mfma.d_regs, plan.repeats_N, plan.dim, r))


@memo
def _acc_origin(waves_N: int, dim: int, wave_tile_M: int, wave_tile_N: int):
    """The thread-dependent part of _acc_coords, shared by all registers (ir/layout.py has the formula)."""
    return mfma_acc_origin(waves_N, dim, wave_tile_M, wave_tile_N)


def accumulator_coords(plan):
    return functools.partial(acc_coords, plan)


def accumulator_origin_and_offsets(plan):
    return functools.partial(acc_origin_and_offsets, plan)


# ---- LDS synchronisation ----------------------------------------------------------------------------------

def lds_barrier(ctx: Context, access: str):
    """Emit s_barrier when `access` ('write' or 'read') follows the other kind of LDS access (state "any": a loop's
    head, after either kind in the previous trip)."""
    if ctx.lds_state == "any" or (access, ctx.lds_state) in (("write", "read"), ("read", "written")):
        ctx.b.emit("s_barrier", comment=f"LDS {access} after {'reads' if access == 'write' else 'writes'}")
    ctx.lds_state = "written" if access == "write" else "read"


def _lds_address(ctx: Context, family, key, extra: int):
    """(VGPR base, offset:) for the LDS byte address family[key] + extra.

    The plan's base is 0 at a reference thread and may be negative elsewhere; it is shifted to be
    non-negative on every thread (the 32-bit address sum must not rely on wrapping), and the constant
    is split so `offset:` stays within its 16 bits. The base's minimum follows from the smallest offset
    of this access over every thread (`family.lowest`, computed once with the plan)."""
    base, shift, imm = _lds_base_shift(ctx, family, key, extra)
    return ctx.lower.vgpr_plus(base, shift), imm


def _lds_base_shift(ctx: Context, family, key, extra: int) -> tuple:
    """(SymPy base, integer shift, offset:) with family[key] + extra == base + shift + offset: (_lds_address)."""
    low = family.lowest[key] - family.const[key]
    const = family.const[key] + extra + low
    limit = ctx.b.arch.ds_max_imm_offset + 1
    high, imm = divmod(const, limit)
    return family.bases[family.base_of[key]], high * limit - low, imm


def _read_address(ctx: Context, family, key, extra: int):
    """(VGPR, `offset:` suffix) of _lds_address for a gemm's fragment read: every gemm of a pipelined loop reads
    the same few addresses (a base of the family plus an integer) again."""
    base, shift, imm = _lds_base_shift(ctx, family, key, extra)
    return ctx.lower.vgpr_plus(base, shift), _offset_suffix(imm)


@functools.lru_cache(maxsize=1 << 12)
def _offset_suffix(imm: int) -> str:
    return f"offset:{imm}"


class _ExecMask(LaneMask):
    """Runs of a copy beyond its last run: lanes with slot*threads + tid >= runs are switched off."""

    save_first = True

    def __init__(self, ctx: Context, active_lanes: int):
        super().__init__(ctx)
        self.active = active_lanes

    def needed(self) -> bool:
        return self.active < self.ctx.threads

    def set_vcc(self, b):
        b.emit("v_cmp_gt_u32", VCC, b.sgpr_constant(self.active) if self.active > 64 else self.active,
               WORKITEM_ID, defs=(VCC,))


# ---- global -> shared ---------------------------------------------------------------------------------------

def _misalignment(src: N.Buffer) -> str:
    """Why an operand tensor cannot be read in 4-byte pieces, in the user's terms."""
    if not src.spec.aligned16:
        return ("its data pointer is not 16-byte aligned (a view that starts inside a row, such as "
                "A[:, 1:]), and T.gemm operands are read in 16-byte pieces; pass a copy (.clone())")
    stride = next((st for st in src.spec.strides[:-1] if not provably_multiple(st * src.dtype.bytes, 4)),
                  src.shape[-1])
    if not isinstance(stride, int):  # of T.dynamic sizes, not multiples of 16 in this call's class
        return (f"its rows of {stride} {src.dtype.name} elements (a dynamic size, T.dynamic) are not known to be "
                "4-byte aligned, and T.gemm reads its operands in 4- to 16-byte pieces: this call's size is not a "
                "multiple of 16 (sizes that are compile a kernel of their own); pad that size to a multiple of 16, or "
                "drop T.dynamic for it")
    if stride == src.shape[-1]:
        return f"rows of {stride} {src.dtype.name} elements are not 4-byte aligned: T.gemm needs an even row length"
    return (f"its row stride of {stride} {src.dtype.name} elements is odd (a view into a wider tensor); "
            "pass a copy (.contiguous() or .clone())")


def _check_shared_copy(ctx: Context, s: TileOp):
    """(plan, operand, masked dims, access width) of a global -> shared gemm operand copy, or CompileError."""
    src, dst = s.src.buffer, s.dst.buffer
    if (src.scope, dst.scope) != (N.GLOBAL, N.SHARED):
        raise CompileError(f"T.copy from {src.scope} to {dst.scope} is not supported yet", location=s.loc)
    if dst not in ctx.gemm_operands:
        raise CompileError(f"shared buffer {dst.name} is not a T.gemm operand: shared memory is only "
                           "supported as gemm operand staging for now", location=s.loc)
    plan, operand = ctx.gemm_operands[dst]
    cp = plan.copy_plan(operand)
    region = s.src
    dims = tile_dims(region)
    if len(dims) != 2 or dims[1] != len(src.shape) - 1 or \
            tuple(region.extents[d] for d in dims) != tuple(cp.tile_shape):
        raise CompileError(f"copy into {dst.name}{list(dst.shape)} from a {len(src.shape)}-d tile "
                           f"{tuple(region.extents)}; expected a {cp.tile_shape} tile (dims of extent 1 aside) whose "
                           f"rows run along {src.name}'s last dim", location=s.loc)
    if src.spec.strides[-1] != 1:
        raise CompileError(f"{src.name} has strides {src.spec.strides}: tilegcn needs the last dimension "
                           "contiguous (stride 1); call .contiguous()", location=s.loc)
    mask = masked_dims(src, region.starts, region.extents)
    width = access_width(src, plan.elems_per_chunk, len(src.shape) - 1 in mask)
    if width < 4:
        raise CompileError(f"{src.name}: {_misalignment(src)}", location=s.loc)
    return plan, operand, mask, width


def tile_dims(region: N.Region) -> list:
    """The dims of a gemm operand copy's global region that are the tile's rows and columns: those of extent > 1
    (`K[bz, k * bn:(k + 1) * bn, by, :]` of a BSHD tensor: dims 1 and 3)."""
    return [d for d, e in enumerate(region.extents) if e != 1]


def _lds_base(ctx: Context, plan, operand: str, buf: N.Buffer, stage: int) -> int:
    """What to add to the plan's LDS offsets of `operand` (stage 0) for `buf`'s allocation at `stage`."""
    _, index = ctx.lds_slot(buf, stage)
    return ctx.shared[buf] - plan.operand_lds_offset(operand) + index * ctx.stage_bytes.get(buf, 0)


def _load_to_registers(ctx: Context, s: TileOp, cp, mask, width: int, regs: list):
    """buffer_load the copy's 16-byte runs, slot by slot, into regs[slot] (4 VGPRs each)."""
    src, region = s.src.buffer, s.src
    per = width // src.dtype.bytes
    dw = width // 4
    origins: dict = {}
    live = getattr(s, "live", None)
    resource = None if live is None else functools.partial(_masked, ctx, live)
    with _live_trips(ctx, live):
        for slot in range(cp.slots):
            index, shift = _slot_index(region, cp, slot, origins)
            with _ExecMask(ctx, cp.active_threads(slot)):
                for piece in range(cp.plan.elems_per_chunk // per):
                    ctx.access.load(regs[slot][piece * dw:(piece + 1) * dw], width, src, index, mask,
                                    comment=f"{src.name} -> {s.dst.buffer.name} slot {slot}",
                                    shift=shift[:-1] + (shift[-1] + piece * per,), resource=resource)


def _write_staged(ctx: Context, cp, base: int, regs: list, defs=None):
    """ds_write the staged runs into the LDS tile at `base` (+ the plan's offsets); `defs`: LDS region tag."""
    for slot in cp.write_slots:
        with _ExecMask(ctx, cp.active_threads(slot)):
            if cp.kind == "transpose" and cp.plan.dtype.bytes == 1 and cp.pack == 4:
                _write_byte_quads(ctx, cp, slot, base, regs[slot:slot + 4], defs)
                continue
            for e in range(cp.writes_per_slot):
                vaddr, imm = _lds_address(ctx, cp.lds_offsets_family, (slot, e), base)
                if cp.kind == "b128":
                    ctx.b.emit("ds_write_b128", vaddr, regs[slot], suffix=f"offset:{imm}", defs=defs)
                else:
                    _write_packed(ctx, cp, vaddr, imm, regs[slot:slot + cp.pack], e, defs)


def _write_packed(ctx: Context, cp, vaddr, imm: int, runs: list, e: int, defs):
    """ds_write of element e of `runs` (staged at consecutive k): pair d packs element e of runs 2d (low half) and
    2d + 1 (high half), from the low or high halves of their VGPR e // 2, by v_perm_b32; a single run writes its
    16-bit half directly."""
    b = ctx.b
    if cp.plan.dtype.bytes == 1:
        _write_packed_bytes(ctx, cp, vaddr, imm, runs, e, defs)
        return
    if cp.pack == 1:
        b.emit(DS_WRITE_HALF[e % 2], vaddr, runs[0][e // 2], suffix=f"offset:{imm}", defs=defs, comment=f"x + {e}")
        return
    pairs = b.v.alloc(cp.pack // 2, align=min(2, cp.pack // 2), what="packed k pairs")
    select = b.sgpr_constant(PERM_HIGH_HALVES if e % 2 else PERM_LOW_HALVES)
    for d in range(cp.pack // 2):
        b.valu("v_perm_b32", pairs[d], runs[2 * d + 1][e // 2], runs[2 * d][e // 2], select)
    b.emit(f"ds_write_b{16 * cp.pack}", vaddr, pairs, suffix=f"offset:{imm}", defs=defs, comment=f"x + {e}, k pairs")
    b.v.free(pairs)


def _byte_select(byte: int) -> int:
    """v_perm_b32 selector: byte `byte` of src1 into byte 0, of src0 into byte 1, zeros above (selector 0x0c)."""
    return 0x0C0C0000 | (4 + byte) << 8 | byte


# v_perm_b32 selectors interleaving bytes 0-1 / 2-3 of two runs (byte i of the result: selector byte i, 0-3 picking
# src1's bytes, 4-7 src0's): {s1.b0, s0.b0, s1.b1, s0.b1} / {s1.b2, s0.b2, s1.b3, s0.b3}
INTERLEAVE_LOW_BYTES, INTERLEAVE_HIGH_BYTES = 0x05010400, 0x07030602


def _write_byte_quads(ctx: Context, cp, slot: int, base: int, runs: list, defs):
    """The 16 bytes of 4 runs at consecutive k (8-bit, pack 4), VGPR by VGPR: a 4 x 4 byte transpose in 8
    v_perm_b32 (pairs of runs interleaved byte by byte, then pairs of those joined by 16-bit halves) gives, for each
    of the VGPR's 4 x, one word of its 4 k, written by ds_write_b32 (12 v_perm_b32 one x at a time)."""
    b = ctx.b
    sel = {name: b.sgpr_constant(v) for name, v in (("lo", INTERLEAVE_LOW_BYTES), ("hi", INTERLEAVE_HIGH_BYTES),
                                                     ("lo16", PERM_LOW_HALVES), ("hi16", PERM_HIGH_HALVES))}
    for reg in range(4):
        pairs = b.v.alloc(4, what="interleaved k pairs")  # runs 0-1 bytes 0-1, 2-3; runs 2-3 bytes 0-1, 2-3
        for d in range(2):
            for half, name in enumerate(("lo", "hi")):
                b.valu("v_perm_b32", pairs[2 * d + half], runs[2 * d + 1][reg], runs[2 * d][reg], sel[name])
        words = b.v.alloc(4, what="4 k of one x")
        for byte in range(4):  # x = 4 * reg + byte: its k 0-1 from pairs[byte // 2], k 2-3 from pairs[2 + ...]
            half = "hi16" if byte % 2 else "lo16"
            b.valu("v_perm_b32", words[byte], pairs[2 + byte // 2], pairs[byte // 2], sel[half])
        b.v.free(pairs)
        for byte in range(4):
            e = 4 * reg + byte
            vaddr, imm = _lds_address(ctx, cp.lds_offsets_family, (slot, e), base)
            b.emit("ds_write_b32", vaddr, words[byte], suffix=f"offset:{imm}", defs=defs, comment=f"x + {e}, 4 k")
        b.v.free(words)


def _write_packed_bytes(ctx: Context, cp, vaddr, imm: int, runs: list, e: int, defs):
    """ds_write of byte e of `runs` (8-bit, staged at consecutive k), byte e % 4 of their VGPR e // 4: one run
    shifts it down (ds_write_b8 stores bits 0-7); two runs select it from both into one 16-bit k pair (v_perm_b32,
    ds_write_b16). Four runs go VGPR by VGPR instead (`_write_byte_quads`)."""
    b = ctx.b
    reg, byte = e // 4, e % 4
    if cp.pack == 1:
        src = runs[0][reg]
        if byte:
            src = b.v.alloc(1, what="byte shifted down")
            b.valu("v_lshrrev_b32", src, 8 * byte, runs[0][reg])
        b.emit("ds_write_b8", vaddr, src, suffix=f"offset:{imm}", defs=defs, comment=f"x + {e}")
        if byte:
            b.v.free(src)
        return
    assert cp.pack == 2, "8-bit transposing copies pack 1, 2 or 4 k (4: _write_byte_quads)"
    pair = b.v.alloc(1, what="packed k pair")
    b.valu("v_perm_b32", pair, runs[1][reg], runs[0][reg], b.sgpr_constant(_byte_select(byte)))
    b.emit("ds_write_b16", vaddr, pair, suffix=f"offset:{imm}", defs=defs, comment=f"x + {e}, 2 k")
    b.v.free(pair)


def lower_shared_copy(ctx: Context, s):
    """A T.copy into shared memory outside a pipelined loop (pipelined ones are AsyncCopy ops: lower_async_copy)."""
    if _is_scale_tile(ctx, s.dst.buffer):
        copy = _ScaleCopy(ctx, s)
        regs = [ctx.b.v.alloc(1, what=f"staging {s.dst.buffer.name}") for _ in range(copy.slots)]
        copy.load(regs)
        lds_barrier(ctx, "write")
        copy.write(regs, 0)
        for r in regs:
            ctx.b.v.free(r)
        return
    plan, operand, mask, width = _check_shared_copy(ctx, s)
    if ctx.copy_mode == "lds_dma":
        raise CompileError("copy='lds_dma' applies to the copies of a pipelined K loop (T.Pipelined with "
                           "num_stages >= 2); this T.copy into shared memory is not pipelined")
    cp = plan.copy_plan(operand)
    b = ctx.b
    regs = [b.v.alloc(4, align=4, what=f"staging {s.dst.buffer.name}") for _ in range(cp.slots)]
    _load_to_registers(ctx, s, cp, mask, width, regs)
    lds_barrier(ctx, "write")
    _write_staged(ctx, cp, _lds_base(ctx, plan, operand, s.dst.buffer, 0), regs)
    for r in regs:
        b.v.free(r)


# ---- pipelined copies: AsyncCopy, CommitGroup, WaitGroup (passes/pipelining.py) ------------------------------

@dataclass
class _Group:
    tags: list = field(default_factory=list)  # LDS regions the group writes (lds_tag pseudo-registers)
    writes: list = field(default_factory=list)  # register path: callables emitting the deferred ds_writes


@dataclass
class PipeState:
    """Copies in flight while a pipelined loop is lowered.

    A register-path copy loads into VGPRs when issued and writes LDS when its group is waited for (one stage
    later), from staging registers fixed per (buffer, stage) so that code lowered once serves every trip of the
    unrolled loop. `reads`: LDS buffers (`ctx.lds_slot`: stages may share one) read by a gemm since the last
    s_barrier; writing one of them needs a barrier first (other waves may still read it)."""

    groups: list = field(default_factory=list)  # committed, not yet published, oldest first
    current: _Group = field(default_factory=_Group)
    reads: set = field(default_factory=set)
    staging: dict = field(default_factory=dict)  # (buffer, stage) -> [4-VGPR Reg per slot]
    tags: dict = field(default_factory=dict)  # (buffer, stage) -> lds_tag Reg
    wave_lds: dict = field(default_factory=dict)  # lane bytes -> SGPR: the wave's lane_bytes * 64 * wave (LDS-DMA M0)
    masked: dict = field(default_factory=dict)  # (V#, loop variable, threshold) -> its masked copy (_masked)
    fragments: list = field(default_factory=list)  # operand registers ping-pong gemms' reads filled, in gemm order
    wave_sgpr: Reg | None = None  # the wave's index in its workgroup (ping-pong wave-group barriers)
    loop_writes: list | None = None  # LDS buffers written before the first barrier of the loop body

    def barrier(self):
        self.reads.clear()
        if self.loop_writes is not None:
            self.loop_writes.append(None)  # writes after this in the loop body follow a barrier

    def tag(self, key) -> Reg:
        if key not in self.tags:
            self.tags[key] = lds_tag(len(self.tags))
        return self.tags[key]


def _pipe(ctx: Context) -> PipeState:
    if ctx.pipe is None:
        ctx.pipe = PipeState()
    return ctx.pipe


def _dma_width(arch, plan, operand: str, width: int) -> tuple:
    """(per-lane bytes of the widest LDS DMA a copy of `operand` with `width`-byte accesses can use, or 0; why 0).
    Widths that fill 16-byte LDS chunks whole: 16 (gfx950) and 4 (gfx942's widest)."""
    if not plan.copied_as_stored(operand):
        return 0, (f"LDS DMA cannot transpose: operand {operand} is not K-major in global memory and {arch.name} "
                   "has no transposing LDS read")
    widths = [w for w in arch.lds_dma_bytes if 4 <= w <= width and CHUNK % w == 0]
    if not widths:
        return 0, f"{arch.name}'s LDS DMA widths {arch.lds_dma_bytes} fit no piece of this copy's {width}-byte runs"
    return max(widths), None


def dma_lane_bytes(arch, copy_mode: str, plan, operand: str, width: int) -> int:
    """Per-lane bytes of the pipelined copy's LDS DMA, 0 for register-staged copies. copy="auto" (the default):
    LDS DMA only where a lane moves a whole 16-byte run (gfx950, the LDS tile keeping the user's layout: K-major, or
    (K, N) read with ds_read_b64_tr_b16); gfx942's 4-byte DMA needs 4x the load instructions and M0 writes, and it
    needs an LDS buffer per stage, for a gain the bench does not show (docs/internals.md). copy="lds_dma" takes the
    widest legal width, or raises a CompileError naming why none is; copy="registers" never uses DMA."""
    if copy_mode == "registers":
        return 0
    lane_bytes, why = _dma_width(arch, plan, operand, width)
    if copy_mode == "lds_dma" and why:
        raise CompileError(f"copy='lds_dma': {why}")
    return lane_bytes if copy_mode == "lds_dma" or lane_bytes == CHUNK else 0


def may_use_lds_dma(arch, copy_mode: str, gemm_operands: dict, buf: N.Buffer) -> bool:
    """Whether pipelined copies into shared `buf` (an operand in `gemm_operands`, plan_gemms' second result) may go
    by LDS DMA (if their rows allow whole 16-byte runs)."""
    if buf not in gemm_operands:  # an MX scale tile (a few KiB): by LDS DMA where its rows allow (_ScaleCopy.by_dma),
        return copy_mode != "registers"  # so an LDS buffer per stage (pipelining's step order asks the operands only)
    plan, operand = gemm_operands[buf]
    try:
        return bool(dma_lane_bytes(arch, copy_mode, plan, operand, CHUNK))
    except CompileError:
        return False  # the copy reports it, at its own line


def _before_lds_write(ctx: Context, key):
    """s_barrier before writing LDS region `key` = ctx.lds_slot(...) when a gemm read it since the last barrier
    (write after read)."""
    pipe = ctx.pipe
    if key in pipe.reads:
        ctx.b.emit("s_barrier", comment="LDS stage write after reads")
        pipe.barrier()
    if pipe.loop_writes is not None:
        pipe.loop_writes.append(key)


def lower_async_copy(ctx: Context, s: TileOp):
    if _is_scale_tile(ctx, s.dst.buffer):
        return _async_scale_copy(ctx, s)
    plan, operand, mask, width = _check_shared_copy(ctx, s)
    pipe = _pipe(ctx)
    dst = s.dst.buffer
    key, slot = (dst, s.stage), ctx.lds_slot(dst, s.stage)
    tag = pipe.tag(key)
    base = _lds_base(ctx, plan, operand, dst, s.stage)
    lane_bytes = dma_lane_bytes(ctx.b.arch, ctx.copy_mode, plan, operand, width)
    if lane_bytes:
        _before_lds_write(ctx, slot)
        _lds_dma(ctx, s, plan.dma_copy_plan(operand, lane_bytes), mask, base + plan.operand_lds_offset(operand), tag)
        pipe.current.tags.append(tag)
        return
    cp = plan.copy_plan(operand)
    b = ctx.b
    if key not in pipe.staging:  # every stage's registers at once, before any loop: they live across it
        for st in range(stage_counts(ctx.kernel).get(dst, 1)):
            pipe.staging[(dst, st)] = [b.alloc_in_frame("v", 0, 4, align=4, what=f"staging {dst.name} stage {st}")
                                       for _ in range(cp.slots)]
    regs = pipe.staging[key]
    _load_to_registers(ctx, s, cp, mask, width, regs)

    def write():
        _before_lds_write(ctx, slot)
        _write_staged(ctx, cp, base, regs, defs=(tag,))

    pipe.current.tags.append(tag)
    pipe.current.writes.append(write)


def _lds_dma(ctx: Context, s: TileOp, cp, mask, lds_base: int, tag: Reg):
    """buffer_load_dwordx4 (or, 4 bytes a lane, buffer_load_dword: 4x the instructions) ... lds per slot: M0 = the
    wave's first LDS byte of the slot (the LDS address is M0 + inst_offset + lane_bytes * lane, so the global offset
    is kept in voffset and soffset, the K loop's advance, and inst_offset is 0); the swizzle is in the global
    coordinates each lane fetches."""
    b, pipe = ctx.b, ctx.pipe
    width = cp.lane_bytes
    wave_lds = _wave_lds(ctx, width)
    src, region = s.src.buffer, s.src
    origins: dict = {}
    with _live_trips(ctx, s.live):
        for slot in range(cp.slots):
            index, shift = _slot_index(region, cp, slot, origins)
            with _ExecMask(ctx, cp.active_threads(slot)):
                a = ctx.access.address(src, index, mask, width, max_imm=0, shift=shift)
                if s.live is not None:
                    a = a._replace(srd=_masked(ctx, s.live, a.srd))
                b.emit("s_add_u32", M0, wave_lds, lds_base + width * slot * ctx.threads, defs=(M0,), uses=(wave_lds,))
                b.emit(DMA_LOAD[width], a.voffset, a.srd, a.soffset, suffix="offen lds", defs=(tag,),
                       uses=(a.voffset, a.srd, M0) + ((a.soffset,) if isinstance(a.soffset, Reg) else ()),
                       comment=f"{src.name} -> {s.dst.buffer.name} slot {slot} (LDS DMA)")
                if a.temp:
                    b.v.free(a.voffset)


def _wave_lds(ctx: Context, width: int) -> Reg:
    """The SGPR holding the wave's first LDS byte offset of a `width`-bytes-a-lane DMA slot (width * 64 * wave), made
    once per width before any loop."""
    pipe, b = ctx.pipe, ctx.b
    if width not in pipe.wave_lds:
        wave_bytes = ctx.lower.vgpr(width * WAVE * sympy.floor(TID / WAVE))
        pipe.wave_lds[width] = b.alloc_in_frame("s", 0, what="LDS-DMA wave offset")
        b.emit("v_readfirstlane_b32", pipe.wave_lds[width], wave_bytes, frame=0)
    return pipe.wave_lds[width]


@memo  # asked per slot of each masked copy
def _threshold(live: tuple) -> tuple:
    """(loop variable, the first trip whose copy is past the end) of AsyncCopy.live = (tile, n): `tile` is affine in
    the loop variable with a positive coefficient, so the copy is live exactly in the trips before the threshold."""
    tile, n = live
    form = linear_form(tile)
    const = form.pop(sympy.S.One, 0)
    ((var, coeff),) = form.items()
    return var, -(-(n - const) // coeff)


@contextlib.contextmanager
def _live_trips(ctx: Context, live: tuple | None):
    """The address analysis of a masked copy over its live trips only (GlobalAccess.loop_ranges): in the others its
    V# has NUM_RECORDS 0, so no lane reaches memory whatever the offsets, and the advance can stay in soffset as in
    the live steps (over the whole range a tile past the end would send it to every lane's voffset)."""
    if live is None or _on_device(ctx, live):
        yield
        return
    var, threshold = _threshold(live)
    ranges = ctx.access.loop_ranges
    saved = ranges[var]
    ranges[var] = (saved[0], max(saved[0], min(saved[1], threshold - 1)))
    try:
        yield
    finally:
        ranges[var] = saved


def _masked(ctx: Context, live: tuple, srd: Reg) -> Reg:
    """`srd` emptied (NUM_RECORDS 0) in the loop trips where `live` = (tile, n) says the copy's tile is past the end
    (KernelAbi.emptied_resource): the LDS DMA reads no memory and writes zeros to a stage nothing reads, a staged
    load fills VGPRs never written to LDS. The steps of an unrolled body share a threshold where n is a multiple of
    the unroll, so a trip selects each operand's V# once for all its steps."""
    if _on_device(ctx, live):
        return _masked_on_device(ctx, live, srd)
    var, threshold = _threshold(live)
    key = (srd, var, threshold)
    if key not in ctx.pipe.masked:
        ctx.pipe.masked[key] = ctx.abi.emptied_resource(srd, ctx.lower.sgpr(var), threshold, f" of {var}")
    return ctx.pipe.masked[key]


def _on_device(ctx: Context, live: tuple) -> bool:
    """Whether AsyncCopy.live = (tile, n) is decided on the device in every step (a pipelined DeviceLoop,
    passes/pipelining.py `_pipeline_on_device`): n is no constant, or the tile moves with no counted loop's
    variable (a device loop's, or none: a prologue copy)."""
    tile, n = live
    counted = set(ctx.access.loop_ranges)
    return not sympy.sympify(n).is_number or not (sympy.sympify(tile).free_symbols & counted)


def _masked_on_device(ctx: Context, live: tuple, srd: Reg) -> Reg:
    """`srd` with NUM_RECORDS 0 where tile >= n, both evaluated here (SGPRs): the V# is made at the copy, since a
    device loop's copy may address its tile from a base that moves every trip (no soffset advance)."""
    b = ctx.b
    tile, n = (ctx.lower.sgpr(x) for x in live)  # before the compare: their math writes SCC
    out = b.s.alloc(4, align=4, what="V# emptied past the end")
    b.emit("s_mov_b64", out[0:2], srd[0:2])
    b.emit("s_mov_b32", out[3], srd[3])
    b.emit("s_cmp_lt_i32", tile, n, defs=(), uses=tuple(x for x in (tile, n) if isinstance(x, Reg)),
           comment=f"tile {live[0]} < {live[1]}?")
    b.emit("s_cselect_b32", out[2], srd[2], 0, comment="else NUM_RECORDS 0: nothing read")
    return out


def lower_commit_group(ctx: Context, s: TileOp):
    pipe = _pipe(ctx)
    pipe.groups.append(pipe.current)
    pipe.current = _Group()


def lower_wait_group(ctx: Context, s: TileOp):
    """Groups older than the `pending` newest: their deferred ds_writes, then one s_barrier that publishes their LDS
    regions (the wait pass puts the exact vmcnt / lgkmcnt for exactly those regions before it)."""
    pipe = _pipe(ctx)
    ready = pipe.groups[:max(0, len(pipe.groups) - s.pending)]
    pipe.groups = pipe.groups[len(ready):]
    tags = []
    for group in ready:
        for write in group.writes:
            write()
        tags += group.tags
    if tags or getattr(s, "sync", False):
        ctx.b.emit("s_barrier", uses=tuple(dict.fromkeys(tags)), comment=f"wait_group {s.pending}: publish LDS")
        pipe.barrier()


def lower_wave_group_barrier(ctx: Context, s: TileOp):
    """A ping-pong K loop's barriers (passes/pipelining.py): `s.group` None, every wave's `s_barrier` (the end of
    a wave's MFMA cluster); `s.group` g, an `s_barrier` only the waves of wave group g (the first or second half of
    the workgroup's waves) execute, which shifts the two groups' barrier sequences by one: `SCC = wave < half;
    s_cbranch_scc{g} SKIP; s_barrier; SKIP:`."""
    b, pipe = ctx.b, _pipe(ctx)
    if s.group is None:
        b.emit("s_barrier", comment="ping-pong: end of the MFMA cluster")
        pipe.barrier()
        return
    if pipe.wave_sgpr is None:
        pipe.wave_sgpr = b.alloc_in_frame("s", 0, what="wave index")
        b.emit("v_readfirstlane_b32", pipe.wave_sgpr, ctx.lower.vgpr(sympy.floor(TID / WAVE)), frame=0)
    skip = b.label("pingpong")
    half = ctx.threads // WAVE // 2
    b.emit("s_cmp_lt_u32", pipe.wave_sgpr, half, comment=f"only wave group {s.group} (waves "
           f"{'>=' if s.group else '<'} {half}) takes the next barrier: the groups run half a K phase apart")
    b.emit(f"s_cbranch_scc{s.group}", skip)
    b.emit("s_barrier", comment=f"ping-pong: wave group {s.group}'s extra barrier")
    b.frames[-1].insts.append(Inst(skip, kind=isa.LABEL))


def _slot_index(region: N.Region, cp, slot: int, origins: dict) -> tuple:
    """(index, shift) of copy slot `slot`'s first element: region start + the plan's row and column, each a base in
    TID plus an integer (SeparatedOffsets). The index is the start's symbolic part + base (_slot_origin), shared by
    the slots with that base and by every copy whose start differs by an integer (a pipeline's stages and K phases:
    the address analysis of GlobalAccess then runs once per origin); the shift is the integers, the start's constant
    included (GlobalAccess.address). `origins` keeps each dim's (constant, symbolic part) of the start."""
    index, shift = list(region.starts), [0] * len(region.starts)  # dims of extent 1: the start, no shift
    for d, family in zip(tile_dims(region), (cp.global_row_family, cp.global_col_family)):
        if d not in origins:
            origins[d] = split_const(region.starts[d])
        const, start = origins[d]
        index[d] = _slot_origin(start, family.bases[family.base_of[slot]])
        shift[d] = const + family.const[slot]
    return tuple(index), tuple(shift)


@memo  # every copy of one operand in a pipelined loop asks for the same origins
def _slot_origin(start, base):
    return start + base


# ---- MX scale tiles --------------------------------------------------------------------------------------

DS_WRITE_BYTES = {1: "ds_write_b8", 2: "ds_write_b16", 4: "ds_write_b32"}


def _is_scale_tile(ctx: Context, buf: N.Buffer) -> bool:
    """Whether shared `buf` is the scale_A / scale_B tile of an MX-scaled T.gemm (and no gemm operand)."""
    if buf in ctx.gemm_operands:
        return False
    return any(buf in (g.scale_A, g.scale_B) for g in statements_of(ctx.kernel.body, "gemm") if g.scaled)


class _ScaleCopy:
    """Global -> LDS copy of an E8M0 scale tile (rows x cols bytes, row-major in LDS as the gemm reads it): unit
    u = slot * threads + tid moves `width` bytes (4 where the rows allow) of row u // (cols / width), so the units
    fill the tile's bytes in order: a pipelined copy of 4-byte units is one buffer_load_dword ... lds per slot (M0 +
    4 * lane, `dma`), others a load into a VGPR and a ds_write (`load`, `write`). A 256 x 8 tile is 2 KiB, two units
    a thread at 256 threads, against the 16-byte runs of the operand tiles (passes/gemm_plan's CopyPlan): no
    swizzle, as the gemm's ds_read_u8 of one byte a lane meet no bank conflict worth one."""

    def __init__(self, ctx: Context, s: TileOp):
        self.ctx, self.s = ctx, s
        src, region = s.src.buffer, s.src
        self.rows, self.cols = s.dst.buffer.shape
        self.dims = tile_dims(region)
        if len(self.dims) != 2 or self.dims[1] != len(src.shape) - 1 or \
                tuple(region.extents[d] for d in self.dims) != (self.rows, self.cols):
            raise CompileError(f"copy into scale tile {s.dst.buffer.name}{list(s.dst.buffer.shape)} from a "
                               f"{len(src.shape)}-d tile {tuple(region.extents)}; expected a ({self.rows}, "
                               f"{self.cols}) tile whose rows run along {src.name}'s last dim", location=s.loc)
        if src.spec.strides[-1] != 1:
            raise CompileError(f"{src.name} has strides {src.spec.strides}: tilegcn needs the last dimension "
                               "contiguous (stride 1); call .contiguous()", location=s.loc)
        self.mask = masked_dims(src, region.starts, region.extents)
        legal = access_width(src, self.cols, len(src.shape) - 1 in self.mask)
        self.width = next(w for w in (4, 2, 1) if w <= legal and self.cols % w == 0)
        self.units = self.rows * self.cols // self.width
        self.slots = -(-self.units // ctx.threads)

    def _index(self, slot: int) -> tuple:
        """The global element unit `slot * threads + tid` starts at."""
        u, per_row = slot * self.ctx.threads + TID, self.cols // self.width
        index = list(self.s.src.starts)
        index[self.dims[0]] += sympy.floor(u / per_row)
        index[self.dims[1]] += self.width * sympy.Mod(u, per_row)
        return tuple(index)

    def _active(self, slot: int):
        return _ExecMask(self.ctx, min(self.ctx.threads, self.units - slot * self.ctx.threads))

    def _base(self, stage: int) -> int:
        buf = self.s.dst.buffer
        _, index = self.ctx.lds_slot(buf, stage)
        return self.ctx.shared[buf] + index * self.ctx.stage_bytes.get(buf, 0)

    def by_dma(self) -> bool:
        """Whether the pipelined copy goes by LDS DMA: 4-byte units (buffer_load_dword ... lds, both arches) land
        at M0 + 4 * lane, the tile's row-major bytes in unit order; narrower rows go through VGPRs."""
        return self.width == 4 and 4 in self.ctx.b.arch.lds_dma_bytes and self.ctx.copy_mode != "registers"

    def load(self, regs: list, resource=None):
        ctx, s = self.ctx, self.s
        for slot in range(self.slots):
            with self._active(slot):
                ctx.access.load(regs[slot], self.width, s.src.buffer, self._index(slot), self.mask,
                                comment=f"{s.src.buffer.name} -> {s.dst.buffer.name} slot {slot}", resource=resource)

    def dma(self, stage: int, tag: Reg, resource=None):
        ctx, b, src = self.ctx, self.ctx.b, self.s.src.buffer
        wave_lds, base = _wave_lds(ctx, 4), self._base(stage)
        for slot in range(self.slots):
            with self._active(slot):
                a = ctx.access.address(src, self._index(slot), self.mask, 4, max_imm=0)
                if resource is not None:
                    a = a._replace(srd=resource(a.srd))
                b.emit("s_add_u32", M0, wave_lds, base + 4 * slot * ctx.threads, defs=(M0,), uses=(wave_lds,))
                b.emit(DMA_LOAD[4], a.voffset, a.srd, a.soffset, suffix="offen lds", defs=(tag,),
                       uses=(a.voffset, a.srd, M0) + ((a.soffset,) if isinstance(a.soffset, Reg) else ()),
                       comment=f"{src.name} -> {self.s.dst.buffer.name} slot {slot} (LDS DMA)")
                if a.temp:
                    b.v.free(a.voffset)

    def write(self, regs: list, stage: int, defs=None):
        ctx = self.ctx
        base = self._base(stage)
        limit = ctx.b.arch.ds_max_imm_offset + 1
        for slot in range(self.slots):
            high, imm = divmod(base + slot * ctx.threads * self.width, limit)
            vaddr = ctx.lower.vgpr_plus(TID * self.width, high * limit)
            with self._active(slot):
                ctx.b.emit(DS_WRITE_BYTES[self.width], vaddr, regs[slot], suffix=f"offset:{imm}", defs=defs)


def _async_scale_copy(ctx: Context, s: TileOp):
    """A pipelined scale-tile copy: by LDS DMA where its rows allow (_ScaleCopy.by_dma), else loaded into VGPRs
    fixed per stage now and written to LDS when its group is waited for (lower_async_copy's register path)."""
    pipe, b, dst = _pipe(ctx), ctx.b, s.dst.buffer
    key, slot_key = (dst, s.stage), ctx.lds_slot(dst, s.stage)
    tag = pipe.tag(key)
    copy = _ScaleCopy(ctx, s)
    live = s.live
    resource = None if live is None else functools.partial(_masked, ctx, live)
    if copy.by_dma():
        _before_lds_write(ctx, slot_key)
        with _live_trips(ctx, live):
            copy.dma(s.stage, tag, resource)
        pipe.current.tags.append(tag)
        return
    if key not in pipe.staging:
        for st in range(stage_counts(ctx.kernel).get(dst, 1)):
            pipe.staging[(dst, st)] = [b.alloc_in_frame("v", 0, 1, what=f"staging {dst.name} stage {st}")
                                       for _ in range(copy.slots)]
    regs = pipe.staging[key]
    with _live_trips(ctx, live):
        copy.load(regs, resource)

    def write():
        _before_lds_write(ctx, slot_key)
        copy.write(regs, s.stage, defs=(tag,))

    pipe.current.tags.append(tag)
    pipe.current.writes.append(write)


# ---- the MFMA loop body ---------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1 << 14)
def _piece(reg: Reg, first: int, count: int) -> Reg:
    """reg[first:first + count], made once per distinct slice (Regs are interned values): every k step asks for the
    same fragment and accumulator slices again, and slicing a Reg goes through Reg.__new__'s interning table."""
    return reg[first:first + count]


def lower_gemm(ctx: Context, s: TileOp):
    """The gemm's LDS fragment reads and MFMAs (`s.part` None), or, in a ping-pong K loop (passes/pipelining.py),
    only its reads ("reads": every k step's, into registers kept for the "mfma" part) or only its MFMAs ("mfma",
    at raised `s_setprio` where the arch table says it pays: Arch.gemm_ping_pong_prio)."""
    b = ctx.b
    plan = ctx.gemm_plans[s.C]
    part = getattr(s, "part", None)
    lds_operands = [(op, buf) for op, buf in (("A", s.A), ("B", s.B)) if buf.scope == N.SHARED]
    scale_tiles = [("A", s.scale_A), ("B", s.scale_B)] if s.scaled else []
    if part == "mfma":
        sets, scales = ctx.pipe.fragments.pop(0)
        _emit_mfmas(ctx, s, plan, sets, range(plan.read_steps), scales, prio=True)
        return
    if ctx.pipe is not None and any((buf, s.stage) in ctx.pipe.tags for _, buf in lds_operands):
        # published by its wait_group's barrier (an operand copied before the loop, flash attention's Q tile, was
        # written before the first one); the stage's next copy waits for these reads at a barrier
        ctx.pipe.reads.update({ctx.lds_slot(buf, s.stage) for _, buf in lds_operands + scale_tiles})
    else:
        lds_barrier(ctx, "read")
    bases = {op: _lds_base(ctx, plan, op, buf, s.stage) for op, buf in lds_operands}
    reps = {"A": plan.repeats_M, "B": plan.repeats_N}
    n_sets = plan.read_steps if part == "reads" else min(2, plan.read_steps)
    sets = [{op: [b.v.alloc(plan.frag_regs, align=4, what=f"{op} fragment") for _ in range(reps[op])]
             for op, _ in lds_operands} for _ in range(n_sets)]
    families = {op: plan.read_offsets(op) for op, _ in lds_operands}
    scales = _ScaleReads(ctx, plan, s, scale_tiles, len(sets)) if s.scaled else None
    # The MFMAs and reads are built as Insts here, with the defs and uses emit() would infer: a GEMM lowers
    # thousands of them, the same few shapes over and over.
    insts = b.frames[-1].insts

    def issue_reads(step: int):
        regs = sets[step % len(sets)]
        issues = plan.read_issues[step]
        if scales is not None:  # in the order the step's MFMAs first use them: the first MFMAs wait for fewer reads
            use = _first_use(plan.mfma_operands[step])
            issues = sorted(issues, key=lambda issue: use[issue[0], issue[1]])
        for operand, rep, mnemonic, first, count, key in issues:
            if scales is not None and first == 0:  # the LDS counter retires in order: each MFMA's scale byte
                scales.issue(insts, step, operand, rep)  # is read just before its fragment, not all of them first
            vaddr, suffix = _read_address(ctx, families[operand], key, bases[operand])
            dst = _piece(regs[operand][rep], first, count)
            insts.append(Inst(mnemonic, (dst, vaddr), (dst,), (vaddr,), isa.DS_READ, suffix))

    if part == "reads":
        for step in range(plan.read_steps):
            issue_reads(step)
        ctx.pipe.fragments.append((sets, scales))
        return
    issue_reads(0)
    for step in range(plan.read_steps):
        if step + 1 < plan.read_steps:
            issue_reads(step + 1)
        _emit_mfmas(ctx, s, plan, sets, (step,), scales)
    _free_fragments(ctx, sets, scales)


def _free_fragments(ctx: Context, sets: list, scales=None):
    for group in sets:
        for regs in group.values():
            for r in regs:
                ctx.b.v.free(r)
    if scales is not None:
        scales.free()


def _emit_mfmas(ctx: Context, s: TileOp, plan, sets: list, steps, scales=None, prio: bool = False):
    """The MFMAs of k-step pairs `steps`, operands from `sets[step % len(sets)]` (and, MX-scaled, their scale bytes
    from `scales`, a _ScaleReads); `prio` (a ping-pong gemm's MFMA cluster, whose fragments were read before the
    barrier in front of it): the cluster is also freed here, and wrapped in `s_setprio` where the arch table says it
    pays."""
    b = ctx.b
    acc = ctx.layouts[s.C].regs
    op_name, modifiers = _mfma_form(plan, s)
    if scales is not None:
        op_name = op_name.replace("v_mfma_f32_", "v_mfma_scale_f32_", 1)
        modifiers = f"op_sel_hi:[0,0,0] {modifiers}".rstrip()  # byte 0 of both scale VGPRs (llc's spelling)
    a_regs = ctx.layouts[s.A].regs if plan.a_in_registers else None
    level = b.arch.gemm_ping_pong_prio if prio else 0
    if level:
        b.emit("s_setprio", level, comment="MFMA cluster first while the other wave group reads")
    insts = b.frames[-1].insts
    for step in steps:
        frag_b, frag_a = sets[step % len(sets)]["B"], sets[step % len(sets)].get("A")
        for rep_b, first_b, n_b, rep_a, first_a, n_a, acc_first, acc_count in plan.mfma_operands[step]:
            src_a = _piece(frag_b[rep_b], first_b, n_b)
            if a_regs is None:
                src_b = _piece(frag_a[rep_a], first_a, n_a)
            else:
                src_b = _piece(a_regs, _operand_vgpr(plan, rep_a, step, first_a // n_a), n_a)
            d = _piece(acc, acc_first, acc_count)
            if scales is None:
                insts.append(Inst(op_name, (d, src_a, src_b, d), (d,), (src_a, src_b, d), isa.MFMA, modifiers))
            else:  # srcA holds B's data (the swapped operands): its scale is B's, srcB's is A's
                sa, sb = scales.reg(step, "B", rep_b), scales.reg(step, "A", rep_a)
                insts.append(Inst(op_name, (d, src_a, src_b, d, sa, sb), (d,), (src_a, src_b, d, sa, sb), isa.MFMA,
                                  modifiers))
    if level:
        b.emit("s_setprio", 0)
    if prio:
        _free_fragments(ctx, sets, scales)


def _mfma_form(plan, s: TileOp) -> tuple:
    """(mnemonic, modifiers) of the gemm's MFMA: the plan's for one operand dtype; for e4m3 x e5m2 the mixed form,
    srcA in B's format and srcB in A's (the plan's swapped operands, gemm_plan point 1)."""
    if s.A.dtype == s.B.dtype:
        return plan.mfma.name(s.A.dtype.short), plan.mfma.modifiers
    return plan.mfma.mixed_form(s.B.dtype.short, s.A.dtype.short)


def _first_use(mfmas: tuple) -> dict:
    """{(operand, repeat): rank} in the order a k-step's MFMAs (plan.mfma_operands rows: srcA is B's repeat, srcB
    A's) first read each fragment."""
    order = {}
    for rep_b, _, _, rep_a, *_ in mfmas:
        for key in (("B", rep_b), ("A", rep_a)):
            order.setdefault(key, len(order))
    return order


class _ScaleReads:
    """The E8M0 scale bytes of an MX-scaled gemm (gemm_plan point 10): lane l of MFMA k-step `step` needs, per
    operand and repeat, the byte of its tile row (wave's rows + repeat * dim + l % dim) at K block step * G + l // dim
    (G = 64 / dim): one ds_read_u8 into byte 0 of a VGPR (op_sel 0). The scale tile is row-major in LDS (K / 32 bytes
    a row); one VGPR base per operand, the repeat and step in the `offset:`. Each is read just before its operand
    fragment, into alternating register sets as the fragments are: the LDS counter retires in order, so a phase's
    first MFMA waits for its own scales only, and a scaled step reads its fragments in the order its MFMAs first use
    them (llvm-mca on gfx950's 256x256x256 MXFP4 loop: 1.12x the MFMA bound with every scale read first, 1.10x each
    before its fragment, 1.08x in first-use order). Reading a pair of steps' bytes as one dword needs a per-lane
    shift (a lane's bytes are G apart): 1.14x, the VALU shifts waiting for the reads."""

    def __init__(self, ctx: Context, plan, s: TileOp, tiles: list, sets: int):
        if plan.mfma_per_read != 1 or "f8f6f4" not in plan.mfma.name_template:
            raise CompileError(f"T.gemm: MX scales need gfx950's f8f6f4 MFMAs (plan: {plan.describe()})",
                               location=s.loc)
        self.ctx, self.plan = ctx, plan
        dim, G = plan.dim, WAVE // plan.dim
        wave, lane = sympy.floor(TID / WAVE), sympy.Mod(TID, WAVE)
        origin = {"A": plan.wave_tile_M * sympy.floor(wave / plan.waves_N),
                  "B": plan.wave_tile_N * sympy.Mod(wave, plan.waves_N)}
        self.row_bytes = {op: buf.shape[1] for op, buf in tiles}
        self.lane_offset = {op: (origin[op] + sympy.Mod(lane, dim)) * self.row_bytes[op] + sympy.floor(lane / dim)
                            for op, _ in tiles}
        self.base = {}
        part = (s.stage % s.scale_phases) * self.row_bytes["A"] // s.scale_phases  # a whole row's K phase's bytes
        for op, buf in tiles:
            _, index = ctx.lds_slot(buf, s.stage)
            self.base[op] = ctx.shared[buf] + index * ctx.stage_bytes.get(buf, 0) + part
        self.G, self.dim = G, dim
        reps = {"A": plan.repeats_M, "B": plan.repeats_N}
        b = ctx.b
        self.regs = [{op: [b.v.alloc(1, what=f"{op} scale") for _ in range(reps[op])] for op, _ in tiles}
                     for _ in range(sets)]

    def reg(self, step: int, op: str, rep: int) -> Reg:
        return self.regs[step % len(self.regs)][op][rep]

    def issue(self, insts: list, step: int, op: str, rep: int):
        """The ds_read_u8 of operand `op` repeat `rep`'s scale byte for `step`."""
        ctx, dst = self.ctx, self.reg(step, op, rep)
        limit = ctx.b.arch.ds_max_imm_offset + 1
        high, imm = divmod(self.base[op] + rep * self.dim * self.row_bytes[op] + step * self.G, limit)
        vaddr = ctx.lower.vgpr_plus(self.lane_offset[op], high * limit)
        insts.append(Inst("ds_read_u8", (dst, vaddr), (dst,), (vaddr,), isa.DS_READ, _offset_suffix(imm)))

    def free(self):
        for group in self.regs:
            for regs in group.values():
                for r in regs:
                    self.ctx.b.v.free(r)


def _operand_vgpr(plan, rep_m: int, step: int, sub: int) -> int:
    """First VGPR, in a fragment A operand's registers (ir/layout.py's MfmaOperand: repeat along M, then MFMA k-step,
    then k_per_lane 16-bit elements two a VGPR), of the MFMA of k-step pair `step`, sub-step `sub`, repeat `rep_m`."""
    k_steps = plan.block_K // plan.mfma.K
    return (rep_m * k_steps + step * plan.mfma_per_read + sub) * plan.mfma.k_per_lane // 2
