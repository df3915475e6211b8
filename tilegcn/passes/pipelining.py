"""Software pipelining of `for k in T.Pipelined(n, num_stages=S)`: a tile-IR -> tile-IR transform.

Input: verified tile IR. A loop with S > 1 whose body holds global -> shared copies and T.gemm (the GEMM K loop),
and possibly other statements that touch no shared memory the loop writes (`_carried`: flash attention's masking
and online softmax, which run in every step with the loop variable renamed), is rewritten; any other loop is left
as it is (it runs serially, as with S = 1).
Output: the same computation with S rotating LDS buffers per shared tile (`stage` s of a buffer), in which every
shared copy is an AsyncCopy into a stage, copies are grouped by CommitGroup, and WaitGroup(p) says how many of the
newest groups may still be in flight before a gemm reads its stage:

    prologue:  copies of k = 0 .. S-2 into stages 0 .. S-2, one group each
    steady:    for k in 0 .. n-S:  wait_group(S-2); copies of k+S-1 into stage (k+S-1) % S; commit; gemm stage k % S
               (or, where the wait is not covered, see below: copies; commit; wait_group(S-1); gemm stage k % S)
    epilogue:  for k in n-S+1 .. n-1:  wait_group(n-1-k); gemm stage k % S

Which order a steady step takes (`step_order`):
- Where S-1 steps of the loop's MFMA work cover the loaded memory round trip (S18's latency test,
  `covers_round_trip`): wait first. The barrier that publishes stage k % S also ends every wave's reads of stage
  (k-1) % S, which the copies then overwrite, so a K step has one s_barrier. Issuing first would need a second
  barrier before the copies, with every wave's copies bunched between the two (the timing model: a 256x256x64
  bf16 GEMM at 8192^3 on MI355X stalls ~30 % at barriers that way).
- Where it does not (small tiles, the loop latency-bound): issue first; the loads in flight during the wait are
  worth the barrier.
- LDS DMA, covered, S = 2: waiting first would wait for everything in flight (vmcnt(0)): the one stage being
  waited for is all there is. So the loop is first split into K phases (`split_k_phases`): each shared tile of
  block_K becomes 2 stages of block_K / 2 (the same LDS bytes) and the loop runs 2n half steps with 2S = 4 stages,
  waiting first: a half step waits for its phase while the next two phases stay in flight (vmcnt(N), N > 0), and
  the copies of a phase are issued 1.5 K tiles ahead instead of 1. A K tile has two barriers instead of one, each
  in front of half the MFMA work (the timing model, 256x256x64 bf16 at 8192^3 on MI355X, 512 / 256 threads: 1.375
  / 1.305 M cycles in phases against 1.435 / 1.390 M waiting first unsplit, same scheduler).
- PING_PONG (gfx950 at 8 waves, `Arch.gemm_ping_pong_waves`, or T.Pipelined's annotation ping_pong=True): the
  K-phase loop with the workgroup's waves in two groups one barrier apart, a phase of a wave being its memory
  cluster (copies, every fragment read) and its MFMA cluster with a barrier after each (`_pipeline_ping_pong`):
  each SIMD holds a wave of each group, so its matrix pipe runs one wave's MFMAs while the other wave reads and
  passes its barrier (the timing model, 256x256x64 bf16 at 8192^3 on MI355X, 512 threads: 1.094 M cycles against
  1.371 M in K phases with the groups in step, 1.422 M waiting first unsplit, one barrier a K step). A loop of
  fewer than 4 phases (K <= 96 at block_K 64) runs in step. Register-staged copies at S = 2 (gfx942 at 8 waves,
  `Arch.gemm_ping_pong_staged_waves`) run it over two K-phase LDS slots, each step loading two phases ahead and
  writing the next one to LDS in its memory cluster (MI300X: 2.151 M cycles against 2.824 M in step, 8192^3 NN).
- Register-staged copies (no LDS DMA), covered, S = 2, keep waiting first: the vmcnt(0) before a stage's
  ds_writes waits for loads issued a whole K step earlier, behind that step's MFMAs. The alternatives measured
  worse in the timing model (C4's gfx942 256x256x64 fp16 GEMM on MI300X, bench/model_accuracy.py): issuing first
  (no vmcnt(0)) puts the loads between the two barriers of the register path, where no MFMA hides their issue:
  780 k cycles against 686 k; K phases: 707 k, and 128x128x64 tiles 39 % slower.

A loop that carries other statements (flash attention's softmax) at S = 2, waiting first, runs as an in-wave
software pipeline where reordering is exact (`_rotated_split`, `_pipeline_rotated`): the next tile's head beside
this tile's tail, the fragments the head hands the tail in two alternating copies. LAST_GEMM (FlashAttention-3's
split): head = QK^T and the online softmax up to P, tail = the rescale of the output and PV; FIRST_GEMM: head = QK^T,
tail = the softmax and PV. The compiler tries them in ROTATIONS' order and drops the rotation where the second
copies leave no registers (compiler.py `_allocate_registers`).

The steady part is a loop unrolled S times, so every stage index is a constant (no per-iteration address math).
Correct for any n >= 1: with n < S the prologue issues only n groups and there is no steady part. A trip count
only the device knows (a DeviceLoop with num_stages: a causal bound, a dynamic K) is `_pipeline_on_device`'s: every
copy masked by its tile, trips of S steps that leave the loop where the steps run out, waiting first or issuing
first.

Masked tail (n >= S): the S - 1 epilogue steps run as steps of the loop too: every step is steady, and in the last
trip the copies of tiles past n are issued with nothing in range (`AsyncCopy.live`; the lowering selects a V# with
NUM_RECORDS 0: no memory is read, zeros land in a stage nothing reads, or in staging VGPRs never written to LDS).
Only the last n % S steps follow the loop. The epilogue was a peeled copy of the loop body's reads and MFMAs:
14-16 % of the 256x256x64 GEMM's instructions on gfx950, which every back-end pass pays for (the timing model at
8192^3 rates both forms alike, 1.305 vs 1.303 M cycles at 256 threads). The wait counts stay exact: every step
commits one group, and a group past the end is always among the newest, never retired by a wait_group (so a
register-staged one is never written to LDS). The lowering (gemm.py) turns
AsyncCopy into LDS DMA or register-staged copies and WaitGroup into exact `s_waitcnt` + `s_barrier`.
"""
from __future__ import annotations

import copy
import dataclasses
import math

import sympy

from ..amdgcn.arch import TIMING
from ..amdgcn.memory import access_width
from ..ir import nodes as N
from ..errors import CompileError
from ..ir.ops import COMPUTE, LOAD, op_class
from .gemm_plan import plan_gemm
from ..ir.substitute import SUBSTITUTED, substituted


ISSUE_FIRST, WAIT_FIRST, PHASES, PING_PONG = "issue_first", "wait_first", "phases", "ping_pong"
FIRST_GEMM, LAST_GEMM = "first_gemm", "last_gemm"  # where an in-wave software pipeline splits its body
# the splits in the order the compiler tries them (compiler.py `_allocate_registers`): LAST_GEMM first, as it twins
# fewer registers (P and the rescale factor: 17 VGPRs a wave at flash attention's 128x64 tile, against the scores'
# 32) and overlaps more (gfx950 128x64 d128 at 3 and 5 key tiles, llvm-mca a tile: 404.0 against 412.4)
ROTATIONS = (LAST_GEMM, FIRST_GEMM)
PHASES_PER_TILE = 2  # K phases a shared tile is split into where waiting first at S = 2 would drain (PHASES)
STAGED_SLOTS = 2  # LDS slots (and staging VGPR sets) of a register-staged ping-pong: one K phase each


def pipeline_loops(kernel: N.Kernel, arch=None, by_dma=lambda buf: True, phases: bool = True,
                   carried: bool = True, rotate: str | None = ROTATIONS[0]) -> N.Kernel:
    """`kernel` with its pipelinable loops rewritten. `arch` decides per loop which order a steady step takes
    (`step_order`; None: every loop waits first, unsplit); `by_dma(buf)`: whether the copies into shared `buf`
    go by LDS DMA (the default assumes they do); `phases=False`: wait first instead of splitting into K phases
    (the same LDS bytes: the lowering uses it to word an LDS budget error in the user's block_K and num_stages);
    `carried=False`: loops with other statements than loads and gemms (`_carried`) stay serial (the compiler's
    way back where pipelining one needs more LDS or registers than there are); `rotate`: where such loops run as
    in-wave software pipelines, the first split to try (ROTATIONS from it on, `_rotation`); None: none is (the
    compiler's way back where one needs more registers; the rotated loop adds fragments to `kernel.buffers`,
    nothing else does)."""
    split: dict = {}  # shared buffer -> its phase buffer, for loops split into K phases
    twins: list = []  # the second fragments of rotated loops (`_pipeline_rotated`)
    body = _rewrite(kernel.body, arch, by_dma, split, kernel.body, phases, kernel.threads, carried,
                    twins if rotate else None, rotate)
    if body == kernel.body:
        return kernel
    buffers = [split.get(b, b) for b in kernel.buffers] + twins
    return dataclasses.replace(kernel, body=body, buffers=buffers)


def step_order(loop, arch, by_dma, threads: int | None = None) -> str:
    """ISSUE_FIRST, WAIT_FIRST, PHASES or PING_PONG for a pipelinable loop (the module docstring says why);
    `threads`: the workgroup's (ping-pong needs an even number of waves)."""
    asked = getattr(loop, "ping_pong", None)
    order = _unpaired_order(loop, arch, by_dma)
    pairable = order == PHASES or _staged_pairable(loop, order, by_dma)
    if asked is None:
        waves = 0 if arch is None else \
            arch.gemm_ping_pong_waves if order == PHASES else arch.gemm_ping_pong_staged_waves
        return PING_PONG if pairable and waves and threads == waves * 64 else order
    if asked and (not pairable or threads is None or threads % 128):
        raise CompileError(_no_ping_pong(order, threads, loop), location=loop.loc)
    return PING_PONG if asked else order


def _staged_pairable(loop, order: str, by_dma) -> bool:
    """A register-staged K loop at num_stages=2 that waits first (gfx942's): its ping-pong is
    `_pipeline_ping_pong(staged=True)`, two K-phase LDS slots written from staging VGPRs."""
    return order == WAIT_FIRST and loop.num_stages == 2 and not any(by_dma(c.dst.buffer) for c in _loads(loop))


def _unpaired_order(loop, arch, by_dma) -> str:
    if arch is None:
        return WAIT_FIRST
    if not covers_round_trip(loop, arch):
        return ISSUE_FIRST
    operands = {b for g in _gemms(loop) for b in (g.A, g.B)}  # MX scale tiles follow the operands' schedule
    dma = any(by_dma(c.dst.buffer) for c in _loads(loop) if c.dst.buffer in operands)
    return PHASES if dma and loop.num_stages == 2 else WAIT_FIRST


def _no_ping_pong(order: str, threads, loop=None) -> str:
    """Why a loop asked for ping_pong=True cannot have it, in the user's terms."""
    why = {ISSUE_FIRST: "its K step has too little MFMA work to cover a load's round trip (a small tile)",
           WAIT_FIRST: f"it has num_stages={getattr(loop, 'num_stages', '?')}"}.get(
               order, f"its {threads} threads are not an even number of waves")
    return (f"T.Pipelined(annotations={{'ping_pong': True}}): a ping-pong K loop needs num_stages=2, a K step that "
            f"covers the loads, and an even number of waves, but {why}; drop the annotation")


def pipelinable(s, carried: bool = True) -> bool:
    """A loop asked for num_stages > 1 whose body holds global -> shared tile loads and gemms, at least one of each
    (the ops' `k_loop_role`), and otherwise (`carried`) only statements that leave the loaded tiles alone
    (`_carried`: flash attention's softmax between its two gemms)."""
    if s.pipeline_stages() <= 1:
        return False
    roles = [x.k_loop_role() for body in s.bodies() for x in body]
    if not (LOAD in roles and COMPUTE in roles):
        return False
    return all(r in (LOAD, COMPUTE) for r in roles) or carried and _carried(s)


def pipelines_carried(kernel: N.Kernel) -> bool:
    """Whether `pipeline_loops` pipelines a loop of `kernel` only because it carries other statements."""
    return any(pipelinable(s) and not pipelinable(s, carried=False) for s in N.walk(kernel.body))


def _carried(loop) -> bool:
    """Whether the statements of `loop`'s body that are neither tile loads nor gemms can run unchanged in every
    pipelined step, the loop variable renamed: no nested body (a loop or branch would hide accesses from this
    test), no write to shared memory and no read of a shared tile the loop writes (the step's one barrier orders
    only the loaded stages: TileLang's dequantizing GEMM writes its B operand tile from a T.Parallel in the loop,
    which stays serial); each load is a whole tile (one stage holds it) loaded once in the body (one group per
    step keeps the waits exact); no load addresses its tile by a symbol a statement of the step defines (a
    T.alloc_var read, `let`: the copies issued S - 1 steps ahead and in the prologue would name it before it is
    read; TileLang's stream-k GEMM, whose K loop's copies read `start_iter[0]`, stays serial)."""
    loads = _loads(loop)
    loaded = [c.dst.buffer for c in loads]
    if len(set(loaded)) != len(loaded) or not all(_whole(c.dst) for c in loads):
        return False
    defined = {x.var for x in loop.body if x.opname == "let"}
    if any(sympy.sympify(e).free_symbols & defined for c in loads for e in c.src.starts):
        return False
    others = [x for x in loop.body if x.k_loop_role() not in (LOAD, COMPUTE)]
    written = {r.buffer for x in loop.body for r in x.writes() if r.buffer.scope == N.SHARED}
    for x in others:
        shared_reads = {r.buffer for r in x.reads() if r.buffer.scope == N.SHARED}
        if x.bodies() or any(r.buffer.scope == N.SHARED for r in x.writes()) or shared_reads & written:
            return False
    return True


def _plain(loop) -> bool:
    """A K loop of tile loads and gemms only (what K phases can split)."""
    return all(x.k_loop_role() in (LOAD, COMPUTE) for x in loop.body)


def _loads(loop) -> list:
    """The global -> shared copies of a pipelinable loop's body."""
    return [s for s in loop.body if s.k_loop_role() == LOAD]


def _gemms(loop) -> list:
    """The gemms of a pipelinable loop's body (the work that reads the loaded tiles)."""
    return [s for s in loop.body if s.k_loop_role() == COMPUTE]


def covers_round_trip(loop, arch) -> bool:
    """S18's latency test (S18, docs/timing-sources.md): (S - 1) x the MFMA clk of one K step of a
    workgroup on its CU (its gemms' FLOPs over the arch's best MFMA rate on all SIMDs) >= the loaded round trip
    of a load (`Timing.l2_hit_latency_clk`)."""
    t = TIMING[arch.name]
    flops, rate = 0, None
    for g in _gemms(loop):
        m, n = g.C.shape
        flops += 2 * m * n * math.prod(g.A.shape) // m
        shapes = arch.mfma_shapes.get(g.A.dtype.short) or [x for v in arch.mfma_shapes.values() for x in v]
        rate = max(2 * x.M * x.N * x.K / (x.passes * t.issue_slot_clk) for x in shapes) * t.simds_per_cu
    if rate is None:  # copies only: no MFMA work to cover the round trip
        return False
    return (loop.num_stages - 1) * flops / rate >= t.l2_hit_latency_clk


def _rewrite(stmts: list, arch, by_dma, split: dict, program: list, phases: bool, threads=None,
             carried: bool = True, twins: list | None = None, rotate: str | None = None) -> list:
    """`twins`: where loops may be rotated (`_pipeline_rotated`, split `rotate`), the list their second fragments
    are added to."""
    out = []
    for s in stmts:
        if pipelinable(s, carried) and _on_device(s):
            wait_first = step_order(s, arch, by_dma, threads) != ISSUE_FIRST
            by_lds_dma = all(by_dma(c.dst.buffer) for c in _loads(s))  # (_pipeline_rotated_on_device says why)
            rotated = _rotation(s, program, rotate) if wait_first and by_lds_dma and twins is not None else None
            if rotated is not None:
                twins.extend(rotated[2].values())
                out.extend(_pipeline_rotated_on_device(s, *rotated))
            else:
                out.extend(_pipeline_on_device(s, wait_first=wait_first))
        elif pipelinable(s, carried):
            order = step_order(s, arch, by_dma, threads)
            if order in (PHASES, PING_PONG) and not phases:
                order = WAIT_FIRST
            phased = split_k_phases(s, program, arch, threads, whole_scale_rows=order == PHASES) \
                if order in (PHASES, PING_PONG) else None
            if phased is None and order == PING_PONG and getattr(s, "ping_pong", None):
                raise CompileError("T.Pipelined(annotations={'ping_pong': True}): the loop cannot be split into K "
                                   "phases (a shared tile used outside its copies and gemms, a copy of part of a "
                                   "tile, or a block_K under 64); drop the annotation", location=s.loc)
            staged = order == PING_PONG and _staged_pairable(s, WAIT_FIRST, by_dma)
            if phased is not None and staged and phased[0].extent < STAGED_SLOTS:
                phased = None  # a single K phase: the unsplit loop, in step
            if phased is not None:
                loop, buffers = phased
                split.update(buffers)
                if order == PING_PONG and loop.extent >= (STAGED_SLOTS if staged else loop.num_stages):
                    out.extend(_pipeline_ping_pong(loop, staged))
                else:
                    out.extend(_pipeline(loop, wait_first=True))
            else:
                rotated = _rotation(s, program, rotate) if order != ISSUE_FIRST and twins is not None else None
                if rotated is not None:
                    twins.extend(rotated[2].values())
                    out.extend(_pipeline_rotated(s, *rotated))
                else:
                    out.extend(_pipeline(s, wait_first=order != ISSUE_FIRST))
        elif s.bodies():
            bodies = tuple(_rewrite(body, arch, by_dma, split, program, phases, threads, carried, twins, rotate)
                           for body in s.bodies())
            out.append(s if bodies == s.bodies() else s.with_bodies(bodies))
        else:
            out.append(s)
    return out


def split_k_phases(loop, program: list, arch=None, threads: int | None = None, whole_scale_rows: bool = False):
    """(the loop over K phases, {shared buffer: its phase buffer}), or None where the loop cannot be split.

    Each shared tile of block_K along K becomes a tile of block_K / PHASES_PER_TILE; the loop runs over phases
    (extent n x PHASES_PER_TILE, less trailing phases that start past the end of every operand's K) with
    num_stages x PHASES_PER_TILE stages: the same LDS bytes. A copy's K start s(k), affine in k, becomes
    s(k / PHASES_PER_TILE) in the phase index. Not split (None): a shared buffer used anywhere in `program` (the
    kernel's body) but this loop's copies and gemms, a copy of part of a shared tile, a copy that does not walk K
    by whole tiles, a phase of fewer than 32 K (the widest MFMA K step: every arch's shapes still divide it).
    An MX-scaled gemm's scale tiles (K / 32 columns) split with its operands; where the phase tile leaves that gemm
    no MFMA shape (the f8f6f4 forms need 64 or 128 K, `arch` and `threads` given to plan it), the loop is not split.
    `whole_scale_rows`: scale tiles whose phase share of a row would be 2 bytes keep the K tile's rows
    (_whole_scale_rows); the ping-pong does not ask for it (see there)."""
    if not _plain(loop):
        return None  # the other statements of the step would have to be split too
    p, k = PHASES_PER_TILE, loop.var
    copies, gemms = _loads(loop), _gemms(loop)
    k_dims = {}  # shared buffer -> its K dim
    scales = set()  # MX scale tiles: K / 32 columns
    for g in gemms:
        k_dims[g.A], k_dims[g.B] = (0 if g.transpose_A else 1), (1 if g.transpose_B else 0)
        if g.scaled:
            scales |= {g.scale_A, g.scale_B}
            k_dims[g.scale_A] = k_dims[g.scale_B] = 1
    if any(c.dst.buffer not in k_dims or not _whole(c.dst) for c in copies):
        return None
    if _used_outside(set(k_dims), loop, program) or \
            any(b.shape[d] % (p if b in scales else p * 32) for b, d in k_dims.items()):
        return None
    phase = sympy.Symbol(f"{k}_phase", integer=True, nonnegative=True)
    whole = {c.dst.buffer for c in copies if whole_scale_rows and c.dst.buffer in scales and _whole_scale_rows(c, p)}
    for g in gemms:  # a gemm reads both scale tiles at one offset (Gemm.scale_phases): both whole rows, or neither
        if g.scaled and not {g.scale_A, g.scale_B} <= whole:
            whole -= {g.scale_A, g.scale_B}
    buffers = {b: dataclasses.replace(b, shape=b.shape if b in whole else _divided(b.shape, d, p))
               for b, d in k_dims.items()}
    new_copies, ends = [], []
    for c in copies:
        d, dk = k_dims[c.dst.buffer], _src_dim(c, k_dims[c.dst.buffer])
        starts = [sympy.sympify(x) for x in c.src.starts]
        if any(x.has(k) for i, x in enumerate(starts) if i != dk) or \
                sympy.expand(starts[dk] - starts[dk].subs(k, 0)) != k * c.src.extents[dk]:
            return None  # the copy does not walk K by whole tiles
        if c.dst.buffer in whole:  # every phase of K tile t copies tile t's scale rows (the gemm reads its part)
            starts[dk] = starts[dk].subs(k, 0) + sympy.floor(phase / p) * c.src.extents[dk]
            new_copies.append(dataclasses.replace(c, src=N.Region(c.src.buffer, tuple(starts), c.src.extents),
                                                  dst=N.Region(buffers[c.dst.buffer], c.dst.starts, c.dst.extents)))
            continue  # the operands' copies say which trailing phases are past K
        starts[dk] = starts[dk].subs(k, 0) + phase * (c.src.extents[dk] // p)
        src = N.Region(c.src.buffer, tuple(starts), _divided(c.src.extents, dk, p))
        dst = N.Region(buffers[c.dst.buffer], c.dst.starts, _divided(c.dst.extents, d, p))
        new_copies.append(dataclasses.replace(c, src=src, dst=dst))
        ends.append((starts[dk], c.src.buffer.shape[dk]))
    extent = loop.extent * p
    while extent > 1 and all(_starts_past(start.subs(phase, extent - 1), end) for start, end in ends):
        extent -= 1  # a trailing phase wholly past K (ragged K): nothing to load or compute
    new_gemms = [dataclasses.replace(g, A=buffers[g.A], B=buffers[g.B],
                                     **({"scale_A": buffers[g.scale_A], "scale_B": buffers[g.scale_B],
                                         "scale_phases": p if g.scale_A in whole else 1} if g.scaled else {}))
                 for g in gemms]
    if not all(_plannable(g, arch, threads) for g in new_gemms):
        return None
    body = [new_copies.pop(0) if s.k_loop_role() == LOAD else new_gemms.pop(0) for s in loop.body]
    return dataclasses.replace(loop, var=phase, extent=extent, num_stages=loop.num_stages * p, body=body), buffers


def _whole_scale_rows(copy, p: int) -> bool:
    """Whether an MX scale tile's copy keeps its whole rows in every K phase: a phase's share of a row is not 4 bytes
    but the whole row is, and the source allows 4-byte loads (amdgcn.memory.access_width, as the scale copy asks),
    so the tile goes by 4-byte LDS DMA (gemm.py _ScaleCopy.by_dma) instead of 2-byte loads through VGPRs written to
    LDS before each phase's barrier (llvm-mca on gfx950's 256x256x128 MXFP8 loop: 1.095x the MFMA bound against
    1.101x; the timing model at 8192^3 on MI355X 2,854 against 2,830 TFLOP/s; the same 1 KiB of a 256-row tile copied
    once per phase, twice per K tile). Not for the 8-wave ping-pong: its memory cluster then carries two DMAs of 256
    units, EXEC-masked for 512 threads, and the model rates the same tile 3,050 against 3,084 TFLOP/s (MXFP4's
    256x256x128 ping-pong would gain, 5,648 against 5,535, but its best tile, block_K 256, has 4-byte phase rows)."""
    cols = copy.dst.buffer.shape[1]
    if cols % 4 or (cols // p) % 4 == 0:
        return False
    return access_width(copy.src.buffer, cols, True) >= 4


def _plannable(g, arch, threads) -> bool:
    """Whether gemm `g` (its phase tiles) has a plan, for the gemms whose K step has no fallback shape: fp4 and
    MX-scaled ones (the f8f6f4 MFMAs only); the others' shapes all divide a 32-K phase."""
    if arch is None or threads is None or not (g.scaled or g.A.dtype.is_packed_fp4):
        return True
    M, N_ = g.C.shape
    try:
        plan_gemm(arch, g.A.dtype, M, N_, g.A.shape[0 if g.transpose_A else 1], threads, g.transpose_A,
                  g.transpose_B, check=False, policy=g.policy, scaled=g.scaled)
    except CompileError:
        return False
    return True


def _src_dim(c, dst_dim: int) -> int:
    """The dim of the copy's global region that maps to dim `dst_dim` of its shared tile: the region's dims of
    extent > 1 in order (missing leading dims and BSHD's head dim `K[b, s0:s1, h, :]` have extent 1)."""
    return [d for d, e in enumerate(c.src.extents) if e != 1][dst_dim]


def _divided(shape: tuple, dim: int, by: int) -> tuple:
    return tuple(x // by if i == dim else x for i, x in enumerate(shape))


def _starts_past(start, end: int) -> bool:
    return bool(start.is_number and start >= end)


def _whole(region: N.Region) -> bool:
    return all(s == 0 for s in region.starts) and tuple(region.extents) == tuple(region.buffer.shape)


def _used_outside(buffers: set, loop, program: list) -> bool:
    """Whether a statement of `program` other than `loop`'s own copies and gemms touches one of `buffers`."""
    own = {id(s) for s in loop.body}
    for s in N.walk(program):
        if id(s) in own or s is loop:
            continue
        touched = {r.buffer for r in s.reads() + s.writes()}  # the op's access regions
        if touched & buffers:
            return True
    return False


def _pipeline(loop, wait_first: bool) -> list:
    """The prologue, steady loop and drain of the module docstring, with the masked tail: every step but the last
    n % S is a steady step of the loop, the copies of tiles past the end issued with nothing in range
    (AsyncCopy.live) in the last trip, so the drain is no peeled copy of the loop body (n < S: no loop, the
    prologue issues n tiles and the drain computes them)."""
    n, S, k = loop.extent, loop.num_stages, loop.var
    copies = _loads(loop)
    # (passes/ cannot import tilegcn.ops, whose lowerings import passes/: the classes come from the registry)
    AsyncCopy, CommitGroup, WaitGroup = (op_class(name) for name in ("async_copy", "commit_group", "wait_group"))

    def issue(kk, stage: int, live=None) -> list:
        return [AsyncCopy(_at(c.src, k, kk), c.dst, stage=stage, loc=c.loc, live=live) for c in copies] + \
            [CommitGroup(loc=loop.loc)]

    def compute(kk, stage: int) -> list:  # the body but its loads, at loop variable kk: gemms read `stage`
        return [dataclasses.replace(s, stage=stage) if s.k_loop_role() == COMPUTE else substituted(s, {k: kk})
                for s in loop.body if s.k_loop_role() != LOAD]

    def steady(kk, j: int, live) -> list:  # iteration kk, with kk % S == j
        copies = issue(kk + S - 1, (j + S - 1) % S, live)
        if wait_first:
            return [WaitGroup(S - 2, loc=loop.loc)] + copies + compute(kk, j)
        return copies + [WaitGroup(S - 1, loc=loop.loc)] + compute(kk, j)

    out = []
    for kk in range(min(S - 1, n)):
        out += issue(kk, kk)
    trips = n // S
    if trips:
        var = sympy.Symbol(f"{k}_", integer=True, nonnegative=True)
        body = []
        for j in range(S):
            tile = S * var + j + S - 1  # the tile this step's copies load; past the end in the last trip?
            body += steady(S * var + j, j, (tile, n) if S * (trips - 1) + j + S - 1 >= n else None)
        out.append(dataclasses.replace(loop, var=var, extent=trips, num_stages=1, body=body))
    newest = S * trips + S - 2 if trips else n - 1  # the newest tile in flight after the loop
    for kk in range(S * trips, n):
        out += [WaitGroup(newest - kk, loc=loop.loc)] + compute(sympy.Integer(kk), kk % S)
    return out


def _on_device(loop) -> bool:
    """A DeviceLoop (tilegcn/ops/device_loop.py): T.Pipelined with a bound only the device knows."""
    return hasattr(loop, "stop")


def _pipeline_on_device(loop, wait_first: bool) -> list:
    """`_pipeline` for a trip count n = stop - start only the device knows (a dynamic K, a causal bound), as
    Triton's pipeliner does for runtime trip counts (predicated prologue and epilogue): every copy is masked by
    its tile (AsyncCopy.live = (tile, stop): past the end, its V# has NUM_RECORDS 0 and nothing is read), so each
    step commits one group whatever n is and the wait counts stay exact without knowing n.

        prologue:  copies of tiles start .. start+S-2 into stages 0 .. S-2, one group each (min(n, S-1) of them
                   load something; n <= 0 loads nothing)
        steady:    for k_ in range(start, stop, S):  step k_; exit unless k_+1 < stop; step k_+1; ... step k_+S-1
                   step k: wait_group(S-2); copies of k+S-1 into stage (k-start+S-1) % S (masked past the end);
                   commit; the body at k, its gemms reading stage (k-start) % S  (or, issuing first, copies;
                   commit; wait_group(S-1); body)

    The steps of a trip are the loop body unrolled S times, so every stage index is a constant; a trip leaves the
    loop (LoopExit: a scalar branch to its end, not to the back-edge, so the wait counts at the loop head see whole
    trips only) where the steps run out, n % S steps in. There is no peeled drain: the last S - 1 steps are
    steady steps whose copies are masked (the masked tail of `_pipeline`), so steps n - S + 1 .. n - 1 wait for
    the tiles the earlier steps loaded and n < S runs only those. After the loop at most S - 1 masked groups are
    in flight, as after `_pipeline`'s masked tail. No K phases, no ping-pong: both need n when compiling."""
    S, k, start, stop = loop.num_stages, loop.var, loop.start, loop.stop
    copies = _loads(loop)
    AsyncCopy, CommitGroup, WaitGroup, LoopExit = (op_class(name) for name in (
        "async_copy", "commit_group", "wait_group", "loop_exit"))

    def issue(tile, stage: int) -> list:
        return [AsyncCopy(_at(c.src, k, tile), c.dst, stage=stage, loc=c.loc, live=(tile, stop)) for c in copies] \
            + [CommitGroup(loc=loop.loc)]

    def step(kk, j: int) -> list:  # iteration kk, the j-th of its trip: its gemms read stage j
        body = [dataclasses.replace(s, stage=j) if s.k_loop_role() == COMPUTE else substituted(s, {k: kk})
                for s in loop.body if s.k_loop_role() != LOAD]
        loads = issue(kk + S - 1, (j + S - 1) % S)
        if wait_first:
            return [WaitGroup(S - 2, loc=loop.loc)] + loads + body
        return loads + [WaitGroup(S - 1, loc=loop.loc)] + body

    out = []
    for j in range(S - 1):
        out += issue(start + j, j)
    var = sympy.Symbol(f"{k}_", integer=True)
    body = step(var, 0)
    for j in range(1, S):  # each later step of a trip only where the steps have not run out: else leave the loop
        body += [LoopExit(N.Condition("lt", (var + j, stop)), loc=loop.loc)] + step(var + j, j)
    out.append(dataclasses.replace(loop, var=var, step=S, num_stages=1, body=body))
    return out


def _rotated_split(loop, program: list, at: str = FIRST_GEMM):
    """(head, tail, twins) where `_pipeline_rotated` can run `loop` as an in-wave software pipeline split `at`, else
    None. A step then runs the next tile's head beside this tile's tail, so the list scheduler (amdgcn/schedule.py)
    fills one part's MFMA gaps with the other's VALU work: nothing but registers separates them within the step's
    one barrier.

    FIRST_GEMM: head = the statements up to and including the body's first gemm, less the loads (flash attention's
    score init and QK^T); tail = the rest (the online softmax, the rescale, PV). LAST_GEMM (FlashAttention-3's
    split): tail = the statements from the first that touches the last gemm's accumulator to the end (the rescale of
    acc_o and PV); head = the ones before (score init, QK^T and the online softmax up to the cast of P), so the
    softmax of tile k + 1 sits beside PV of tile k.

    Taken where reordering is exact: num_stages=2 and a trip count known when compiling, or only on the device
    (`_pipeline_rotated_on_device`: a causal bound); each tile loaded once, read by the head's
    or by the tail's statements, not both; the head writes fragments only; the tail writes nothing the head reads
    but has written first (head(k + 1) runs before tail(k)). The fragments the head writes and the tail touches are
    twinned (twins: fragment -> its second copy, the steps alternating: tail(k) reads tile k's while head(k + 1)
    writes tile k + 1's), so each must be written whole by the head's first statement touching it (a T.parallel
    store at its own indices, a T.fill or a whole-buffer T.copy, reading it not: head(k + 1) then needs nothing of
    head(k - 1)'s copy) and used nowhere outside the loop (its last value may be in either copy). The fragments
    the head alone touches (the online softmax's running max and sum) stay single: head(0), head(1), ... still
    run in order, each once, so they may be read after the loop (`_pipeline_rotated` then never runs a head on a
    tile past the end)."""
    if loop.num_stages != 2 or not (_on_device(loop) or isinstance(loop.extent, int)) or not _carried(loop):
        return None
    work = [x for x in loop.body if x.k_loop_role() != LOAD]
    cut = _first_gemm_cut(work) if at == FIRST_GEMM else _last_accumulator_cut(work)
    if cut is None or not 0 < cut < len(work):
        return None
    head, tail = work[:cut], work[cut:]
    reads = lambda xs: {r.buffer for x in xs for r in x.reads()}  # noqa: E731
    writes = lambda xs: {r.buffer for x in xs for r in x.writes()}  # noqa: E731
    loaded = {c.dst.buffer for c in _loads(loop)}
    if reads(head) & reads(tail) & loaded or not (loaded & reads(head) and loaded & reads(tail)) or \
            not loaded <= reads(head) | reads(tail):
        return None
    if writes(tail) & (reads(head) - writes(head)):
        return None  # the head of tile k + 1 would read it before the tail of tile k writes it
    if any(b.scope != N.FRAGMENT for b in writes(head)):
        return None
    rotated = writes(head) & (reads(tail) | writes(tail))
    if any(not _written_first(b, head) for b in rotated) or _used_outside(rotated, loop, program):
        return None
    twins = {b: dataclasses.replace(b, name=f"{b.name}_next") for b in sorted(rotated, key=lambda b: b.name)}
    return head, tail, twins


def _rotation(loop, program: list, rotate: str):
    """`_rotated_split` at the first of the splits from `rotate` on (ROTATIONS' order) that applies to `loop`."""
    for at in ROTATIONS[ROTATIONS.index(rotate):]:
        rotated = _rotated_split(loop, program, at)
        if rotated is not None:
            return rotated
    return None


def _first_gemm_cut(work: list):
    """Where FIRST_GEMM splits `work` (the loop body less its loads): after its first gemm."""
    first = next((i for i, x in enumerate(work) if x.k_loop_role() == COMPUTE), None)
    return None if first is None else first + 1


def _last_accumulator_cut(work: list):
    """Where LAST_GEMM splits `work`: at the first statement touching the last gemm's accumulator."""
    gemms = [x for x in work if x.k_loop_role() == COMPUTE]
    if len(gemms) < 2:
        return None
    acc = gemms[-1].C
    return next(i for i, x in enumerate(work) if acc in {r.buffer for r in x.reads() + x.writes()})


def _written_first(buf, stmts: list) -> bool:
    """Whether the first of `stmts` that touches `buf` writes every element of it without reading it."""
    for x in stmts:
        read, written = (buf in {r.buffer for r in rs} for rs in (x.reads(), x.writes()))
        if read or written:
            whole_store = x.opname == "parallel" and x.index is None and tuple(x.extents) == tuple(buf.shape)
            whole_copy = x.opname == "copy" and _whole(x.dst)
            return written and not read and (x.opname == "fill" or whole_store or whole_copy)
    return False


def _pipeline_rotated(loop, head: list, tail: list, twins: dict) -> list:
    """`loop` (num_stages=2, n steps) as an in-wave software pipeline: step k runs the head of tile k + 1 (its
    twinned fragments in the set of step k + 1's parity) beside the tail of tile k, so tile k + 1's head MFMAs and
    tile k's tail sit between the same two barriers. The head's tiles (K) are loaded a step further ahead than the
    tail's (V), each in 2 stages:

        prologue:  copies of head tile 0; commit; copies of head tile 1, tail tile 0; commit; wait_group(1); head(0)
        step k:    wait_group(0) (head tile k + 1 and tail tile k in LDS; every wave past step k - 1, so head stage
                   k % 2 and tail stage (k + 1) % 2 are free); copies of head tile k + 2, tail tile k + 1; commit;
                   head(k + 1); tail(k)
        last:      wait_group(0); tail(n - 1)

    The loop is unrolled twice (constant stages and fragment sets); copies past the end are issued with nothing in
    range (`AsyncCopy.live`). Where every fragment the head writes is twinned, the loop runs n // 2 trips and the
    head of tile n, in the last step of an even n, computes on such a stage into a copy nothing reads (an odd n
    leaves its last step after the loop). Where the head carries state of its own (a running max and sum:
    `_rotated_split`), no head runs past tile n - 1: the loop runs the steps 0 .. n - 2, its odd one peeled after
    it. The wait for everything in flight (vmcnt(0)) is the wait-first loop's at num_stages=2 too: the loads had
    one step to land."""
    n, k = loop.extent, loop.var
    AsyncCopy, CommitGroup, WaitGroup = (op_class(name) for name in ("async_copy", "commit_group", "wait_group"))
    head_copies, tail_copies = _head_and_tail_copies(loop, head)
    spare_head = {r.buffer for x in head for r in x.writes()} <= set(twins)  # a head past the end harms nothing

    def issue(copies, kk, stage: int, live) -> list:
        return [AsyncCopy(_at(c.src, k, kk), c.dst, stage=stage, loc=c.loc, live=live) for c in copies]

    def part(stmts, kk, parity: int) -> list:
        return _rotated_part(stmts, k, kk, parity, twins)

    def step(kk, j: int, live, ahead=True) -> list:  # step kk (kk % 2 == j): head(kk + 1) beside tail(kk)
        out = [WaitGroup(0, loc=loop.loc)] + (issue(head_copies, kk + 2, j, live(kk, 2)) if ahead else [])
        out += issue(tail_copies, kk + 1, 1 - j, live(kk, 1))
        return out + [CommitGroup(loc=loop.loc)] + part(head, kk + 1, 1 - j) + part(tail, kk, j)

    out = issue(head_copies, 0, 0, None) + [CommitGroup(loc=loop.loc)]
    out += issue(head_copies, 1, 1, None) if n > 1 else []
    out += issue(tail_copies, 0, 0, None) + [CommitGroup(loc=loop.loc)]
    out += [WaitGroup(1, loc=loop.loc)] + part(head, sympy.Integer(0), 0)
    steps = n if spare_head else n - 1  # the steps that run a head: all, or those of tiles 1 .. n - 1
    trips = steps // 2
    if trips:
        var = sympy.Symbol(f"{k}_", integer=True, nonnegative=True)
        body = []
        for j in range(2):
            last = 2 * (trips - 1) + j
            live = lambda kk, ahead: (kk + ahead, n) if last + ahead >= n else None  # noqa: E731
            body += step(2 * var + j, j, live)
        out.append(dataclasses.replace(loop, var=var, extent=trips, num_stages=1, body=body))
    if not spare_head and steps % 2:  # (no copies of head tile n)
        if trips:
            out += step(sympy.Integer(n - 2), n % 2, lambda kk, ahead: None, ahead=False)
        else:  # n = 2: the one step as a loop of one trip, whose softmax fragments layout.py keeps in VGPRs
            var = sympy.Symbol(f"{k}_", integer=True, nonnegative=True)
            body = step(var, 0, lambda kk, ahead: None, ahead=False)
            out.append(dataclasses.replace(loop, var=var, extent=1, num_stages=1, body=body))
    if n % 2 or not spare_head:
        out += [WaitGroup(0, loc=loop.loc)] + part(tail, sympy.Integer(n - 1), (n - 1) % 2)
    return out


def _pipeline_rotated_on_device(loop, head: list, tail: list, twins: dict) -> list:
    """`_pipeline_rotated` for a trip count n = stop - start only the device knows (flash attention's causal bound):
    the same steps, each copy masked by its tile (AsyncCopy.live = (tile, stop)), in a device loop over trips of
    two steps that leaves where the steps run out (LoopExit), as `_pipeline_on_device` does:

        if start < stop:
            prologue:  copies of head tile start; commit; of head tile start + 1, tail tile start; commit;
                       wait_group(1); head(start)
            for k_ in range(start, stop - 1, 2):  step k_; exit unless k_ + 1 < stop - 1; step k_ + 1
            wait_group(0); tail(stop - 1), its fragments and stages those of its parity: (n - 1) % 2, a branch

    Step k is `_pipeline_rotated`'s (head(k + 1) beside tail(k), its parity (k - start) % 2, a constant in the
    unrolled trip). No head runs past tile stop - 1 (the running max and sum stay exact); every step waits for all
    its copies (wait_group(0)), so the early exit leaves no wait count to fix. n <= 0 runs nothing, as the loop.
    Where the head's mask keeps whole the tiles below a bound the device computes (`_full_tile_steps`: causal
    attention's tiles left of the diagonal), the steps whose next tile is such come first, an even number of them,
    in a loop of their own whose head writes the mask's constant instead (`T.fill`: zeros fold into QK^T's first
    MFMAs), and the masked loop takes the rest from the same parity.
    Only for copies by LDS DMA (`_rewrite`): a register-staged copy (gfx942) is written to LDS at the wait after
    it, and the wait after this loop, which the last tail needs, would write the staging registers of the trip's
    second step on a path that left after its first (the emulator refuses the race that makes)."""
    k, start, stop = loop.var, loop.start, loop.stop
    AsyncCopy, CommitGroup, WaitGroup, LoopExit, If = (op_class(name) for name in (
        "async_copy", "commit_group", "wait_group", "loop_exit", "if"))
    head_copies, tail_copies = _head_and_tail_copies(loop, head)

    def issue(copies, tile, stage: int) -> list:
        return [AsyncCopy(_at(c.src, k, tile), c.dst, stage=stage, loc=c.loc, live=(tile, stop)) for c in copies]

    def part(stmts, kk, parity: int) -> list:
        return _rotated_part(stmts, k, kk, parity, twins)

    def step(kk, j: int, head_stmts=head) -> list:  # step kk, (kk - start) % 2 == j: head(kk + 1) beside tail(kk)
        out = [WaitGroup(0, loc=loop.loc)] + issue(head_copies, kk + 2, j) + issue(tail_copies, kk + 1, 1 - j)
        return out + [CommitGroup(loc=loop.loc)] + part(head_stmts, kk + 1, 1 - j) + part(tail, kk, j)

    body = issue(head_copies, start, 0) + [CommitGroup(loc=loop.loc)]
    body += issue(head_copies, start + 1, 1) + issue(tail_copies, start, 0) + [CommitGroup(loc=loop.loc)]
    body += [WaitGroup(1, loc=loop.loc)] + part(head, start, 0)
    masked_from = start
    full = _full_tile_steps(head, k, start, stop)
    if full is not None:
        masked_from, whole_head = full
        var = sympy.Symbol(f"{k}_w", integer=True)
        trip = step(var, 0, whole_head) + step(var + 1, 1, whole_head)
        body.append(dataclasses.replace(loop, var=var, start=start, stop=masked_from, step=2, num_stages=1,
                                        body=trip))
    var = sympy.Symbol(f"{k}_", integer=True)
    trip = step(var, 0) + [LoopExit(N.Condition("lt", (var + 1, stop - 1)), loc=loop.loc)] + step(var + 1, 1)
    body.append(dataclasses.replace(loop, var=var, start=masked_from, stop=stop - 1, step=2, num_stages=1,
                                    body=trip))
    last = stop - 1
    parity = sympy.Mod(stop - 1 - start, 2)  # SymPy may know it (a causal bound of even tile counts)
    if parity.is_Integer:
        final = part(tail, last, int(parity))
    else:
        final = [If(N.Condition("eq", (parity, 0)), part(tail, last, 0), part(tail, last, 1), loc=loop.loc)]
    body += [WaitGroup(0, loc=loop.loc)] + final
    return [If(N.Condition("lt", (start, stop)), body, [], loc=loop.loc)]


def _full_tile_steps(head: list, k, start, stop):
    """(the first step of the masked loop, the head with its mask replaced) where `head` writes a fragment with
    `T.if_then_else(a OP b, c1, c2)` (OP one of >=, >, <=, <; a, b index expressions affine in the T.Parallel indices
    and the loop variable k; c1 a constant) and the condition holds for every element of tile k exactly when k <=
    some bound K (causal attention: `bx * block_M + i >= k * block_N + j`, K = floor((bx * block_M - block_N + 1) /
    block_N)). The whole-tile steps are those whose head tile k + 1 is <= K, an even number of them from `start`:
    the masked loop starts at start + 2 * floor(max(0, min(K, stop - 1) - start) / 2); the replacement head writes c1
    everywhere (a `T.fill`). None where no statement of the head has that form."""
    Fill = op_class("fill")
    for at, x in enumerate(head):
        bound = _whole_below(x, k)
        if bound is None:
            continue
        # (kept >= 0: the device divides by a power of two with a logical shift)
        whole_steps = sympy.Max(0, sympy.Min(bound, stop - 1) - start)
        first_masked = start + 2 * sympy.floor(whole_steps / 2)
        whole = Fill(x.buffer, float(x.value.args[1].value), loc=x.loc)
        return first_masked, head[:at] + [whole] + head[at + 1:]
    return None


def _whole_below(x, k):
    """K for a T.Parallel mask `x` of `_full_tile_steps`'s form (its condition holds for every element exactly when
    k <= K), else None."""
    v = x.value if x.opname == "parallel" and x.index is None else None
    if not (isinstance(v, N.Call) and v.fn == "if_then_else" and isinstance(v.args[1], N.Const)
            and isinstance(v.args[1].value, (int, float)) and tuple(x.extents) == tuple(x.buffer.shape)):
        return None
    cond = v.args[0]
    if not (isinstance(cond, N.Call) and cond.fn in ("ge", "gt", "le", "lt")
            and all(isinstance(a, N.IndexValue) for a in cond.args)):
        return None
    a, b = (sympy.expand(sympy.sympify(c.expr)) for c in cond.args)
    if cond.fn in ("le", "lt"):
        a, b = b, a
    d = a - b  # the condition: d >= t, t = 0 for >= and <=, 1 for > and < (ints)
    least = d
    for index, extent in zip(x.indices, x.extents):
        c = d.coeff(index)
        if not (c.is_Integer and (d - c * index).free_symbols.isdisjoint({index})):
            return None
        least = least.subs(index, 0 if c >= 0 else extent - 1)
    ck = sympy.expand(least).coeff(k)
    rest = sympy.expand(least - ck * k)
    if not (ck.is_Integer and ck < 0 and k not in rest.free_symbols):
        return None
    # least = ck * k + rest >= t  <=>  k <= floor((rest - t) / -ck)
    return sympy.floor((rest - {"ge": 0, "gt": 1, "le": 0, "lt": 1}[cond.fn]) / -ck)


def _head_and_tail_copies(loop, head: list) -> tuple:
    """(the copies of the tiles `head` reads, the others) of a rotated loop."""
    head_reads = {r.buffer for x in head for r in x.reads()}
    loads = _loads(loop)
    return [c for c in loads if c.dst.buffer in head_reads], [c for c in loads if c.dst.buffer not in head_reads]


def _rotated_part(stmts: list, k, kk, parity: int, twins: dict) -> list:
    """`stmts` at loop variable `k` = `kk`, their gemms reading stage `parity` and their twinned fragments those of
    set `parity` (the second copies for 1)."""
    out = []
    for x in stmts:
        x = substituted(x, {k: kk})
        if x.k_loop_role() == COMPUTE:
            x = dataclasses.replace(x, stage=parity)
        out.append(_with_buffers(x, twins) if parity else x)
    return out


def _with_buffers(obj, mapping: dict):
    """A copy of statement `obj` with the buffers of `mapping` replaced (in its regions, element references and
    buffer fields); index expressions are shared."""
    if isinstance(obj, N.Buffer):
        return mapping.get(obj, obj)
    if isinstance(obj, list):
        return [_with_buffers(x, mapping) for x in obj]
    if isinstance(obj, tuple):
        return tuple(_with_buffers(x, mapping) for x in obj)
    if isinstance(obj, SUBSTITUTED):
        new = copy.copy(obj)
        for f in dataclasses.fields(obj):
            object.__setattr__(new, f.name, _with_buffers(getattr(obj, f.name), mapping))
        return new
    return obj


def _pipeline_ping_pong(loop, staged: bool = False) -> list:
    """The loop over K phases (split_k_phases: S = 4 stages of half a K tile) as a ping-pong: the workgroup's waves
    in two groups (first and second half) whose barrier sequences are one barrier apart, so that at any time one
    group runs a phase's MFMAs while the other reads its next fragments and issues its copies. A step s (stage
    s % S) of a wave: the copies of phase s + S - 1 and all of the gemm's LDS reads of phase s (the memory cluster),
    a barrier that publishes phase s + 1 (its copies retired: wait_group(S - 2)), the MFMAs (the MFMA cluster), a
    barrier. The second group's extra barrier before the loop (and the first group's after it) offsets them.

    Why it is correct with a group one barrier behind (epochs e = the intervals between the workgroup's barriers;
    the first group's memory cluster of step s is epoch 2s, its MFMAs 2s + 1, the second group's memory cluster
    2s + 1, its MFMAs 2s + 2): stage s is read in epochs 2s (first group) and 2s + 1 (second); its slot is
    overwritten by the copies of phase s + S, issued in epochs 2s + 2 and 2s + 3; each wave retires its copies of
    phase s + 1 before the barrier that ends its memory cluster of step s (epoch 2s + 1 or 2s + 2 begins there),
    so both halves of stage s + 1 are in LDS before epoch 2s + 2 and its first reader.

    The shape is HipKittens' 8-wave gfx950 GEMM (HazyResearch/HipKittens f09e968,
    kernels/gemm/bf16fp32/mi350x/256_256_64_32_with16x32.cpp: `if (warp_row == 1) s_barrier` before its loop, then
    loads and LDS reads, a barrier, the MFMAs between s_setprio 1 and 0, a barrier), measured at 1610 TFLOP/s on
    MI355X (S31): the evidence that an s_barrier releases when every wave of the workgroup has arrived at one, at
    whatever program point, which the emulated device and the timing model assume too. Unlike it, this loop leaves
    s_setprio out (Arch.gemm_ping_pong_prio: the timing model rates it slower).

    `staged` (copies through staging VGPRs, gfx942: no 16-byte LDS DMA, and 64 KiB of LDS hold one 256x256x64 bf16
    stage): the phases rotate over S = 2 LDS slots and 2 staging VGPR sets, and a step issues the copies of phase
    s + 2 (into the staging set of phase s, whose ds_writes ran in step s - 1), reads phase s, then its wait_group
    retires phase s + 1 (vmcnt for it, its ds_writes into the slot phase s - 1 had, lgkmcnt, barrier). Correct one
    barrier behind: both groups read phase s - 1 in epochs 2s - 2 and 2s - 1, and the ds_writes of phase s + 1 into
    its slot come in epochs 2s and 2s + 1, each finished before the barrier ending it, so phase s + 1 is whole in LDS
    before its first reader's epoch 2s + 2; within an epoch one group reads slot s % 2 and writes slot (s + 1) % 2
    while the other runs MFMAs. This is the scheme of Gluon's gfx942 `inter_wave` GEMM (ROCm/gfx950-gluon-tutorials
    kernels/gemm/gfx942/inter_wave: one LDS buffer, the next K tile in VGPRs, memory and MFMA regions alternating
    with the two wave groups one region apart), cut by K phase instead of by M/N quadrant: in the last trip the
    masked phase past the end is written as zeros into a slot nobody reads again."""
    n, k = loop.extent, loop.var
    # S: stages (LDS slots, and staging VGPR sets) the phases rotate over; ahead: phases in flight at a step's start
    S, ahead = (STAGED_SLOTS, STAGED_SLOTS) if staged else (loop.num_stages, loop.num_stages - 1)
    copies, gemms = _loads(loop), _gemms(loop)
    AsyncCopy, CommitGroup, WaitGroup, Barrier = (op_class(name) for name in (
        "async_copy", "commit_group", "wait_group", "wave_group_barrier"))

    def issue(kk, stage: int, live=None) -> list:
        return [AsyncCopy(_at(c.src, k, kk), c.dst, stage=stage, loc=c.loc, live=live) for c in copies] + \
            [CommitGroup(loc=loop.loc)]

    def step(stage: int, pending: int) -> list:
        reads = [dataclasses.replace(g, stage=stage, part="reads") for g in gemms]
        mfmas = [dataclasses.replace(g, stage=stage, part="mfma") for g in gemms]
        return reads + [WaitGroup(pending, sync=True, loc=loop.loc)] + mfmas + [Barrier(loc=loop.loc)]

    out = []
    for kk in range(ahead):
        out += issue(kk, kk % S)
    out += [WaitGroup(ahead - 1, loc=loop.loc), Barrier(group=1, loc=loop.loc)]
    trips = n // S
    var = sympy.Symbol(f"{k}_", integer=True, nonnegative=True)
    body = []
    for j in range(S):
        tile = S * var + j + ahead
        live = (tile, n) if S * (trips - 1) + j + ahead >= n else None
        body += issue(tile, (j + ahead) % S, live) + step(j, ahead - 1)
    out.append(dataclasses.replace(loop, var=var, extent=trips, num_stages=1, body=body, ping_pong=None))
    newest = S * trips + ahead - 1  # the newest tile in flight after the loop
    for kk in range(S * trips, n):  # the phase after kk is published in this step, if there is one
        out += step(kk % S, max(0, newest - (kk + 1)))
    return out + [Barrier(group=0, loc=loop.loc)]


def _at(region: N.Region, var, value) -> N.Region:
    """`region` at loop variable `var` = `value` (an int or a SymPy expression in the new loop's variable). A plain
    substitution (xreplace) is enough for integer-valued starts and costs a tenth of `subs`."""
    mapping = {var: sympy.sympify(value)}
    starts = tuple(sympy.sympify(s).xreplace(mapping) for s in region.starts)
    return N.Region(region.buffer, starts, region.extents)
