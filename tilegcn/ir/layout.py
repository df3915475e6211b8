"""Fragment layouts as objects: which thread holds which element of a fragment, in which of its registers.

A layout maps (thread, register r) to an element index of the fragment: `coords(r)` gives that index as SymPy
expressions in TID (the thread's index in the workgroup), one per dimension. Each thread holds `elems` elements,
registers 0 .. elems-1 in order. A layout may *replicate*: several threads then hold the same element (a row
statistic after a reduction, a small vector every thread needs); `writer(r)` says which one of them writes
the element back to memory, so a global store writes every element once.

The kinds (docs/layouts.md describes them for users):
  Blocked         runs of `run` consecutive elements along the last dim, run q of the tile held by thread
                  q % threads (register slot q // threads); fewer runs than threads replicate (run q held by
                  the threads with tid % runs == q).
  MfmaAccumulator the C tile of a T.gemm in the MFMA accumulator registers of the gemm plan (swapped operands:
                  a lane holds 4 consecutive columns j of a row i per register block).
  MfmaOperand     an A [M, K] or B [K, N] operand held in registers as the MFMA reads it (amdgcn/mfma_layout.py).
  Slice           the layout of a fragment reduced along `dims`: each thread keeps one register per distinct
                  remaining index it held in the parent; the threads that shared it hold the same value.
  Replicated      every thread holds every element.

This module is pure index algebra: it imports neither the language, nor torch, nor the passes.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import sympy

TID = sympy.Symbol("tid", integer=True, nonnegative=True)
WAVE = 64  # lanes of a wave (CDNA)
MAX_ACCESS_BYTES = 16  # widest buffer load/store: dwordx4


def _unravel(flat: int, shape: tuple) -> tuple:
    out = []
    for extent in reversed(shape):
        flat, i = divmod(flat, extent)
        out.append(i)
    return tuple(reversed(out))


class Layout:
    """Base of fragment layouts. Subclasses are frozen dataclasses: equal layouts compare (and hash) equal."""

    shape: tuple
    threads: int

    @property
    def elems(self) -> int:
        """Elements (registers, before 16-bit packing) each thread holds."""
        raise NotImplementedError

    @property
    def run(self) -> int:
        """Registers r, r+1, ... r+run-1 (r a multiple of run) hold consecutive elements along the last dim."""
        return 1

    def coords(self, r: int) -> tuple:
        """Index (SymPy in TID, one per dim) of this thread's element in register r."""
        raise NotImplementedError

    def writer(self, r: int):
        """None where every element is held by one thread; else SymPy expressions in TID (non-negative), of which
        one is 0 on exactly one of the threads holding register r's element: the thread that writes it."""
        return None

    @property
    def replicated(self) -> bool:
        return self.writer(0) is not None

    def describe(self) -> str:
        raise NotImplementedError

    def __str__(self):
        return self.describe()


@dataclass(frozen=True)
class Blocked(Layout):
    shape: tuple
    threads: int
    run_length: int

    def __post_init__(self):
        numel, cols = math.prod(self.shape), self.shape[-1]
        if cols % self.run_length or numel % self.run_length:
            raise ValueError(f"run {self.run_length} does not divide {list(self.shape)}")
        if self.runs > self.threads and self.runs % self.threads:
            raise ValueError(f"{self.runs} runs of {list(self.shape)} do not spread evenly over {self.threads} threads")

    @property
    def runs(self) -> int:
        return math.prod(self.shape) // self.run_length

    @property
    def replicas(self) -> int:
        """Threads holding each element (> 1 when the fragment has fewer runs than the workgroup threads)."""
        return max(1, self.threads // self.runs)

    @property
    def elems(self) -> int:
        return self.run_length * max(1, self.runs // self.threads)

    @property
    def run(self) -> int:
        return self.run_length

    def coords(self, r: int) -> tuple:
        shape, run = self.shape, self.run_length
        runs_per_row = shape[-1] // run
        slot, e = divmod(r, run)
        q = TID + self.threads * slot if self.runs >= self.threads else sympy.Mod(TID, self.runs)
        row = sympy.floor(q / runs_per_row) if runs_per_row > 1 else q
        col = (sympy.Mod(q, runs_per_row) * run if runs_per_row > 1 else 0) + e
        index = [col]
        for extent in reversed(shape[1:-1]):  # inner dims wrap; the outermost never exceeds its extent
            index.append(sympy.Mod(row, extent) if extent > 1 else sympy.Integer(0))
            row = sympy.floor(row / extent) if extent > 1 else row
        if len(shape) > 1:
            index.append(row)
        return tuple(reversed(index))

    def writer(self, r: int):
        return None if self.runs >= self.threads else (sympy.floor(TID / self.runs),)

    def describe(self) -> str:
        rep = f", replicated x{self.threads // self.runs}" if self.runs < self.threads else ""
        return f"blocked(run={self.run_length}, {self.elems}/thread{rep})"


# -- MFMA accumulator: the gemm plan's swapped-operand D layout in C coordinates ------------------------------

def mfma_acc_origin(waves_N: int, dim: int, wave_tile_M: int, wave_tile_N: int) -> tuple:
    """(i, j) of accumulator register 0 of this thread: wave (wm, wn) = (w // waves_N, w % waves_N), lane l
    holds row wm*wave_tile_M + l % dim and columns from wn*wave_tile_N + 4*(l // dim)."""
    wave, lane = sympy.floor(TID / WAVE), sympy.Mod(TID, WAVE)
    wm, wn = sympy.floor(wave / waves_N), sympy.Mod(wave, waves_N)
    return wm * wave_tile_M + sympy.Mod(lane, dim), wn * wave_tile_N + 4 * sympy.floor(lane / dim)


def mfma_acc_offsets(d_regs: int, repeats_N: int, dim: int, r: int) -> tuple:
    """(i, j) of accumulator register r minus those of register 0: integers, the same on every thread.
    Registers come in MFMA tiles (rep_m, rep_n) of d_regs; within one, G = 64/dim lane groups and blocks of 4
    consecutive columns: j offset 4*G*(reg // 4) + reg % 4."""
    rep, reg = divmod(r, d_regs)
    rm, rn = divmod(rep, repeats_N)
    groups = WAVE // dim
    return rm * dim, rn * dim + 4 * groups * (reg // 4) + reg % 4


@dataclass(frozen=True)
class MfmaAccumulator(Layout):
    shape: tuple  # (block_M, block_N)
    threads: int
    dim: int  # MFMA tile M == N
    d_regs: int  # accumulator registers of one MFMA tile
    waves_N: int
    repeats_M: int
    repeats_N: int

    def __post_init__(self):
        if (self.wave_tile_M, self.wave_tile_N) != (self.repeats_M * self.dim, self.repeats_N * self.dim):
            raise ValueError(f"{self.waves_M}x{self.waves_N} waves of {self.repeats_M}x{self.repeats_N} MFMA tiles "
                             f"of {self.dim}x{self.dim} do not make a {list(self.shape)} tile")

    @property
    def waves_M(self) -> int:
        return self.threads // WAVE // self.waves_N

    @property
    def wave_tile_M(self) -> int:
        return self.shape[0] // self.waves_M

    @property
    def wave_tile_N(self) -> int:
        return self.shape[1] // self.waves_N

    @property
    def elems(self) -> int:
        return self.d_regs * self.repeats_M * self.repeats_N

    @property
    def run(self) -> int:
        return 4  # the D row block: 4 consecutive j in 4 consecutive registers

    def origin(self) -> tuple:
        return mfma_acc_origin(self.waves_N, self.dim, self.wave_tile_M, self.wave_tile_N)

    def offsets(self, r: int) -> tuple:
        return mfma_acc_offsets(self.d_regs, self.repeats_N, self.dim, r)

    def coords(self, r: int) -> tuple:
        (i0, j0), (di, dj) = self.origin(), self.offsets(r)
        return i0 + di, j0 + dj

    def describe(self) -> str:
        return (f"mfma_acc({self.dim}x{self.dim}, waves {self.waves_M}x{self.waves_N}, "
                f"repeats {self.repeats_M}x{self.repeats_N}, {self.elems}/thread)")


@dataclass(frozen=True)
class MfmaOperand(Layout):
    """A gemm operand held in registers the way the MFMA reads it (amdgcn/mfma_layout.py's a_location and
    b_location): role "A" is [M, K] with lane = mfma_M * (kk // kpl) + i, role "B" is [K, N] with
    lane = mfma_N * (kk // kpl) + j, kk the MFMA's k index, register r % kpl = kk % kpl. Over the workgroup's wave
    grid (wm, wn) = (w // waves_N, w % waves_N), A's rows follow wm (replicated over wn) and B's columns follow wn
    (replicated over wm); repeats tile a wave's rows (columns) and K.

    Which real k an MFMA k index stands for is free, so long as both operands agree: here a lane's k come in runs
    of 4 spaced by 4*G (G = 64 / dim lane groups), k = step * mfma_K + 4*G*(kk' // 4) + 4*(lane // dim) + kk' % 4
    for its kk' = 0 .. kpl-1, the order of the MFMA accumulator's columns (mfma_acc_offsets). For kpl = 4 that is
    kk itself; for kpl = 8 (gfx950's 32x32x16 and 16x16x32) it is what lets a T.gemm accumulator, cast to 16
    bits, be the A operand of the next T.gemm without leaving its registers (passes/gemm_plan.py's register_k reads
    B in the same order). `k_chunks`: a lane's kpl k are consecutive instead, k = step * mfma_K + kpl*(lane // dim)
    + kk, the order of a gemm reading both operands from LDS (one 16-byte chunk a lane: B then takes one
    ds_read_b128 an MFMA, not two ds_read_b64); for an A nothing computes in registers (a tile loaded from memory,
    flash attention's Q), whose k order is free (passes/gemm.py `plan_gemms`)."""

    shape: tuple
    threads: int
    role: str  # "A" or "B"
    dim: int  # MFMA M == N
    k_per_lane: int
    waves_N: int
    k_chunks: bool = False

    @property
    def waves_M(self) -> int:
        return self.threads // WAVE // self.waves_N

    @property
    def mfma_K(self) -> int:
        return self.k_per_lane * WAVE // self.dim

    @property
    def _extents(self) -> tuple:
        """(rows or columns per wave, K) of the operand."""
        if self.role == "A":
            return self.shape[0] // self.waves_M, self.shape[1]
        return self.shape[1] // self.waves_N, self.shape[0]

    @property
    def repeats(self) -> tuple:
        x, k = self._extents
        return x // self.dim, k // self.mfma_K

    @property
    def elems(self) -> int:
        rx, rk = self.repeats
        return rx * rk * self.k_per_lane

    @property
    def run(self) -> int:
        if self.role != "A":
            return 1
        return self.k_per_lane if self.k_chunks else min(self.k_per_lane, 4)  # A's registers run along k, its last dim

    def coords(self, r: int) -> tuple:
        rep, kk = divmod(r, self.k_per_lane)
        rx, rk = divmod(rep, self.repeats[1])
        wave, lane = sympy.floor(TID / WAVE), sympy.Mod(TID, WAVE)
        wm, wn = sympy.floor(wave / self.waves_N), sympy.Mod(wave, self.waves_N)
        x_wave = (wm if self.role == "A" else wn) * self._extents[0]
        x = x_wave + rx * self.dim + sympy.Mod(lane, self.dim)
        if self.k_chunks:
            k = rk * self.mfma_K + self.k_per_lane * sympy.floor(lane / self.dim) + kk
        else:
            k = rk * self.mfma_K + 4 * (WAVE // self.dim) * (kk // 4) + 4 * sympy.floor(lane / self.dim) + kk % 4
        return (x, k) if self.role == "A" else (k, x)

    def writer(self, r: int):
        wave = sympy.floor(TID / WAVE)
        other = sympy.Mod(wave, self.waves_N) if self.role == "A" else sympy.floor(wave / self.waves_N)
        return None if other == 0 else (other,)

    def describe(self) -> str:
        return (f"mfma_operand_{self.role}({self.dim}x{self.dim}x{self.mfma_K}, waves {self.waves_M}x{self.waves_N},"
                f" {self.elems}/thread{', k chunks' if self.k_chunks else ''})")


@dataclass(frozen=True)
class Replicated(Layout):
    shape: tuple
    threads: int

    @property
    def elems(self) -> int:
        return math.prod(self.shape)

    @property
    def run(self) -> int:
        return _largest_power_of_two_dividing(self.shape[-1], MAX_ACCESS_BYTES)

    def coords(self, r: int) -> tuple:
        return tuple(sympy.Integer(i) for i in _unravel(r, self.shape))

    def writer(self, r: int):
        return (TID,) if self.threads > 1 else None

    def describe(self) -> str:
        return f"replicated({self.elems}/thread)"


def _largest_power_of_two_dividing(n: int, cap: int) -> int:
    p = 1
    while p * 2 <= cap and n % (p * 2) == 0:
        p *= 2
    return p


@dataclass(frozen=True)
class Slice(Layout):
    """`parent` with the dims `dims` reduced away. Register r of the slice is the r-th distinct remaining index
    among the parent's registers of a thread (in register order); `parent_register(r)` maps each parent register
    to its slice register."""

    parent: Layout
    dims: tuple  # reduced dims of the parent, ascending
    keepdims: bool = False  # the reduced dims stay, with extent 1 (index 0)

    @property
    def shape(self) -> tuple:
        if self.keepdims:
            return tuple(1 if d in self.dims else e for d, e in enumerate(self.parent.shape))
        return tuple(e for d, e in enumerate(self.parent.shape) if d not in self.dims)

    @property
    def threads(self) -> int:
        return self.parent.threads

    @property
    def _groups(self) -> tuple:
        return _slice_groups(self.parent, self.dims)

    @property
    def elems(self) -> int:
        return len(self._groups[0])

    @property
    def run(self) -> int:
        keys = self._groups[0]
        best = 1
        for p in (2, 4, 8, 16):
            if len(keys) % p or (self.shape and self.shape[-1] % p) or not all(
                    _is_next(keys[r + k - 1], keys[r + k], self.threads) for r in range(0, len(keys), p) for k in range(1, p)):
                break
            best = p
        return best

    def coords(self, r: int) -> tuple:
        kept = iter(self._groups[0][r])
        if self.keepdims:
            return tuple(sympy.Integer(0) if d in self.dims else next(kept) for d in range(len(self.parent.shape)))
        return self._groups[0][r]

    def slice_register(self, parent_r: int) -> int:
        """The slice register holding the reduction of parent register `parent_r`."""
        return self._groups[1][parent_r]

    def writer(self, r: int):
        """The thread that held, in the parent, the element with index 0 along every reduced dim (and was its
        writer there): one thread per remaining index."""
        terms, seen = [], set()
        for pr in range(self.parent.elems):
            if self.slice_register(pr) != r:
                continue
            dropped = sum((c for d, c in enumerate(self.parent.coords(pr)) if d in self.dims), sympy.Integer(0))
            for w in self.parent.writer(pr) or (sympy.Integer(0),):
                values = _values(dropped + w, self.threads)
                if values.all() or values.tobytes() in seen:  # never 0 on any thread, or a term already there
                    continue
                seen.add(values.tobytes())
                terms.append(dropped + w)
        if not terms:  # every holder of these elements writes them from another of its registers
            return (sympy.Integer(1),)
        return None if all(t == 0 for t in terms) else tuple(terms)

    @property
    def replicated(self) -> bool:
        return any(self.writer(r) is not None for r in range(self.elems))

    def describe(self) -> str:
        dims = ", ".join(map(str, self.dims)) + (", keepdims" if self.keepdims else "")
        return f"slice({self.parent.describe()}, dim={dims}; {self.elems}/thread)"


@dataclass(frozen=True)
class Expanded(Layout):
    """`child`'s layout with the dims `dims` (of extents shape[d]) added and held whole by every thread: the layout
    of x in `y[i] = x[k, i]` with k constant (TileLang's flash decoding reads one split's row of its log-sum-exp
    fragment so). Register c * child.elems + r holds the child's element r at the c-th index of the added dims, so
    the child's runs along the last dim stay runs."""

    child: Layout
    dims: tuple  # the added dims, ascending
    shape: tuple

    @property
    def threads(self) -> int:
        return self.child.threads

    @property
    def _added(self) -> tuple:
        return tuple(self.shape[d] for d in self.dims)

    @property
    def elems(self) -> int:
        return self.child.elems * math.prod(self._added)

    @property
    def run(self) -> int:
        return 1 if len(self.shape) - 1 in self.dims else self.child.run

    def coords(self, r: int) -> tuple:
        c, child_r = divmod(r, self.child.elems)
        added, kept = iter(_unravel(c, self._added)), iter(self.child.coords(child_r))
        return tuple(sympy.Integer(next(added)) if d in self.dims else next(kept) for d in range(len(self.shape)))

    def writer(self, r: int):
        return self.child.writer(r % self.child.elems)

    def describe(self) -> str:
        return f"expanded({self.child.describe()}, dim={', '.join(map(str, self.dims))}; {self.elems}/thread)"


# ---- what tile ops say about the layouts of the fragments they touch (TileOp.layout_constraints) ------------
# Layout inference (passes/layout_inference.py) solves them. `stmt` is the op that states it (its line is named
# when two uses disagree); `read` is the index a T.Parallel reads the fragment at, where a layout conversion of
# that read can settle a disagreement (None: the op itself must be given the layouts).

@dataclass(frozen=True)
class Force:
    """`buffer` must have layout `layout` (a T.gemm accumulator: the plan's MFMA accumulator layout)."""

    buffer: object
    layout: Layout
    stmt: object


@dataclass(frozen=True)
class Same:
    """`a` and `b` have one layout (a fragment copy; a T.Parallel reading `a` at its own indices into `b`)."""

    a: object
    b: object
    stmt: object
    read: tuple | None = None


@dataclass(frozen=True)
class SliceOf:
    """`buffer` has `parent`'s layout with `dims` reduced away (a broadcast read x[i] in T.Parallel(M, N) over
    `parent`; a reduction of `parent` into `buffer`, keepdims where it keeps the dims with extent 1)."""

    buffer: object
    parent: object
    dims: tuple
    stmt: object
    read: tuple | None = None
    keepdims: bool = False


@dataclass(frozen=True)
class ExpandOf:
    """`buffer` has `child`'s layout with `dims` added, held whole by each thread (a T.Parallel over `child` reading
    `buffer` at constants on `dims` and at the loop's indices, in order, on the others: x[k, i], k constant)."""

    buffer: object
    child: object
    dims: tuple
    stmt: object
    read: tuple | None = None


@dataclass(frozen=True)
class Whole:
    """Every thread holds all of `buffer` (a read at constant indices, x[0])."""

    buffer: object
    stmt: object
    read: tuple | None = None


@dataclass(frozen=True)
class Vector:
    """`buffer` is moved to or from memory of elements `element_bytes` wide (bounds the blocked run length)."""

    buffer: object
    element_bytes: int


def _is_next(a: tuple, b: tuple, threads: int) -> bool:
    """b is a with its last index one higher, on every thread."""
    return all((_values(x, threads) == _values(y, threads)).all() for x, y in zip(a[:-1], b[:-1])) and \
        (_values(b[-1], threads) - _values(a[-1], threads) == 1).all()


@functools.lru_cache(maxsize=256)
def _slice_groups(parent: Layout, dims: tuple) -> tuple:
    """(remaining index of each slice register, slice register of each parent register). Parent registers are
    grouped by the values their remaining index takes on every thread (SymPy does not always see that two
    index expressions are equal), so one thread never holds one element in two registers."""
    keys, index_of, of_parent = [], {}, []
    for r in range(parent.elems):
        key = tuple(c for d, c in enumerate(parent.coords(r)) if d not in dims)
        signature = tuple(_values(c, parent.threads).tobytes() for c in key)
        if signature not in index_of:
            index_of[signature] = len(keys)
            keys.append(tuple(sympy.expand(c) for c in key))
        of_parent.append(index_of[signature])
    return tuple(keys), tuple(of_parent)


def register_of(layout: Layout, index: tuple):
    """The register of `layout` holding element `index` (SymPy in TID) on every thread, or None when no single
    register does (then the element lives in another thread: a layout conversion is needed)."""
    want = [_values(i, layout.threads) for i in index]
    for r in range(layout.elems):
        if all((_values(c, layout.threads) == w).all() for c, w in zip(layout.coords(r), want)):
            return r
    return None


MAX_SELECT = 8  # source registers a thread picks among per destination register before LDS is the better route


def in_thread_sources(src: Layout, dst: Layout) -> tuple | None:
    """For each register r of `dst`: (flat index of its element as SymPy in TID, {flat index: register of `src`
    holding that element}), where every thread holds its `dst` elements in `src` too, at registers that depend on
    the thread through the element's index only, among at most MAX_SELECT of them (a Replicated source, or a
    source whose registers map to the destination's alike on every thread); else None (a conversion then needs
    other threads' data, through LDS)."""
    static = [register_of(src, dst.coords(r)) for r in range(dst.elems)]
    if all(x is not None for x in static):
        return tuple((sympy.Integer(0), {0: x}) for x in static)
    if not isinstance(src, Replicated):
        return None
    out = []
    for r in range(dst.elems):
        flat = sympy.Integer(0)
        for c, extent in zip(dst.coords(r), src.shape):
            flat = flat * extent + c
        flat = sympy.expand(flat)
        options = sorted(set(_values(flat, dst.threads).tolist()))
        if len(options) > MAX_SELECT:
            return None
        out.append((flat, {f: f for f in options}))  # a Replicated layout holds element f in register f
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def _values(expr, threads: int):
    """The integer value of an index expression on threads 0 .. threads-1 (a read-only numpy array)."""
    import numpy as np

    out = np.broadcast_to(_eval_int(sympy.sympify(expr), np.arange(threads)), (threads,)).copy()
    out.flags.writeable = False
    return out


def replicated_bits(layout: Layout) -> int:
    """The thread-id bits whose flip leaves every register of a thread holding the same element: the threads that
    differ only in those bits hold copies of one another (a row vector's copies, for cross-lane reductions)."""
    import numpy as np

    tids = np.arange(layout.threads)
    columns = [_values(c, layout.threads) for r in range(layout.elems) for c in layout.coords(r)]
    bits = 0
    for k in range(max(layout.threads - 1, 0).bit_length()):
        partner = tids ^ (1 << k)
        inside = partner < layout.threads
        if all((col[inside] == col[partner[inside]]).all() for col in columns):
            bits |= 1 << k
    return bits


def holders(layout: Layout) -> dict:
    """{element index: [(thread, register), ...]} by evaluating coords on every thread (tests, debugging)."""
    import numpy as np

    out: dict = {}
    for r in range(layout.elems):
        columns = np.stack([_values(c, layout.threads) for c in layout.coords(r)], axis=1).tolist()
        for t, index in enumerate(columns):
            out.setdefault(tuple(index), []).append((t, r))
    return out


def writers(layout: Layout) -> dict:
    """{element index: [(thread, register)]} of the threads whose writer() term is 0 (all holders where the
    layout does not replicate)."""
    import numpy as np

    tids = np.arange(layout.threads)
    out: dict = {}
    for r in range(layout.elems):
        columns = np.stack([_values(c, layout.threads) for c in layout.coords(r)], axis=1)
        terms = layout.writer(r)
        active = np.zeros(tids.shape, bool) if terms else np.ones(tids.shape, bool)
        for term in terms or ():
            active |= _values(term, layout.threads) == 0
        for t in tids[active].tolist():
            out.setdefault(tuple(columns[t].tolist()), []).append((t, r))
    return out


def _eval_int(expr, tids):
    """Integer evaluation of floor/Mod/+/* expressions over an array of thread ids (exact, unlike floats)."""
    import numpy as np

    if expr.is_Integer:
        return np.full(tids.shape, int(expr), dtype=np.int64)
    if expr == TID:
        return tids.astype(np.int64)
    if expr.is_Add:
        return sum(_eval_int(a, tids) for a in expr.args)
    if expr.is_Mul:
        num, den = expr.as_numer_denom()
        if den != 1:
            raise ValueError(f"non-integer {expr}")
        out = np.ones(tids.shape, dtype=np.int64)
        for a in expr.args:
            out = out * _eval_int(a, tids)
        return out
    if isinstance(expr, sympy.Mod):
        return np.mod(_eval_int(expr.args[0], tids), _eval_int(expr.args[1], tids))
    if isinstance(expr, sympy.floor):
        num, den = expr.args[0].as_numer_denom()
        return np.floor_divide(_eval_int(num, tids), _eval_int(den, tids))
    raise ValueError(f"cannot evaluate {expr}")
