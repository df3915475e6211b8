"""LDS allocation: a byte offset for every shared buffer, within the arch's LDS budget, buffers whose lifetimes do
not overlap sharing their bytes.

Input: a kernel after pipelining (passes/pipelining.py) and its gemm plans. A shared buffer written by AsyncCopy into
stages 0..S-1 gets L LDS copies of itself ("LDS buffers", one after the other; stage s lives in buffer s % L):
L = S where they fit, and always for a buffer filled by LDS DMA (the DMA writes its stage's buffer while older
stages are still read). A register-staged buffer keeps the stages ahead in VGPRs and writes LDS only when its
stage is due, so it can share LDS buffers: L is the largest divisor of S that fits (1 for 256x256x64 bf16 at
num_stages=2 on gfx942's 64 KiB, the HipKittens MI300X schedule).

Lifetimes: a shared buffer lives from the first to the last top-level statement of the kernel body that touches it
(a loop, or a pipelined K loop's prologue, steady loop and epilogue, counts whole), so a GEMM's C tile staged
through shared memory after the K loop takes the bytes of the A and B stages (TileLang's GEMMs store C so). Buffers
are placed in declaration order, each at the lowest offset whose bytes no buffer of an overlapping lifetime holds
(first fit); where every lifetime overlaps that is one buffer after the other. The first statement using bytes an
earlier buffer used (a "reuse point") starts with an s_barrier (`reuse_barrier`): every wave is done with the old
buffer before any writes the new one.

Row padding: a shared buffer that only T.copy touches (a tile staged between fragments and global memory, TileLang's
C_shared) and whose rows are a whole number of sweeps of the LDS banks is stored with ROW_PAD_BYTES more per row
(`row_pitches`): a fragment whose threads hold one column each in consecutive rows (the MFMA accumulator) would
otherwise write every lane of a wave into the same banks, a 32-way conflict (the timing model puts it at a fifth of
a 4096^3 GEMM's time on gfx950, bench/gemm_c_through_shared.py). Buffers other ops address themselves (T.gemm
operands, T.cumsum's, a layout conversion's scratch) keep their row-major rows. Where the arch serves ds_read_b128
in measured phases (gfx950, Arch.lds_phases: each phase 16 lanes of one 32-lane half, not 16 consecutive lanes), a
half wave reading 512 contiguous bytes of a row-major tile in 16-byte pieces is conflict free however the rows lie,
but rows of one sweep (256 bytes) put two rows in a half wave, and a pad between them moves the second row's
chunks 4..11 (phase 0 of the half) onto the first row's chunks 12..15 / 0..3: 2-way conflicts for any pad that is
not a whole sweep. So the pad goes after every HALF_WAVE_READ_BYTES / row bytes rows (`RowPadding.rows`; a pad a
row where the buffer's row count is not a multiple of that): the rows of a half wave lie unpadded, and the
accumulator's lanes (one row each) still spread over the banks, two rows on the same ones (as with a pad a row:
lanes 16 rows apart share banks).

Output: an `LdsAllocation`; ResourceError when even the least LDS the copy paths need exceeds arch.lds_bytes, naming
the bytes needed and available, the buffers live together at the peak, and which num_stages / block_K would fit.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..errors import ResourceError
from ..ir import nodes as N
from ..ir.ops import TileOp


@dataclass
class LdsAllocation:
    offsets: dict  # shared Buffer -> offset of its LDS buffer 0
    stage_bytes: dict  # shared Buffer -> bytes between its LDS buffers
    counts: dict  # shared Buffer -> LDS buffers its pipeline stages rotate over
    total: int  # LDS bytes the kernel asks for
    reuse: dict = field(default_factory=dict)  # top-level statement -> [(buffer, [buffers whose bytes it takes])]
    pitches: dict = field(default_factory=dict)  # padded shared Buffer -> its RowPadding


ROW_PAD_BYTES = 16  # a padded row's extra bytes: 4 banks, and rows still start 16-byte aligned (ds_read_b128)
HALF_WAVE_READ_BYTES = 32 * 16  # what the 32 lanes of a ds_read_b128 half wave read (the measured phases' span)


@dataclass(frozen=True)
class RowPadding:
    """`elems` more elements after every `rows` rows of a shared buffer's last two dims (module doc, row padding)."""
    elems: int
    rows: int = 1


def _pad_rows(arch, row_bytes: int, rows: int) -> int:
    """Rows between two pads: 1, or where ds_read_b128 has measured phases the rows of one half wave's read."""
    group = max(1, HALF_WAVE_READ_BYTES // row_bytes) if arch.lds_read_phases.get(16) is not None else 1
    return group if rows % group == 0 else 1


def row_pitches(kernel: N.Kernel, arch) -> dict:
    """{shared Buffer: RowPadding} of the buffers stored with padded rows (module doc)."""
    sweep = arch.lds_banks * arch.lds_bank_bytes
    users: dict = {}  # shared buffer -> the ops naming it (in any field, not only their access regions)
    for s in N.walk(kernel.body):
        for buf in _shared_buffers(s, {}, nested=False):
            users.setdefault(buf, set()).add(s.opname)
    return {b: RowPadding(ROW_PAD_BYTES // b.dtype.bytes, _pad_rows(arch, b.shape[-1] * b.dtype.bytes, b.shape[-2]))
            for b, ops in users.items()
            if ops == {"copy"} and len(b.shape) >= 2 and b.shape[-1] * b.dtype.bytes % sweep == 0}


def stage_counts(kernel: N.Kernel) -> dict:
    """{shared Buffer: pipeline stages} (1 for a buffer never written by an AsyncCopy)."""
    stages: dict = {}
    for s in N.walk(kernel.body):
        for buf, stage in s.stage_writes():  # async copies into a pipeline stage (tilegcn/ops/async_copy.py)
            stages[buf] = max(stages.get(buf, 1), stage + 1)
    return stages


def lifetimes(kernel: N.Kernel, scratch: dict | None = None) -> dict:
    """{shared Buffer: (first, last) index of the top-level statements touching it}. `scratch`: statement -> the
    shared buffer its lowering uses besides its fields (a cross-wave reduction's). A buffer no statement names
    lives throughout (nothing proves it free)."""
    spans: dict = {}
    for k, s in enumerate(kernel.body):
        for buf in _shared_buffers(s, scratch or {}):
            first, _ = spans.get(buf, (k, k))
            spans[buf] = (first, k)
    whole = (0, max(len(kernel.body) - 1, 0))
    return {b: spans.get(b, whole) for b in kernel.buffers if b.scope == N.SHARED}


def _shared_buffers(stmt, scratch: dict, nested: bool = True) -> set:
    """The shared buffers statement `stmt` (its nested statements included, unless not `nested`) names in any field:
    regions, element reads, a conversion's scratch, plus the `scratch` buffers of the statements in it."""
    found: set = set()
    stack, seen = [stmt], set()
    while stack:
        x = stack.pop()
        if isinstance(x, N.Buffer):
            if x.scope == N.SHARED:
                found.add(x)
            continue
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, (list, tuple, set, frozenset)):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.values())
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            if isinstance(x, TileOp) and x is not stmt and not nested:
                continue  # a statement of stmt's body
            if isinstance(x, TileOp) and x in scratch:
                found.add(scratch[x])
            stack.extend(getattr(x, f.name) for f in dataclasses.fields(x))
    return found


def allocate_shared(kernel: N.Kernel, arch, gemm_plans: dict, by_dma=lambda buf: True,
                    scratch: dict | None = None) -> LdsAllocation:
    """`by_dma(buf)`: whether the pipelined copies into `buf` may go by LDS DMA (then every stage needs its own LDS
    buffer); the default assumes they may. `scratch`: statement -> an LDS scratch buffer its lowering uses."""
    align = arch.lds_banks * arch.lds_bank_bytes  # a swizzled tile starts on a whole sweep of the banks
    shared = [b for b in kernel.buffers if b.scope == N.SHARED]
    stages = stage_counts(kernel)
    spans = lifetimes(kernel, scratch)
    S = max(stages.values(), default=1)
    sharing = {b for b in shared if stages.get(b, 1) > 1 and not by_dma(b)}

    def layout(L: int) -> dict:
        return {b: L if b in sharing else stages.get(b, 1) for b in shared}

    padded = row_pitches(kernel, arch)
    # the most LDS buffers per stage that fit, with padded rows where they fit too (padding never costs a stage)
    tries = [(L, pitches) for L in sorted((d for d in range(1, S + 1) if S % d == 0), reverse=True)
             for pitches in ([padded, {}] if padded else [{}])]
    for L, pitches in tries:
        counts = layout(L)
        sizes = {b: -(-_bytes(b, pitches) // align) * align for b in shared}
        offsets, total = place(shared, {b: sizes[b] * counts[b] for b in shared}, spans)
        if total <= arch.lds_bytes:
            break
    if total > arch.lds_bytes:
        raise ResourceError(_budget_message(arch, total, shared, sizes, counts, spans, stages, sharing, S,
                                            gemm_plans), location=shared[0].loc)
    return LdsAllocation(offsets, sizes, counts, total, _reuse_points(kernel, shared, offsets, sizes, counts, spans),
                         pitches)


def _bytes(buf: N.Buffer, pitches: dict) -> int:
    rows = buf.numel // buf.shape[-1] if buf.shape else 1
    pad = pitches.get(buf)
    return (buf.numel + (rows // pad.rows) * pad.elems if pad else buf.numel) * buf.dtype.bytes


def place(buffers: list, nbytes: dict, spans: dict) -> tuple:
    """({buffer: offset}, total bytes): each buffer in order at the lowest offset whose bytes no buffer placed
    before it with an overlapping lifetime holds."""
    offsets: dict = {}
    for b in buffers:
        taken = sorted((offsets[o], offsets[o] + nbytes[o]) for o in offsets if _overlap(spans[o], spans[b]))
        at = 0
        for start, end in taken:
            if at + nbytes[b] <= start:
                break
            at = max(at, end)
        offsets[b] = at
    return offsets, max((offsets[b] + nbytes[b] for b in buffers), default=0)


def _overlap(a: tuple, b: tuple) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def _reuse_points(kernel, shared, offsets, sizes, counts, spans) -> dict:
    """{top-level statement: [(buffer, [earlier buffers whose bytes it takes])]}, at each buffer's first statement."""
    points: dict = {}
    for b in shared:
        lo, hi = offsets[b], offsets[b] + sizes[b] * counts[b]
        older = [o for o in shared if spans[o][1] < spans[b][0]
                 and offsets[o] < hi and lo < offsets[o] + sizes[o] * counts[o]]
        if older:
            points.setdefault(kernel.body[spans[b][0]], []).append((b, older))
    return points


def reuse_barrier(ctx, stmt) -> None:
    """Before top-level statement `stmt`: where it is the first to use bytes an earlier buffer used, an s_barrier
    so that no wave writes the new buffer while another still reads the old one (the wait pass drains this wave's
    LDS accesses before it, and the LDS DMA writes of a K loop's stages ahead, which its last trips issue for trips
    that never come, named in the barrier's uses); every LDS access before it is then complete and visible."""
    taken = ctx.lds_reuse.get(stmt) if ctx.lds_reuse else None
    if not taken:
        return
    what = "; ".join(f"{b.name} takes the bytes of {', '.join(o.name for o in older)}" for b, older in taken)
    in_flight = tuple(ctx.pipe.tags.values()) if ctx.pipe is not None else ()  # a K loop's LDS DMA stages ahead
    ctx.b.emit("s_barrier", uses=in_flight, comment=f"LDS reuse: {what}")
    ctx.lds_state = "idle"
    if ctx.pipe is not None:
        ctx.pipe.barrier()


def _budget_message(arch, total, shared, sizes, counts, spans, stages, sharing, S, gemm_plans) -> str:
    peak = _peak(shared, {b: sizes[b] * counts[b] for b in shared}, spans)
    parts = ", ".join(f"{b.name} {sizes[b]}" if counts[b] == 1 else f"{b.name} {counts[b]} stages x {sizes[b]}"
                      for b in peak)
    others = [b.name for b in shared if b not in peak]
    reused = f"; {', '.join(others)} reuse{'s' if len(others) == 1 else ''} their bytes" if others else ""
    hint = _what_fits(arch.lds_bytes, shared, sizes, stages, sharing, S, gemm_plans, spans)
    live = "live together" if others else ""
    return (f"LDS budget exceeded: needs {total} bytes ({parts}{', ' + live if live else ''}{reused}), {arch.name} "
            f"has {arch.lds_bytes}{hint}")


def _peak(shared: list, nbytes: dict, spans: dict) -> list:
    """The buffers live at the top-level statement where the live bytes are the most (the first such)."""
    last = max((hi for _, hi in spans.values()), default=0)
    best = max(range(last + 1), key=lambda k: (sum(nbytes[b] for b in shared if spans[b][0] <= k <= spans[b][1]), -k))
    return [b for b in shared if spans[b][0] <= best <= spans[b][1]]


def _what_fits(room: int, shared: list, sizes: dict, stages: dict, sharing: set, num_stages: int, gemm_plans: dict,
               spans: dict) -> str:
    """Which num_stages (the DMA-filled buffers need one LDS buffer per stage) or halved block_K would fit."""
    staged = [b for b in shared if stages.get(b, 1) > 1]

    def needs(size: dict, n: int) -> int:
        counts = {b: 1 if b in sharing or b not in staged else n for b in shared}
        return place(shared, {b: size[b] * counts[b] for b in shared}, spans)[1]

    hints = []
    if num_stages > 1 and any(b not in sharing for b in staged):
        fit = next((n for n in range(num_stages - 1, 0, -1) if needs(sizes, n) <= room), 0)
        hints.append(f"num_stages={fit} fits" if fit >= 1 else "not even num_stages=1 fits")
    block_K = {p.block_K for p in gemm_plans.values()}
    if num_stages > 1 and len(block_K) == 1 and (bk := block_K.pop()) >= 16 and \
            needs({b: sizes[b] // 2 if b in staged else sizes[b] for b in shared}, num_stages) <= room:
        hints.append(f"block_K={bk // 2} with num_stages={num_stages} fits")
    return "; " + ", or ".join(hints) if hints else ""
