"""Planning math for `T.gemm`: pure data the AMDGCN emitter consumes (no instruction emission here).

    plan = plan_gemm("gfx942", "bf16", 128, 128, 64, threads=256, transpose_A=False, transpose_B=False)
    plan.mfma, plan.waves_M, plan.waves_N, plan.repeats_M, plan.repeats_N, plan.read_steps, ...
    plan.operand_read_offsets("A", wave, lane, rep, kstep_pair)     # LDS byte offset of one ds_read_b128
    plan.read_offsets("A")                                          # the same, as VGPR bases (SymPy in tid) + constants
    plan.mfma_sequence(kstep_pair)                                  # which reads / registers each MFMA uses
    plan.acc_element(rep_m, rep_n, reg, wave, lane) -> (i, j)       # accumulator register -> C tile element
    plan.store_runs(wave, lane)                                     # runs of 4 consecutive j for vector stores
    plan.copy_plan("A")                                             # global -> LDS copy, register path
    plan.check_budget()                                             # ResourceError: needed vs available

Conventions: C[M, N] += A[M, K] @ B[K, N] over one block tile. The user's shared tiles are A (block_M, block_K)
((block_K, block_M) with transpose_A) and B (block_K, block_N) ((block_N, block_K) with transpose_B). The
workgroup has threads / 64 waves; wave w is at (wm, wn) = (w // waves_N, w % waves_N) of the wave grid.

Design
------
1. Swapped operands. The MFMA computes D' = C^T tile = B^T A^T: srcA takes B's data (MFMA row p = j), srcB takes
   A's data (MFMA column q = i). D'[p][q] lies at lane dim*((p//4) % G) + q, register 4*(p//(4G)) + p%4
   (G = 64/dim lane groups), so one lane holds 4 consecutive j of one row i of C in 4 consecutive accumulator
   registers: the epilogue stores 4 consecutive elements of a C row per lane (`store_runs`).
2. K-major LDS tiles. Both operands live in LDS as [rows][block_K] 16-bit elements (A: rows i, B: rows j, i.e.
   B^T), row_bytes = 2*block_K, one tile after the other (A at `lds_a_offset`, B at `lds_b_offset`, then the
   next stage). Every MFMA operand lane needs consecutive k of one row, which is then one contiguous LDS run.
   An operand whose user layout is not K-major (A with transpose_A, B without transpose_B) stays as stored on an
   arch with the transposing LDS read (gfx950: point 7); elsewhere the register copy transposes it:
   buffer_load_dwordx4 of 8 elements along the user's contiguous dim, for `pack` consecutive k, then per
   element one ds_write of its `pack` k (k pairs packed by v_perm_b32; see CopyPlan 'transpose').
3. One ds_read_b128 per operand fragment: lane l reads the 16-byte chunk  c = kstep_pair*G + l//dim  of its
   row (8 consecutive k). For CDNA3 shapes (k_per_lane 4) that chunk feeds two consecutive MFMA k-steps (`pair_k`):
   registers 0-1 the first, 2-3 the second, so the MFMA's logical k index kk of step (s, sub) is the real
       k = k_per_read*s + 8*(kk // k_per_lane) + k_per_lane*sub + kk % k_per_lane         (`mfma_k`)
   the same permutation for both operands, so the sum over k is unchanged. gfx950 shapes (k_per_lane 8): one
   read per MFMA and the permutation is the identity.
4. XOR swizzle of 16-byte chunks (`swizzle_chunk`, `swizzled_offset`): physical chunk = chunk ^ f(row),
       f(row) = (mult * (row // q)) % m,   RC = row_bytes/16 chunks per row,  NB = banks*4/16 chunks per bank
       sweep,  q = max(1, NB/RC),  m = min(RC, NB),  mult = 1 (gfx950's measured phases: see below)
   A ds_read_b128 phase is NB consecutive lanes = NB consecutive rows (NB | dim) reading the same logical chunk;
   their 16-byte slots (row*RC + (chunk ^ f(row))) mod NB are all distinct, so the reads are conflict free on 32
   banks. gfx950 serves a ds_read_b128 in the phases HipKittens measured (Arch.lds_phases): within 32 lanes, the
   quads whose lane bits 2-4 have even parity, then the odd ones. Its 16 lanes are rows whose bits 0, 1 run free
   and bits 2-4 have one parity (dim 32), or, for dim 16, rows whose bits 0-3 run free but lane bit 4 picks the
   next chunk instead of a row. With 64-byte rows (RC = 4) the slot's low 2 bits are then chunk ^ f, and
   f = (row // 4) % 4 repeats a slot for dim 16 (2-way conflicts: gfx950's fp8 GEMM at block_M 32, block_K 64);
   f = (3 * (row // 4)) % 4, i.e. bits (b2, b2 ^ b3), is distinct for both dims. Other rows keep the rule above:
   for RC >= 8 its f already spreads both; 32-byte rows are only read with dim 32 (no 16x16 MFMA of gfx950 takes
   block_K that small), where f = row bit 3 does (dim 16 would need row bit 4). The swizzle permutes chunks
   within a row only (an involution), so a copy can apply it on either side: the register path on the LDS side;
   a future LDS-DMA copy, whose LDS side is contiguous per lane, on the global side (`dma_copy_plan`: the lane
   writing physical chunk pc of a row fetches logical chunk
   pc ^ f(row) of that row, still a whole-row, coalesced global access). No padding: none is needed, and padding
   would break the DMA's contiguous LDS side.
5. Wave tiling: the first MFMA shape of the arch's list (preferred first) for which some wave grid
   waves_M x waves_N = threads/64 tiles block_M x block_N with whole MFMA tiles and block_K is a multiple of
   k_per_read; among those grids the squarest per-wave tile wins, ties going to the wider wave tile in N (a wave
   then covers more consecutive bytes of each C row it stores).
6. Resources: `lds_bytes` = (A + B tile) x num_stages vs arch.lds_bytes, accumulators
   (d_regs x repeats) vs arch.agprs, and a lower bound on the VGPRs (operand fragments of one k-step pair plus
   the copy staging registers) vs arch.arch_vgprs; `check_budget` raises ResourceError with needed vs available.
7. Operands stored (K, X) on gfx950 (`transposed_read`): the LDS tile keeps the user's layout, block_K rows of X
   (= block_M or block_N) elements, so the copy moves whole 16-byte runs (LDS DMA, or ds_write_b128), and each
   fragment is two ds_read_b64_tr_b16 (`read_pieces`). That read works on 16-lane groups: lanes 4r..4r+3 each
   read 8 bytes of k row r (16 consecutive x) and lane j of the group receives column j, 4 consecutive k. Lane l
   needs x = (its MFMA row or column l % dim) and k = 8 * (l // dim) + 0..7 (point 3), so its group reads the
   16 columns 16 * ((l % dim) // 16) of its tile, rows k0 + 0..3 into VGPRs 0-1 and k0 + 4..7 into VGPRs 2-3
   (checked in tests/test_gemm_plan.py against the ISA guide's description, and the emulator's read against
   Triton's gfx950 matmul in tests/corpus). The chunks are XOR-swizzled per k row (`tr_swizzle_chunk`) so a
   read phase is conflict free; the LDS-DMA copy applies the swizzle on the global side as in point 4. Rows of
   32 bytes (X = 16) and X not a power of two leave some conflicts (correct, slower).
8. A in registers (`a_in_registers`: a 16-bit fragment A, ir/layout.py's MfmaOperand): no A tile or reads. A lane's
   k come in runs of 4 spaced by 4*G, the accumulator's column order (`register_k`), so B's fragment halves are read
   4*G k apart: two ds_read_b64 from a K-major tile, two ds_read_b64_tr_b16 from a (K, X) one. A ds_read_b64 phase is
   16 lanes on 32 banks, 16 rows reading one half of one logical chunk, and the chunk XOR gives 8 positions per bank
   sweep, so the K-major B tile the transposing copy writes (gfx942) also swaps the 8-byte halves of rows 8..15 of
   every 16 (`halves_swizzled`, `half_flip`): reads and the copy's writes (at most 4 k each) are conflict free.
   An A that nothing computes in registers (a tile loaded from memory, flash attention's Q) has no order to keep:
   where a lane's k of one MFMA fill a chunk (gfx950's 16-bit 32x32x16 / 16x16x32) it holds them as one
   (`a_k_chunks`, MfmaOperand.k_chunks) and B is read as beside a shared A, one ds_read_b128 an MFMA.

9. 8-bit operands (fp8 / bf8 / int8, issue 22): the same plan in bytes. A 16-byte chunk holds 16 elements
   (`elems_per_chunk`), so k_per_read, the copies' runs and the read offsets count 16 per chunk; the 8-bit MFMAs
   hold k_per_lane consecutive bytes of a row per lane (mfma_layout.element_location), 8 bytes for gfx942's
   32x32x16 / 16x16x32 (one chunk feeds two k-steps, as pair_k for 16-bit) and 16 for gfx950's i8 32x32x32 /
   16x16x64. gfx950's f8f6f4 MFMAs read 8 VGPRs per operand as two blocks of 4 (`MfmaShape.blocks`): a read step
   then reads two chunks per lane (`read_pieces`, piece b into VGPRs 4b..4b+3, chunk (step * 2 + b) * G + l // dim)
   and feeds one MFMA.
10. Packed fp4 and MX scales (gfx950, issue 22): a float4_e2m1fn_x2 tile is planned in bytes, two values each, so
   its MfmaShapes count K in bytes (32x32x64 f8f6f4 with cbsz:4 blgp:4 is "32x32x32": 16 bytes, one chunk, 4 VGPRs
   a lane, as the i8 32x32x32; arch._eight_bit_shapes). A scaled gemm reads, per MFMA and operand repeat, the E8M0
   byte lane l needs: the scale of its row (l % dim) for K block (step * G + l // dim) of 32 values, G = 64 / dim
   (the CDNA4 ISA guide's scale lanes; mfma_lowp's `_gather`), which is the K range lane group l // dim holds for
   fp4 and, through `mfma_k`'s two blocks, the 32-value block the MFMA's logical K block maps to for fp8.
11. 8-bit operands stored (K, X) (A with transpose_A, B without transpose_B; packed fp4 stays K-major). gfx950 keeps the tile as stored and reads it with ds_read_b64_tr_b8: in a 16-lane
   group lanes 2r, 2r+1 read 8 bytes each of k row r (16 consecutive x) and lane j receives column j, 8 consecutive
   k (the emulator's `lane_transpose`, checked by Triton's gfx950 fp8 / int8 matmuls in tests/corpus, which read
   their B operand so). A fragment of 4 * blocks VGPRs is then 2 * blocks such reads, piece p holding the 8 k from
   16 * chunk + 8 * (p % 2), chunk the one the K-major read of block p // 2 takes (point 9), so every lane holds
   the same k in the same bytes as from a K-major tile. gfx942 transposes in the register copy as for 16 bits
   (point 2), a run being 16 bytes at one k: `pack` k of one x are put together by v_perm_b32 byte selects (pack 1:
   the byte shifted down, ds_write_b8; 2: one select, ds_write_b16; 4: a 4 x 4 byte transpose of each VGPR of the 4
   runs in 8 selects, 4 ds_write_b32).

Offsets as VGPR base + immediate
--------------------------------
The emitter wants each LDS (and global) address as `base(tid) + constant` so one VGPR serves many instructions
through `offset:` immediates. `read_offsets(operand)` and `CopyPlan.lds_offsets_family` (also
`global_row_family`, `global_col_family`) group the instructions into the minimal set of bases
(`SeparatedOffsets`: exact equivalence classes of "differ by a thread-independent constant", so no smaller set
exists) and give each base as a SymPy expression in `tid` (or `wave`, `lane`); constants include the operand's LDS
base (add `stage_offset(stage)`; the DS `offset:` field is 16 bits, so a constant above 65535, possible only in
LDS allocations over 64 KiB, needs its high part in the VGPR).
For the operand reads a single base is impossible: a phase's NB lanes share their logical chunk, so f must take NB
values, i.e. flip log2(NB) low bits of the chunk index, and only log2(G) of those come from the lane group; the
rest come from the k-step. Reads of steps s and s' share a base iff (s*G) % m == (s'*G) % m, giving
min(read_steps, max(1, m/G)) bases per operand (`expected_read_bases`; 2 for 16x16 and 4 for 32x32 tiles with
block_K = 64 on gfx942, 2 and 4 on gfx950 too, 8 for 32x32 with block_K = 128 on gfx950); repeats always share a
base (they add whole MFMA tiles of rows, a multiple of the swizzle period). The alternative to extra base VGPRs is
one v_xor_b32 per read: offset = rowpart + 16 * ((s*G) ^ (g ^ f(row))) with the lane part g ^ f(row) in a VGPR.
One base would need padding instead of the XOR swizzle (see 4). The transposing copy's ds_write_b16 need one base
per element e (its LDS row x0 + e moves the swizzle value), shared by all slots: 8 (4 on gfx950 with block_K 64);
the global coordinates need one, and so does the K-major copy whenever a slot advances by a multiple of the
swizzle period of max(NB, RC) rows (threads / RC rows per slot; e.g. not for 64 threads with block_K 64 on
gfx950: 2 bases).

A transposed read (point 7) takes its swizzle value from lane bits of k only, so its steps and halves share a
base; its repeats move the chunk by dim/8 and share one where that is a multiple of the XOR's span 2m.

Everything here is exact integer math; functions that take tid/wave/lane accept Python ints and numpy integer
arrays alike, and SymPy expressions, where an XOR is one `Xor` atom (amdgcn/addr.py: one v_xor_b32 when lowered).
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import sympy as sp

from ..amdgcn import mfma_layout
from ..amdgcn.addr import Xor
from ..amdgcn.arch import Arch, MfmaShape, get_arch
from ..errors import CompileError, ResourceError
from ..ir.types import DType, as_dtype

WAVE = 64
CHUNK = 16  # bytes of one ds_read_b128 / ds_write_b128 / buffer_load_dwordx4 per lane
ELEMS_PER_CHUNK = 8  # 16-bit elements per chunk

#: SymPy symbols of the offset expressions: the flat thread id, or a wave index and a lane (tid = 64*wave + lane).
TID = sp.Symbol("tid", integer=True, nonnegative=True)
WAVE_SYM = sp.Symbol("wave", integer=True, nonnegative=True)
LANE_SYM = sp.Symbol("lane", integer=True, nonnegative=True)


# ----------------------------------------------------------------------------------------------------------------
# integer ops that work on Python ints / numpy arrays and, with the same formulas, build SymPy expressions


class _NumOps:
    @staticmethod
    def fdiv(a, b):
        return a // b

    @staticmethod
    def mod(a, b):
        return a % b

    @staticmethod
    def xor(a, b, nbits):  # nbits: b < 2**nbits (unused here)
        return a ^ b

    @staticmethod
    def xor_bits(a, bits):
        """a with bit p flipped where bits[p] (0 or 1) is 1."""
        return a ^ sum(bit << p for p, bit in bits.items())


class _SymOps:
    @staticmethod
    def fdiv(a, b):
        return sp.floor(sp.sympify(a) / b)

    @staticmethod
    def mod(a, b):
        return sp.Mod(a, b)

    @staticmethod
    def xor(a, b, nbits):
        """a ^ b (b < 2**nbits) as one Xor atom: v_xor_b32 flips exactly the bits b holds."""
        return Xor(sp.sympify(a), sp.sympify(b)) if nbits else sp.sympify(a)

    @staticmethod
    def xor_bits(a, bits):
        """a with bit p flipped where bits[p] (an expression worth 0 or 1) is 1: a ^ (the flips as one number)."""
        return Xor(sp.sympify(a), sum((2**p * sp.sympify(bit) for p, bit in bits.items()), sp.Integer(0)))


def _ops_for(*values):
    return _SymOps if any(isinstance(v, sp.Basic) for v in values) else _NumOps


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _ilog2(n: int) -> int:
    return n.bit_length() - 1


# ----------------------------------------------------------------------------------------------------------------
# XOR swizzle and the LDS bank model


def _swizzle_params(arch: Arch, row_bytes: int):
    """(RC, q, m, mult): chunks per row, rows per swizzle value, number of swizzle values, and the odd multiplier of
    f(row) = (mult * (row // q)) % m (module doc, point 4)."""
    if row_bytes % CHUNK or not _is_pow2(row_bytes // CHUNK):
        raise CompileError(
            f"T.gemm: the LDS swizzle needs a K-major row of a power-of-two number of 16-byte chunks; "
            f"a row of {row_bytes} bytes is not (block_K must be a power of two >= 8)"
        )
    rc = row_bytes // CHUNK
    nb = arch.lds_banks * arch.lds_bank_bytes // CHUNK  # 16-byte slots in one sweep of the banks
    q, m, mult = max(1, nb // rc), min(rc, nb), 1
    if rc == 4 and arch.lds_read_phases.get(CHUNK) is not None:  # gfx950's measured ds_read_b128 phases (point 4)
        mult = 3  # f = (b2, b2 ^ b3) of row bits 2, 3
    return rc, q, m, mult


def swizzle_chunk(arch, row, chunk, row_bytes):
    """Physical 16-byte chunk of logical `chunk` in K-major LDS row `row`: chunk ^ ((mult * (row // q)) % m).

    An involution within the row (applying it twice gives `chunk` back), so it also answers the LDS-DMA question
    "which logical chunk belongs at physical chunk pc": swizzle_chunk(arch, row, pc, row_bytes).
    Accepts ints, numpy integer arrays or SymPy expressions (then the result is a SymPy expression)."""
    arch = get_arch(arch)
    _, q, m, mult = _swizzle_params(arch, row_bytes)
    ops = _ops_for(row, chunk)
    return ops.xor(chunk, ops.mod(mult * ops.fdiv(row, q), m), _ilog2(m))


def swizzled_offset(arch, row, chunk, row_bytes):
    """Byte offset, from the tile's base, of the 16-byte chunk `chunk` of K-major row `row` (rows of `row_bytes`).

    Used for every LDS access of the operand tiles: ds_write_b128 / ds_write_b16 of the register copy,
    ds_read_b128 of the MFMA fragments, and (on the global side) the LDS-DMA copy. Byte b of the chunk is at
    swizzled_offset(...) + b. See the module doc, point 4, for why ds_read_b128 fragments are conflict free."""
    return row * row_bytes + CHUNK * swizzle_chunk(arch, row, chunk, row_bytes)


TR_UNIT = 32  # bytes of one k row a 16-lane group of ds_read_b64_tr_b16 reads (16 elements, 8 bytes a lane)


def _tr_swizzle_params(arch: Arch, row_bytes: int):
    """(m, low) of the transposed-read swizzle: m values of h (a power of two that divides the row's 32-byte units,
    so the XOR stays within the row), `low` = the row bits that already pick a distinct part of a bank sweep."""
    sweep = arch.lds_banks * arch.lds_bank_bytes // TR_UNIT
    m = np.gcd(row_bytes // TR_UNIT, sweep).item()
    return m, _ilog2(sweep // m)


def tr_swizzle_chunk(arch, row, chunk, row_bytes):
    """Physical 16-byte chunk of logical `chunk` in row `row` (one k) of a tile stored (K, X), X contiguous, and read
    with ds_read_b64_tr_b16: chunk ^ 2 * h(row),  h(row) = ((row // 8) % 2 + 2 * ((row % 4) // 2**low)) % m.

    Why: a ds_read_b64_tr_b16 phase (32 lanes on 64 banks) reads 32 bytes of 8 k rows (16x16 MFMA tiles: rows
    4h..4h+3 and 8+4h..8+4h+3, one 32-byte unit each) or 64 bytes of 4 rows (32x32 tiles: rows 4h..4h+3, two
    units each). h gives the 8 rows distinct 32-byte units (bits 0..2 from row bits 3, 0, 1), and the 4 rows of a
    32x32 read distinct pairs of units (row bits 0, 1 land on unit bits 1, 2), where the rows do not already sit
    in distinct parts of the bank sweep (rows of under 256 bytes: `low`). An involution within the row, like
    `swizzle_chunk`, so the LDS-DMA copy applies it on the global side. Ints, numpy arrays or SymPy."""
    arch = get_arch(arch)
    m, low = _tr_swizzle_params(arch, row_bytes)
    ops = _ops_for(row, chunk)
    row_bit = lambda b: ops.mod(ops.fdiv(row, 2**b), 2)  # noqa: E731
    h_bits = ([row_bit(3)] + [row_bit(b) for b in range(low, 2)])[:_ilog2(m)]  # bit i of h, i = 0, 1, ...
    return ops.xor_bits(chunk, {1 + i: bit for i, bit in enumerate(h_bits)})


def tr8_swizzle_chunk(arch, row, chunk, row_bytes):
    """Physical 16-byte chunk of logical `chunk` in k row `row` of an 8-bit tile stored (K, X) and read with
    ds_read_b64_tr_b8 (module doc, point 11): chunk with bit 0 flipped by row bit 4 and bits 1, 2, ... by the row
    bits that land on no bank bit of their own.

    Why: a read phase (banks * 4 / 8 lanes: two 16-lane groups on 64 banks) reads 16 bytes of each of 8 k rows
    k0 .. k0 + 7 per group, the two groups either the two chunks c, c + 1 of the same rows (32x32 tiles) or one
    chunk of rows 16 apart (16x16 tiles: the next lane group's k). Row r starts at slot r * RC (RC = 2^a chunks a
    row) of the n-bit slot index of a bank sweep, so row bits 0 .. n - a - 1 already pick distinct slots; the
    others up to bit 2 are folded into chunk bits 1 .. a - 1, and row bit 4 into chunk bit 0, which the 32x32
    pair of groups uses with equal rows. An involution within the row; ints, numpy arrays or SymPy."""
    arch = get_arch(arch)
    a = _ilog2(row_bytes // CHUNK)
    n = _ilog2(arch.lds_banks * arch.lds_bank_bytes // CHUNK)
    if a < 1:
        return chunk  # a row of one chunk: nothing to permute
    ops = _ops_for(row, chunk)
    first = max(0, n - a)
    bits = {0: ops.mod(ops.fdiv(row, 16), 2)}
    bits.update({1 + i: ops.mod(ops.fdiv(row, 2 ** (first + i)), 2) for i in range(min(3 - first, a - 1))})
    return ops.xor_bits(chunk, bits)


def ds_extra_cycles(arch, addrs, nbytes: int, active=None, *, read: bool) -> int:
    """Extra LDS cycles of one wave-wide DS access under the emulator's bank model.

    `addrs`: the 64 per-lane byte addresses, `nbytes`: bytes per lane (2, 4, 8, 16), `read`: a ds_read (else a
    ds_write). The access is served in the phases arch.lds_phases gives the lanes (measured ones for gfx950's
    ds_read_b128, else runs of banks*4/nbytes consecutive lanes); in a phase each bank costs the number of distinct
    dword addresses it is asked for (one dword read by several lanes is a broadcast); extra cycles = sum over phases
    of (max - 1)."""
    arch = get_arch(arch)
    addrs = np.asarray(addrs, dtype=np.int64).reshape(-1)
    active = np.ones(addrs.shape, bool) if active is None else np.asarray(active, bool).reshape(-1)
    phases = np.asarray(arch.lds_phases(nbytes, read))[:addrs.size]
    banks = arch.lds_banks
    ndw = max(1, nbytes // arch.lds_bank_bytes)
    extra = 0
    for p in np.unique(phases):
        sel = addrs[(phases == p) & active]
        if sel.size == 0:
            continue
        dwords = np.unique((sel[:, None] // arch.lds_bank_bytes + np.arange(ndw)[None, :]).reshape(-1))
        extra += int(np.bincount(dwords % banks, minlength=banks).max()) - 1
    return extra


# ----------------------------------------------------------------------------------------------------------------
# base + constant decomposition of families of offsets


@dataclass(frozen=True)
class SeparatedOffsets:
    """offset(key, tid) == base b (tid) + const[key], b = base_of[key], for every thread active for `key`.

    bases: SymPy expressions in TID; bases_wl: the same in WAVE_SYM, LANE_SYM (tid = 64*wave + lane). Each base is 0
    at the first active thread of its representative key `base_keys[b]`, so a constant is what that thread (thread
    0 when it is active) uses. The classes are exactly the equivalence classes of "differs by a thread-independent
    constant", so no smaller set of bases exists. lowest[key]: the smallest offset(key, tid) over every thread (active
    or not; what an address computed for all of them must stay above)."""

    keys: tuple
    bases: tuple
    bases_wl: tuple
    base_keys: tuple
    base_of: dict
    const: dict
    lowest: dict

    def base_expr(self, key, in_wave_lane: bool = False):
        return (self.bases_wl if in_wave_lane else self.bases)[self.base_of[key]]

    def evaluate_base(self, b: int, tid):
        """Base b at integer thread ids (an int or a numpy array), exactly (through numpy floats < 2**53)."""
        tid = np.asarray(tid, dtype=np.int64)
        v = np.asarray(self._fns[b](tid), dtype=np.float64)
        return np.broadcast_to(np.rint(v).astype(np.int64), tid.shape).copy()

    def evaluate(self, key, tid):
        return self.evaluate_base(self.base_of[key], tid) + self.const[key]

    @cached_property
    def _fns(self):
        return [sp.lambdify(TID, e, modules="numpy") for e in self.bases]


def _separate(keys, numeric, symbolic, tids, active=None) -> SeparatedOffsets:
    """Group `keys` by "numeric(key, tids) - numeric(base_key, tids) is constant over the key's active threads".

    symbolic(key, wave, lane) builds the SymPy offset. A base is a formula in tid, defined on every thread, so only
    the key's active threads must agree."""
    tids = np.asarray(tids, dtype=np.int64)
    reps, bases, bases_wl, base_keys, base_of, const, lowest = [], [], [], [], {}, {}, {}
    for key in keys:
        vals = np.asarray(numeric(key, tids), dtype=np.int64)
        lowest[key] = int(vals.min())
        act = np.ones(tids.shape, bool) if active is None else np.asarray(active(key, tids), bool)
        if not act.any():
            raise ValueError(f"T.gemm plan: no thread is active for {key!r}")
        t0 = int(np.argmax(act))
        for b, (bvals, tb) in enumerate(reps):
            if np.ptp(vals[act] - bvals[act]) == 0:
                base_of[key] = b
                const[key] = int(vals[t0] - (bvals[t0] - bvals[tb]))
                break
        else:
            base_of[key] = len(bases)
            bases.append(sp.sympify(symbolic(key, sp.floor(TID / WAVE), sp.Mod(TID, WAVE)) - int(vals[t0])))
            bases_wl.append(sp.sympify(symbolic(key, WAVE_SYM, LANE_SYM) - int(vals[t0])))
            base_keys.append(key)
            reps.append((vals, t0))
            const[key] = int(vals[t0])
    return SeparatedOffsets(tuple(keys), tuple(bases), tuple(bases_wl), tuple(base_keys), base_of, const, lowest)


# ----------------------------------------------------------------------------------------------------------------
# plan records


@dataclass(frozen=True)
class OperandRead:
    """One ds_read_b128 per lane of operand 'A' or 'B' (repeat `rep`, k-step pair `step`) into 4 VGPRs.

    `vgpr`: first of its 4 VGPRs within that operand's fragment buffer of one step (rep * 4)."""

    operand: str
    rep: int
    step: int
    vgpr: int


@dataclass(frozen=True)
class ReadPiece:
    """One LDS read instruction of an operand fragment: `mnemonic` into VGPRs vgpr .. vgpr + count - 1 of its 4."""

    mnemonic: str
    vgpr: int
    count: int


@dataclass(frozen=True)
class MfmaIssue:
    """One MFMA of a k-step pair: acc[acc_first : acc_first + acc_count] += srcA x srcB.

    src_a = (read of B, first VGPR within that read's 4, VGPR count); src_b = (read of A, first, count).
    `k_step` = the MFMA k-step index within block_K (step * mfma_per_read + sub)."""

    rep_m: int
    rep_n: int
    step: int
    sub: int
    k_step: int
    acc_first: int
    acc_count: int
    src_a: tuple
    src_b: tuple


@dataclass(frozen=True)
class StoreRun:
    """`length` consecutive C elements of row i from column j, in accumulator registers acc_reg .. + length - 1."""

    i: int
    j: int
    acc_reg: int
    length: int


@dataclass(frozen=True)
class CopyPlan:
    """Global -> LDS copy of one operand tile, one 16-byte run (8 elements along the user's contiguous dim) per
    thread per slot.

    kind: 'b128'    buffer_load_dwordx4 + ds_write_b128 (the LDS tile has the user's layout: `copied_as_stored`);
          'transpose' (user tile (K, X), X contiguous): a thread loads `pack` runs at consecutive k of the same 8 x
                    (slots pack*g .. pack*g + pack-1 of unit g) and writes, per x, their `pack` consecutive k into its
                    K-major LDS row: 8 ds_write_b{16*pack} per unit, the k pairs packed from the 16-bit halves of
                    runs 2d, 2d+1 by v_perm_b32; with pack 1, 8 ds_write_b16 per run (odd x from the high halves:
                    ds_write_b16_d16_hi). `_transpose_pack` picks pack;
          'lds_dma' buffer_load_* ... lds, `lane_bytes` per lane (16: buffer_load_dwordx4 on gfx950; 4:
                    buffer_load_dword, the widest gfx942 has, so a run is `pieces` = 4 consecutive lanes' pieces and
                    the copy takes 4x the instructions): the LDS side is M0 + lane_bytes*lane, the swizzle is applied
                    on the global side (`dma_m0(wave, slot)` gives M0).
    Run index r = slot * threads + tid; a thread is active for a slot iff r < runs (exec mask when not); for
    'transpose' unit u = (slot // pack) * threads + tid, active iff u < runs // pack; for 'lds_dma' piece
    q = slot * threads + tid of run q // pieces, active iff q < runs * pieces.
    Coordinates are in the user's tile: (row, col) .. (row, col + 7)."""

    plan: "GemmPlan" = field(repr=False)
    operand: str
    kind: str
    tile_shape: tuple  # the user's tile (rows, cols), cols contiguous in global memory
    runs: int
    slots: int
    pack: int = 1  # 'transpose': k rows per thread packed into one LDS write
    lane_bytes: int = CHUNK  # 'lds_dma': bytes one lane moves per instruction

    @property
    def pieces(self) -> int:
        """Lanes (and instructions) per 16-byte run: 4 for gfx942's 4-byte LDS DMA, else 1."""
        return CHUNK // self.lane_bytes

    @property
    def threads(self) -> int:
        return self.plan.threads

    @property
    def writes_per_slot(self) -> int:
        """LDS writes of one write slot (one per element x for 'transpose')."""
        return self.plan.elems_per_chunk if self.kind == "transpose" else 1

    @property
    def write_slots(self) -> range:
        """The slots whose `lds_offsets` the LDS writes use ('transpose': the first slot of each unit)."""
        return range(0, self.slots, self.pack)

    @property
    def write_bytes(self) -> int:
        return self.plan.dtype.bytes * self.pack if self.kind == "transpose" else CHUNK

    def active_threads(self, slot: int) -> int:
        """Threads 0 .. n-1 are active for `slot` (the others are masked off by EXEC)."""
        return self.runs * self.pieces // self.pack - (slot // self.pack) * self.threads

    def active(self, tid, slot):
        return np.asarray(tid) < self.active_threads(slot)

    # -- the mapping, written once for ints / numpy arrays / SymPy ------------------------------------------------
    def _coords(self, tid, slot):
        """(user row, user col, LDS row, LDS logical chunk) of the run (for 'transpose': LDS row of element 0)."""
        ops = _ops_for(tid)
        p = self.plan
        r = slot * self.threads + tid
        rows, cols = self.tile_shape
        epc = p.elems_per_chunk
        cpr = cols // epc  # runs per user row
        if self.kind == "transpose":
            # user tile (K, X): a run is 8 consecutive x at one k; unit u holds `pack` runs at consecutive k. Units go
            # along k first, then along x, so the writes of element e by a wave cover whole K-major LDS rows, whose
            # chunks the swizzle spreads over distinct banks: 0 extra cycles for block_K >= 64 and 1 for block_K 32
            # (two 64-byte rows whose indices agree mod 8 share their banks), against up to 7 when units go along x
            # (rows 8 apart share one swizzle value). The global side still loads whole 16-byte runs.
            kg, j, xc = self._transpose_unit(tid, slot)
            k = self.pack * kg + j
            return k, epc * xc, epc * xc, ops.fdiv(k, epc)
        piece = 0
        if self.pieces > 1:  # 4-byte LDS DMA: consecutive lanes fill one chunk, `pieces` lanes a run
            r, piece = ops.fdiv(r, self.pieces), ops.mod(r, self.pieces)
        urow, pc = ops.fdiv(r, cpr), ops.mod(r, cpr)
        if self.kind == "lds_dma":
            lc = p.lds_swizzle(self.operand, urow, pc)  # the logical chunk whose home is physical chunk pc
            return urow, epc * lc + piece * (epc // self.pieces), urow, lc
        return urow, epc * pc, urow, pc

    def _transpose_unit(self, tid, slot):
        """'transpose': (k group, run j within it, x chunk) of slot `slot`: the run's k is pack * k_group + j."""
        ops = _ops_for(tid)
        u = (slot // self.pack) * self.threads + tid
        groups = self.tile_shape[0] // self.pack  # units along k
        return ops.mod(u, groups), slot % self.pack, ops.fdiv(u, groups)

    def global_coords(self, tid, slot):
        """(row, col) in the user's tile of the 16-byte run (4-byte LDS DMA: piece) thread `tid` loads in `slot`."""
        urow, ucol, _, _ = self._coords(tid, slot)
        return urow, ucol

    def lds_offsets(self, tid, slot, stage: int = 0):
        """LDS byte offsets (from the LDS allocation's start) of the run's writes: one for 'b128'/'lds_dma' (its piece),
        eight (element e of the run) for 'transpose'."""
        p = self.plan
        base = p.operand_lds_offset(self.operand) + stage * p.lds_stage_bytes
        k, _, lrow, lchunk = self._coords(tid, slot)
        if self.kind == "transpose":
            # the byte of element k within its chunk: bytes * (k % elems_per_chunk), written so that SymPy keeps it in
            # floor / Mod of tid (it rewrites Mod(4*x, 8) into a power, which the address lowering does not take)
            kg, j, _ = self._transpose_unit(tid, slot)
            epc = p.elems_per_chunk
            within = p.dtype.bytes * (self.pack * _ops_for(tid).mod(kg, epc // self.pack) + j)
            if p.halves_swizzled(self.operand):
                return tuple(base + swizzled_offset(p.arch, lrow + e, lchunk, p.row_bytes)
                             + _ops_for(tid).xor(within, p.half_flip(lrow + e), 4) for e in range(8))
            return tuple(base + swizzled_offset(p.arch, lrow + e, lchunk, p.row_bytes) + within for e in range(epc))
        if self.kind == "lds_dma":
            return (base + self.lane_bytes * (slot * self.threads + tid),)
        return (base + p.lds_chunk_offset(self.operand, lrow, lchunk),)

    def dma_m0(self, wave: int, slot: int, stage: int = 0) -> int:
        """M0 for wave `wave`'s `buffer_load_* ... lds` of `slot` (LDS address = M0 + lane_bytes * lane)."""
        assert self.kind == "lds_dma"
        p = self.plan
        return (p.operand_lds_offset(self.operand) + stage * p.lds_stage_bytes
                + self.lane_bytes * (slot * self.threads + WAVE * wave))

    # -- base + constant forms -----------------------------------------------------------------------------------
    def _family(self, keys, value):
        tids = np.arange(self.threads)
        return _separate(
            keys,
            lambda key, t: value(t, key),
            lambda key, wave, lane: value(WAVE * wave + lane, key),
            tids,
            active=lambda key, t: self.active(t, key[0] if isinstance(key, tuple) else key),
        )

    @cached_property
    def global_row_family(self) -> SeparatedOffsets:
        """Keys: slot. row(tid, slot) = base(tid) + const[slot]."""
        return self._family(tuple(range(self.slots)), lambda t, s: self.global_coords(t, s)[0])

    @cached_property
    def global_col_family(self) -> SeparatedOffsets:
        """Keys: slot. col(tid, slot) = base(tid) + const[slot]."""
        return self._family(tuple(range(self.slots)), lambda t, s: self.global_coords(t, s)[1])

    @cached_property
    def lds_offsets_family(self) -> SeparatedOffsets:
        """Keys: (write slot, write index). LDS byte offset = base(tid) + const[(slot, e)] (stage 0)."""
        keys = tuple(itertools.product(self.write_slots, range(self.writes_per_slot)))
        return self._family(keys, lambda t, key: self.lds_offsets(t, key[0])[key[1]])


# ----------------------------------------------------------------------------------------------------------------
# the plan


@dataclass(frozen=True)
class GemmPlan:
    arch: Arch
    dtype: DType
    block_M: int
    block_N: int
    block_K: int
    threads: int
    transpose_A: bool
    transpose_B: bool
    num_stages: int
    mfma: MfmaShape
    waves_M: int
    waves_N: int
    a_in_registers: bool = False  # A is a fragment in registers (MfmaOperand layout): B is read in its k order
    # ... holding a lane's k as one chunk (MfmaOperand.k_chunks): B is read as from a shared A (`b_in_register_k`)
    a_k_chunks: bool = False

    # -- derived sizes ---------------------------------------------------------------------------------------------
    @property
    def waves(self) -> int:
        return self.threads // WAVE

    @property
    def dim(self) -> int:
        """MFMA tile side (M == N)."""
        return self.mfma.M

    @property
    def lane_groups(self) -> int:
        """G = 64 / dim: lane groups of an operand, each holding its own k range."""
        return WAVE // self.dim

    @property
    def wave_tile_M(self) -> int:
        return self.block_M // self.waves_M

    @property
    def wave_tile_N(self) -> int:
        return self.block_N // self.waves_N

    @property
    def repeats_M(self) -> int:
        return self.wave_tile_M // self.dim

    @property
    def repeats_N(self) -> int:
        return self.wave_tile_N // self.dim

    @property
    def k_steps(self) -> int:
        """MFMA k-steps per block_K."""
        return self.block_K // self.mfma.K

    @property
    def elems_per_chunk(self) -> int:
        """Operand elements in one 16-byte chunk: 8 of 16 bits, 16 of 8 bits (fp8 / bf8 / int8)."""
        return CHUNK // self.dtype.bytes

    @property
    def pair_k(self) -> bool:
        """True when one ds_read_b128 feeds two MFMA k-steps (8 bytes a lane: the CDNA3 16-bit shapes, and the
        fp8 / i8 shapes of K 16 (32x32) and 32 (16x16))."""
        return self.mfma.k_per_lane * 2 == self.elems_per_chunk

    @property
    def mfma_per_read(self) -> int:
        """MFMAs one read step feeds (its `blocks` reads of a 16-byte chunk each)."""
        return self.elems_per_chunk * self.mfma.blocks // self.mfma.k_per_lane

    @property
    def frag_regs(self) -> int:
        """VGPRs of one operand fragment: 4 per 16-byte read, two reads (8 VGPRs) for gfx950's f8f6f4 MFMAs."""
        return 4 * self.mfma.blocks

    @property
    def k_per_read(self) -> int:
        """k elements covered by one read step across the wave (a chunk per lane group and operand block)."""
        return self.elems_per_chunk * self.lane_groups * self.mfma.blocks

    @property
    def read_steps(self) -> int:
        """ds_read_b128 steps (`kstep_pair` values) per block_K, = k_steps / mfma_per_read."""
        return self.block_K // self.k_per_read

    @property
    def acc_regs_per_lane(self) -> int:
        return self.mfma.d_regs * self.repeats_M * self.repeats_N

    @property
    def operand_regs_per_step(self) -> dict:
        """VGPRs per lane the fragments of one k-step pair take: 4 per ds_read_b128."""
        return {"A": self.frag_regs * self.repeats_M, "B": self.frag_regs * self.repeats_N}

    @property
    def row_bytes(self) -> int:
        return self.block_K * self.dtype.bytes

    @property
    def lds_a_bytes(self) -> int:
        return 0 if self.a_in_registers else self.block_M * self.row_bytes

    @property
    def lds_b_bytes(self) -> int:
        return self.block_N * self.row_bytes

    @property
    def lds_a_offset(self) -> int:
        return 0

    @property
    def lds_b_offset(self) -> int:
        return _round_up(self.lds_a_bytes, self._lds_align)

    @property
    def lds_stage_bytes(self) -> int:
        return _round_up(self.lds_b_offset + self.lds_b_bytes, self._lds_align)

    @property
    def lds_bytes(self) -> int:
        return self.lds_stage_bytes * self.num_stages

    @property
    def _lds_align(self) -> int:
        # a tile must start on a whole sweep of the banks for the swizzle's bank pattern to hold (never binding:
        # tiles are multiples of 16 rows of >= 32 bytes); 16 for ds_read_b128 alignment is implied
        return self.arch.lds_banks * self.arch.lds_bank_bytes

    def stage_offset(self, stage: int) -> int:
        return stage * self.lds_stage_bytes

    def operand_lds_offset(self, operand: str) -> int:
        return {"A": self.lds_a_offset, "B": self.lds_b_offset}[_check_operand(operand)]

    def is_k_major(self, operand: str) -> bool:
        """Whether the user's tile of `operand` is already K-major (contiguous along k)."""
        return (not self.transpose_A) if _check_operand(operand) == "A" else self.transpose_B

    def transposed_read(self, operand: str) -> bool:
        """Whether `operand` sits in LDS as the user stores it, (K, X) with X = M or N contiguous, and its MFMA
        fragments are read with ds_read_b64_tr_b16 (ds_read_b64_tr_b8 for 8-bit elements): an operand that is not
        K-major, on an arch with that read."""
        has_read = self.arch.has_ds_read_tr_b16 if self.dtype.bytes == 2 else self.arch.has_ds_read_tr_b8
        return not self.is_k_major(operand) and has_read

    def copied_as_stored(self, operand: str) -> bool:
        """Whether the LDS tile of `operand` has the user's layout (16-byte runs copy whole: ds_write_b128 or LDS
        DMA); otherwise the register copy transposes it into K-major rows (ds_write_b16)."""
        return self.is_k_major(operand) or self.transposed_read(operand)

    def lds_row_bytes(self, operand: str) -> int:
        """Bytes of one LDS row of `operand`'s tile: 2*block_K (K-major) or 2*block_M / 2*block_N (k rows)."""
        if not self.transposed_read(operand):
            return self.row_bytes
        return (self.block_M if operand == "A" else self.block_N) * self.dtype.bytes

    def lds_swizzle(self, operand: str, row, chunk):
        """Physical 16-byte chunk of logical `chunk` of LDS row `row` of `operand` (`swizzle_chunk` for K-major
        tiles, `tr_swizzle_chunk` for tiles read with ds_read_b64_tr_b16, `tr8_swizzle_chunk` with
        ds_read_b64_tr_b8); an involution within the row."""
        swizzle = swizzle_chunk
        if self.transposed_read(operand):
            swizzle = tr8_swizzle_chunk if self.dtype.bytes == 1 else tr_swizzle_chunk
        return swizzle(self.arch, row, chunk, self.lds_row_bytes(operand))

    def lds_chunk_offset(self, operand: str, row, chunk):
        """Byte offset, from `operand`'s tile base, of logical 16-byte chunk `chunk` of LDS row `row`."""
        return row * self.lds_row_bytes(operand) + CHUNK * self.lds_swizzle(operand, row, chunk)

    # -- wave coordinates ------------------------------------------------------------------------------------------
    def wave_coords(self, wave):
        ops = _ops_for(wave)
        return ops.fdiv(wave, self.waves_N), ops.mod(wave, self.waves_N)

    # -- operand reads ---------------------------------------------------------------------------------------------
    def read_pieces(self, operand: str) -> tuple:
        """The LDS reads that fill one operand fragment (4 VGPRs: 8 consecutive k of one row i or column j per lane):
        one ds_read_b128 from a K-major tile, or two ds_read_b64_tr_b16 (k 0-3 into VGPRs 0-1, k 4-7 into 2-3)
        from a tile stored (K, X) (module doc, point 7). With A in registers, B's two halves are 4 k apart by 4*G
        (`register_k`), so a K-major B takes two ds_read_b64."""
        if self.transposed_read(operand) and self.dtype.bytes == 1:  # 8 k of one x a read: point 11
            return tuple(ReadPiece("ds_read_b64_tr_b8", 2 * p, 2) for p in range(self.frag_regs // 2))
        if self.transposed_read(operand):
            return (ReadPiece("ds_read_b64_tr_b16", 0, 2), ReadPiece("ds_read_b64_tr_b16", 2, 2))
        if self.b_in_register_k(operand):
            return (ReadPiece("ds_read_b64", 0, 2), ReadPiece("ds_read_b64", 2, 2))
        # f8f6f4: block b of the operand (VGPRs 4b..4b+3) from its own chunk (_read_offset)
        return tuple(ReadPiece("ds_read_b128", 4 * b, 4) for b in range(self.mfma.blocks))

    def register_k(self, step: int, piece: int, lane):
        """With A in registers: the first of the 4 consecutive k that half `piece` (VGPRs 2*piece, 2*piece + 1) of
        read step `step` of B holds on `lane`: 8G*step + 4G*piece + 4*(lane // dim). These are the columns a lane
        holds in accumulator registers 4*(2*step + piece) .. + 3 of an MFMA tile (mfma_acc_offsets: 4 consecutive
        columns, lane groups 4 apart), so a T.gemm accumulator whose waves hold whole rows, cast to 16 bits, already
        is this gemm's A operand register for register (ir/layout.py's MfmaOperand), provided B pairs its k the
        same way: the MFMA sums over k in any order both operands agree on."""
        ops = _ops_for(lane)
        return step * self.k_per_read + 4 * self.lane_groups * piece + 4 * ops.fdiv(lane, self.dim)

    def b_in_register_k(self, operand: str) -> bool:
        """Whether `operand` is a B read in `register_k`'s order: A in registers in the accumulator's k order (runs of
        4 spaced 4*G). With A's k in chunks (`a_k_chunks`, 8 consecutive k a lane) B is read as beside a shared A."""
        return self.a_in_registers and not self.a_k_chunks and operand == "B"

    def halves_swizzled(self, operand: str) -> bool:
        """Whether `operand`'s K-major LDS rows also swap the two 8-byte halves of each 16-byte chunk in rows
        8 .. 15 of every 16 (`half_flip`): B of a register-A gemm written by the transposing copy on a 32-bank LDS.
        Its ds_read_b64 phases are 16 lanes, 16 rows reading the same half of one logical chunk, and the chunk XOR
        gives only 8 positions per bank sweep, so rows r and r + 8 would share their banks (2-way conflicts); with
        the flip they take the other half. The copy then packs at most 4 k per write (a write stays in one half)."""
        return self.b_in_register_k(operand) and not self.copied_as_stored("B") and self.arch.lds_banks == 32

    @staticmethod
    def half_flip(row):
        """8 where row's chunks have their halves swapped (rows 8 .. 15 of every 16), else 0 (`halves_swizzled`)."""
        ops = _ops_for(row)
        return 8 * ops.mod(ops.fdiv(row, 8), 2)

    def _read_offset(self, operand, wave, lane, rep, step, stage=0, piece=0):
        ops = _ops_for(wave, lane)
        wm, wn = self.wave_coords(wave)
        row0 = wm * self.wave_tile_M if operand == "A" else wn * self.wave_tile_N
        base = self.operand_lds_offset(operand) + stage * self.lds_stage_bytes
        if self.transposed_read(operand) and self.dtype.bytes == 1:
            # 16-lane group: lanes 2r, 2r+1 read 8 bytes each of k row r (16 consecutive x), lane j gets column j
            # (8 k); piece p fills VGPRs 2p, 2p+1 of the fragment: operand block p // 2, its k 8 * (p % 2) on from
            # the lane group's 16 (the K-major read's chunk (step * blocks + block) * G + l // dim)
            x = row0 + rep * self.dim + 16 * ops.fdiv(ops.mod(lane, self.dim), 16) + 8 * ops.mod(lane, 2)
            chunk = (step * self.mfma.blocks + piece // 2) * self.lane_groups + ops.fdiv(lane, self.dim)
            k = CHUNK * chunk + 8 * (piece % 2) + ops.fdiv(ops.mod(lane, 16), 2)
            return base + self.lds_chunk_offset(operand, k, ops.fdiv(x, CHUNK)) + ops.mod(x, CHUNK)
        if self.transposed_read(operand):
            # 16-lane group: lanes 4r..4r+3 read 4 x 8 bytes of k row r, lane j gets column j (4 k); the group's
            # columns are 16 consecutive of the MFMA tile's dim, its k the lane group's 8 (l // dim), half `piece`
            x = row0 + rep * self.dim + 16 * ops.fdiv(ops.mod(lane, self.dim), 16) + 4 * ops.mod(lane, 4)
            if self.b_in_register_k(operand):
                k0 = self.register_k(step, piece, lane)
            else:
                k0 = step * self.k_per_read + ELEMS_PER_CHUNK * ops.fdiv(lane, self.dim) + 4 * piece
            k = k0 + ops.fdiv(ops.mod(lane, 16), 4)
            within = self.dtype.bytes * ops.mod(x, ELEMS_PER_CHUNK)
            return base + self.lds_chunk_offset(operand, k, ops.fdiv(x, ELEMS_PER_CHUNK)) + within
        row = row0 + rep * self.dim + ops.mod(lane, self.dim)
        if self.b_in_register_k(operand):  # K-major: ds_read_b64 of 4 k within a 16-byte chunk
            k0 = self.register_k(step, piece, lane)
            within = self.dtype.bytes * ops.mod(k0, ELEMS_PER_CHUNK)
            if self.halves_swizzled(operand):
                within = ops.xor(within, self.half_flip(row), 4)
            return base + swizzled_offset(self.arch, row, ops.fdiv(k0, ELEMS_PER_CHUNK), self.row_bytes) + within
        # lane group g reads chunk g of the step's G (per operand block `piece`: G * blocks chunks a step); A and B
        # take the same k order, so the sum over k is the one of A @ B
        chunk = (step * self.mfma.blocks + piece) * self.lane_groups + ops.fdiv(lane, self.dim)
        return base + swizzled_offset(self.arch, row, chunk, self.row_bytes)

    def operand_read_offsets(self, operand, wave, lane, rep, kstep_pair, stage: int = 0, piece: int = 0):
        """LDS byte offset of read `piece` (see `read_pieces`) of `operand` ('A' or 'B'), repeat `rep` (along M
        for A, N for B), k-step pair `kstep_pair`, for wave `wave`, lane `lane` (ints, numpy arrays, or SymPy)."""
        operand = _check_operand(operand)
        reps = self.repeats_M if operand == "A" else self.repeats_N
        if not 0 <= rep < reps or not 0 <= kstep_pair < self.read_steps or not 0 <= piece < len(
                self.read_pieces(operand)):
            raise IndexError(f"T.gemm plan: rep {rep} / kstep_pair {kstep_pair} / piece {piece} out of range "
                             f"({reps}, {self.read_steps}, {len(self.read_pieces(operand))})")
        return self._read_offset(operand, wave, lane, rep, kstep_pair, stage, piece)

    def operand_read_expr(self, operand, rep, kstep_pair, in_wave_lane: bool = False, piece: int = 0):
        """The same as a SymPy expression in TID (or in WAVE_SYM, LANE_SYM)."""
        if in_wave_lane:
            return self.operand_read_offsets(operand, WAVE_SYM, LANE_SYM, rep, kstep_pair, piece=piece)
        return self.operand_read_offsets(operand, sp.floor(TID / WAVE), sp.Mod(TID, WAVE), rep, kstep_pair,
                                         piece=piece)

    def read_offsets(self, operand) -> SeparatedOffsets:
        """The operand's reads as VGPR bases + constants: keys (rep, kstep_pair, piece), stage 0 (add
        stage_offset)."""
        return self._read_families[_check_operand(operand)]

    @cached_property
    def _read_families(self):
        out = {}
        tids = np.arange(self.threads)
        for op in ("A", "B"):
            reps = self.repeats_M if op == "A" else self.repeats_N
            keys = tuple(itertools.product(range(reps), range(self.read_steps), range(len(self.read_pieces(op)))))
            out[op] = _separate(
                keys,
                lambda key, t, op=op: self._read_offset(op, t // WAVE, t % WAVE, key[0], key[1], piece=key[2]),
                lambda key, wave, lane, op=op: self._read_offset(op, wave, lane, key[0], key[1], piece=key[2]),
                tids,
            )
        return out

    @property
    def expected_read_bases(self) -> int:
        """min(read_steps, max(1, m / G)): the number of VGPR bases per K-major operand the XOR swizzle forces
        (module doc)."""
        _, _, m, _ = _swizzle_params(self.arch, self.row_bytes)
        return min(self.read_steps, max(1, m // self.lane_groups))

    def reads(self, kstep_pair: int) -> list:
        """The ds_read_b128 of one k-step pair: B fragments (MFMA srcA) then A fragments (MFMA srcB; none with A in
        registers)."""
        n = self.frag_regs
        return [OperandRead("B", rn, kstep_pair, n * rn) for rn in range(self.repeats_N)] + [
            OperandRead("A", rm, kstep_pair, n * rm) for rm in range(0 if self.a_in_registers else self.repeats_M)
        ]

    def mfma_sequence(self, kstep_pair: int) -> list:
        """MFMAs of one k-step pair, sub-step by sub-step (so the two MFMAs into one accumulator are
        repeats_M*repeats_N issues apart), within a sub-step rep_m-major."""
        na = self.mfma.a_regs
        seq = []
        for sub in range(self.mfma_per_read):
            for rm in range(self.repeats_M):
                for rn in range(self.repeats_N):
                    acc = (rm * self.repeats_N + rn) * self.mfma.d_regs
                    seq.append(MfmaIssue(
                        rm, rn, kstep_pair, sub, kstep_pair * self.mfma_per_read + sub, acc, self.mfma.d_regs,
                        src_a=(OperandRead("B", rn, kstep_pair, self.frag_regs * rn), sub * na, na),
                        src_b=(OperandRead("A", rm, kstep_pair, self.frag_regs * rm), sub * na, na),
                    ))
        return seq

    @cached_property
    def read_issues(self) -> tuple:
        """Per k-step pair, every LDS read of `reads` piece by piece, as plain tuples (the lowering emits them for
        every gemm of a pipelined loop): (operand, rep, mnemonic, first VGPR, VGPR count, read_offsets key)."""
        return tuple(tuple((rd.operand, rd.rep, piece.mnemonic, piece.vgpr, piece.count, (rd.rep, step, index))
                           for rd in self.reads(step) for index, piece in enumerate(self.read_pieces(rd.operand)))
                     for step in range(self.read_steps))

    @cached_property
    def mfma_operands(self) -> tuple:
        """Per k-step pair, each MFMA of `mfma_sequence` as plain integers: (B fragment rep, first VGPR, count,
        A fragment rep, first VGPR, count, first accumulator register, count)."""
        return tuple(tuple((i.src_a[0].rep, i.src_a[1], i.src_a[2], i.src_b[0].rep, i.src_b[1], i.src_b[2],
                            i.acc_first, i.acc_count) for i in self.mfma_sequence(step))
                     for step in range(self.read_steps))

    def mfma_k(self, kstep_pair: int, sub: int, kk):
        """Real k (0 .. block_K-1) of the MFMA's logical k index kk (0 .. mfma.K-1) in step (kstep_pair, sub), for
        both operands."""
        kpl, epc = self.mfma.k_per_lane, self.elems_per_chunk
        kk = np.asarray(kk) if not isinstance(kk, int) else kk
        if self.mfma.blocks > 1:  # block b of the operand is the step's chunk set b (_read_offset's `piece`)
            block, kb = kk // (self.mfma.K // self.mfma.blocks), kk % (self.mfma.K // self.mfma.blocks)
            return self.k_per_read * kstep_pair + epc * self.lane_groups * block + kb
        return self.k_per_read * kstep_pair + epc * (kk // kpl) + kpl * sub + kk % kpl

    # -- accumulators and the epilogue -----------------------------------------------------------------------------
    def acc_element(self, rep_m: int, rep_n: int, reg: int, wave, lane):
        """(i, j) in the block tile of accumulator register `reg` (0 .. mfma.d_regs-1) of MFMA tile (rep_m, rep_n),
        wave `wave`, lane `lane` (absolute AGPR index: (rep_m * repeats_N + rep_n) * d_regs + reg)."""
        p_of, q_of = _d_inverse(self.mfma)
        wm, wn = self.wave_coords(wave)
        idx = np.asarray(lane) * self.mfma.d_regs + reg
        p, q = p_of[idx], q_of[idx]
        i = wm * self.wave_tile_M + rep_m * self.dim + q
        j = wn * self.wave_tile_N + rep_n * self.dim + p
        if np.ndim(i) == 0:
            return int(i), int(j)
        return i, j

    def store_runs(self, wave: int, lane: int) -> list:
        """Runs of consecutive j of one row i held by (wave, lane) in consecutive accumulator registers, in
        accumulator order. Always of length mfma.d_row_block (4)."""
        runs = []
        R = self.mfma.d_row_block
        for rm in range(self.repeats_M):
            for rn in range(self.repeats_N):
                acc0 = (rm * self.repeats_N + rn) * self.mfma.d_regs
                for r0 in range(0, self.mfma.d_regs, R):
                    ij = [self.acc_element(rm, rn, r0 + d, wave, lane) for d in range(R)]
                    assert all(ij[d] == (ij[0][0], ij[0][1] + d) for d in range(R)), "D layout is not 4 consecutive j"
                    runs.append(StoreRun(ij[0][0], ij[0][1], acc0 + r0, R))
        return runs

    # -- global -> LDS copies --------------------------------------------------------------------------------------
    def user_tile_shape(self, operand: str) -> tuple:
        """(rows, cols) of the user's shared tile, cols contiguous."""
        if _check_operand(operand) == "A":
            return (self.block_K, self.block_M) if self.transpose_A else (self.block_M, self.block_K)
        return (self.block_N, self.block_K) if self.transpose_B else (self.block_K, self.block_N)

    def copy_plan(self, operand: str) -> CopyPlan:
        """Register-path copy (buffer_load_dwordx4, then ds_write_b128 or, transposing, v_perm_b32 + ds_write)."""
        operand = _check_operand(operand)
        return self._copy(operand, "b128" if self.copied_as_stored(operand) else "transpose")

    def dma_copy_plan(self, operand: str, lane_bytes: int = CHUNK) -> CopyPlan:
        """LDS-DMA copy, `lane_bytes` per lane (16: buffer_load_dwordx4 ... lds, gfx950; 4: buffer_load_dword ...
        lds, gfx942 too), for an operand whose LDS tile has the user's layout (K-major, or read with
        ds_read_b64_tr_b16)."""
        operand = _check_operand(operand)
        if lane_bytes not in self.arch.lds_dma_bytes or CHUNK % lane_bytes or lane_bytes < 4:
            raise CompileError(f"T.gemm: {self.arch.name} has no {lane_bytes}-byte LDS DMA that fills 16-byte LDS "
                               f"chunks (its LDS DMA widths: {self.arch.lds_dma_bytes} bytes per lane)")
        if not self.copied_as_stored(operand):
            raise CompileError(f"T.gemm: LDS DMA cannot transpose; operand {operand} is not K-major in global memory "
                               f"and {self.arch.name} has no transposing LDS read")
        return self._copy(operand, "lds_dma", lane_bytes)

    def _copy(self, operand, kind, lane_bytes=CHUNK):
        key = (operand, kind, lane_bytes)
        if key not in self._copies:
            rows, cols = self.user_tile_shape(operand)
            runs = rows * cols // self.elems_per_chunk
            pack = self._transpose_pack(-(-runs // self.threads)) if kind == "transpose" else 1
            if self.halves_swizzled(operand):
                pack = min(pack, 4)  # a write must stay within one 8-byte half
            units = runs * (CHUNK // lane_bytes) // pack  # what one thread moves per `pack` slots
            slots = pack * -(-units // self.threads)
            self._copies[key] = CopyPlan(self, operand, kind, (rows, cols), runs, slots, pack, lane_bytes)
        return self._copies[key]

    def _transpose_pack(self, runs_per_thread: int) -> int:
        """k runs a transposing copy packs per thread: as many as the thread loads anyway, a power of two up to 8 (a
        whole 16-byte chunk: ds_write_b128) dividing block_K. Packed writes are conflict free only where a write phase
        (one sweep of the banks) covers one K-major row; with shorter rows the phase holds rows 8 apart, which share
        their banks, and unpacked ds_write_b16 (a 2-byte phase spans 64 lanes: whole rows) stay conflict free."""
        if self.row_bytes < self.arch.lds_banks * self.arch.lds_bank_bytes:
            return 1
        # 16-bit: up to a whole chunk (ds_write_b128); 8-bit: up to 4 k (ds_write_b32 after a 4 x 4 byte transpose)
        most = 8 if self.dtype.bytes == 2 else 4
        pack = 2
        while pack < most and 2 * pack <= runs_per_thread and self.block_K % (2 * pack) == 0:
            pack *= 2
        return pack

    @cached_property
    def _copies(self):
        return {}

    # -- resources -------------------------------------------------------------------------------------------------
    @property
    def vgprs_lower_bound(self) -> int:
        """Operand fragments of one k-step pair + copy staging (4 VGPRs per slot per operand): a floor, not a count."""
        frag = sum(self.operand_regs_per_step.values())
        stage = 4 * (self.copy_plan("A").slots + self.copy_plan("B").slots)
        return frag + stage

    def check_budget(self, arch=None) -> None:
        """ResourceError (needed vs available) when the plan does not fit `arch` (default: the plan's arch)."""
        arch = self.arch if arch is None else get_arch(arch)
        problems = []
        if self.lds_bytes > arch.lds_bytes:
            stages = f"x{self.num_stages} stage" + ("s" if self.num_stages != 1 else "")
            problems.append(
                f"LDS: needs {self.lds_bytes} bytes (A {self.lds_a_bytes} + B {self.lds_b_bytes}, {stages}), "
                f"{arch.name} has {arch.lds_bytes}"
            )
        if self.acc_regs_per_lane > arch.agprs:
            problems.append(
                f"accumulators: needs {self.acc_regs_per_lane} AGPRs per lane ({self.repeats_M}x{self.repeats_N} "
                f"MFMA tiles of {self.mfma.M}x{self.mfma.N} x {self.mfma.d_regs} registers), {arch.name} has {arch.agprs}"
            )
        if self.vgprs_lower_bound > arch.arch_vgprs:
            problems.append(
                f"VGPRs: needs at least {self.vgprs_lower_bound} per lane (operand fragments "
                f"{sum(self.operand_regs_per_step.values())} + copy staging "
                f"{self.vgprs_lower_bound - sum(self.operand_regs_per_step.values())}), {arch.name} has {arch.arch_vgprs}"
            )
        if problems:
            raise ResourceError(
                f"T.gemm {self.block_M}x{self.block_N}x{self.block_K} with {self.threads} threads does not fit "
                f"{arch.name}: " + "; ".join(problems)
            )

    def describe(self) -> str:
        return (
            f"{self.arch.name} {self.dtype.short} {self.block_M}x{self.block_N}x{self.block_K} {self.threads} threads: "
            f"{self.mfma.name(self.dtype.short)}, waves {self.waves_M}x{self.waves_N}, wave tile "
            f"{self.wave_tile_M}x{self.wave_tile_N} = {self.repeats_M}x{self.repeats_N} MFMA tiles, "
            f"{self.read_steps} ds_read_b128 step(s) x {self.mfma_per_read} MFMA, {self.acc_regs_per_lane} AGPRs, "
            f"LDS {self.lds_bytes} bytes"
        )


def _round_up(x: int, a: int) -> int:
    return -(-x // a) * a


def _check_operand(operand: str) -> str:
    if operand not in ("A", "B"):
        raise ValueError(f"T.gemm plan: operand must be 'A' or 'B', not {operand!r}")
    return operand


@functools.lru_cache(maxsize=None)
def _d_inverse(shape: MfmaShape):
    """(p_of, q_of): MFMA D row/column held at flat position lane * d_regs + reg, from mfma_layout.d_location."""
    n = WAVE * shape.d_regs
    p_of, q_of = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    for p in range(shape.M):
        for q in range(shape.N):
            lane, reg = mfma_layout.d_location(shape, p, q)
            p_of[lane * shape.d_regs + reg], q_of[lane * shape.d_regs + reg] = p, q
    assert (p_of >= 0).all(), "D layout does not fill the accumulator registers"
    return p_of, q_of


def _check_operand_layout(shape: MfmaShape) -> None:
    """The read plan relies on: lane l holds row l % dim and k_per_lane consecutive k from (l // dim) * k_per_lane,
    register r / half h being k offset 2r + h (mfma_layout.a_location / b_location); for 8-bit elements byte slot
    s being k offset s (mfma_layout.element_location, which the emulator's 8-bit MFMAs read by)."""
    kpl = shape.k_per_lane
    if shape.elem_bytes == 1:  # block b (of `blocks`) in VGPRs 4b..: kpl / blocks consecutive k of one chunk each
        sub_k, sub = shape.K // shape.blocks, kpl // shape.blocks
        for row in range(shape.M):
            for kk in range(shape.K):
                block, kb = divmod(kk, sub_k)
                want = (shape.M * (kb // sub) + row, block * sub + kb % sub)
                if mfma_layout.element_location(shape.M, shape.K, row, kk, shape.blocks) != want:
                    raise CompileError(f"T.gemm: MFMA {shape.M}x{shape.N}x{shape.K} 8-bit operand layout is not the "
                                       "one planned for")
        return
    for row in range(shape.M):
        for kk in range(shape.K):
            want = (shape.M * (kk // kpl) + row, (kk % kpl) // 2, kk % 2)
            if mfma_layout.a_location(shape, row, kk) != want or mfma_layout.b_location(shape, kk, row) != want:
                raise CompileError(f"T.gemm: MFMA {shape.M}x{shape.N}x{shape.K} operand layout is not the one planned for")


# ----------------------------------------------------------------------------------------------------------------


# (waves_M, waves_N) -> preference: TileLang's compute_warp_partition takes the valid grid with the most waves along M
# for FullRow (all of them where the block allows) and along N for FullCol
_POLICY_PREFERS = {"FullRow": lambda grid: grid[0], "FullCol": lambda grid: grid[1]}


def plan_gemm(arch, dtype, block_M: int, block_N: int, block_K: int, threads: int, transpose_A: bool = False,
              transpose_B: bool = False, num_stages: int = 1, check: bool = True,
              a_in_registers: bool = False, policy: str | None = None, scaled: bool = False,
              a_k_free: bool = False) -> GemmPlan:
    """Plan one block tile C[block_M, block_N] += A @ B over block_K (see the module doc). `a_in_registers`: A is a
    fragment held in the MfmaOperand layout (no A reads; B read in `register_k`'s k order). `a_k_free`: that
    fragment's k order is the plan's to choose (nothing computes it in registers): where a lane's k of one MFMA fill
    one 16-byte chunk (gfx950's 16-bit shapes) it holds them as one (`a_k_chunks`), and B takes one ds_read_b128 an
    MFMA as beside a shared A instead of two ds_read_b64 (module doc, point 8). `policy` (TileLang's
    GemmWarpPolicy): "FullRow" takes the wave grid with the most waves along M that tiles the block (one wave column
    where the block allows), "FullCol" the most along N, as TileLang's compute_warp_partition does.

    `scaled` (MX block scales, point 10): only the f8f6f4 shapes, which have the v_mfma_scale_f32_* forms.

    Raises CompileError when no MFMA shape / wave grid tiles the block, and (with `check`) ResourceError when the
    plan needs more LDS or registers than `arch` has."""
    arch = get_arch(arch)
    dt = as_dtype(dtype)
    shapes = arch.mfma_shapes.get(dt.short)
    if scaled or dt.is_packed_fp4:
        shapes = tuple(s for s in shapes or () if "f8f6f4" in s.name_template)
        if not shapes:
            what = "MX-scaled (v_mfma_scale_f32_*)" if scaled else "fp4"
            raise CompileError(f"T.gemm: {arch.name} has no {what} MFMA; decode the {dt.name} operand in registers "
                               "and multiply in bf16 (TileLang's dequantize GEMM, examples/tilelang/"
                               "dequant_gemm_bf16_mxfp4_cdna4.py), or compile for gfx950")
    if dt.is_packed_fp4 and (transpose_A or not transpose_B):
        raise CompileError(f"T.gemm: {dt.name} operands must be K-major in shared memory (A as (M, K / 2), B as "
                           "(N, K / 2) with transpose_B=True): two values share a byte along K, which no transposing "
                           "copy or LDS read separates; store the operand transposed in global memory")
    supported = ("bfloat16", "float16", "int8") + tuple(arch.fp8_dtypes) + (("float4_e2m1fn_x2",) if
                                                                             "fp4" in arch.mfma_shapes else ())
    if dt.name not in supported or not shapes:
        raise CompileError(f"T.gemm: {arch.name} has no MFMA for {dt.name} operands (supported: "
                           f"{', '.join(supported)})")
    for name, v in (("block_M", block_M), ("block_N", block_N), ("block_K", block_K), ("num_stages", num_stages)):
        if not isinstance(v, int) or v <= 0:
            raise CompileError(f"T.gemm: {name} must be a positive int, got {v!r}")
    if threads % WAVE or not 0 < threads <= arch.max_workgroup_threads:
        raise CompileError(
            f"T.gemm: threads must be a multiple of {WAVE} in {WAVE}..{arch.max_workgroup_threads}, got {threads}"
        )
    waves = threads // WAVE
    row_bytes = block_K * dt.bytes
    _swizzle_params(arch, row_bytes)  # block_K a power of two
    reasons, candidates = [], []
    for shape in shapes:
        dim, G = shape.M, WAVE // shape.M
        k_read = CHUNK // dt.bytes * G * shape.blocks
        pair = " (two k-steps per ds_read_b128)" if shape.k_per_lane * 2 * dt.bytes == CHUNK else ""
        grids = [(wm, waves // wm) for wm in range(1, waves + 1) if waves % wm == 0]
        fits = [(wm, wn) for wm, wn in grids if block_M % (wm * dim) == 0 and block_N % (wn * dim) == 0]
        why = []
        if block_K % k_read:
            why.append(f"block_K % {k_read} == 0{pair}")
        if not fits:
            why.append(f"block_M % ({dim}*waves_M) == 0 and block_N % ({dim}*waves_N) == 0 for some "
                       f"waves_M*waves_N == {waves}")
        if why:
            reasons.append(f"{shape.name(dt.short)} needs " + " and ".join(why))
            continue

        def score(g):
            tm, tn = block_M // g[0], block_N // g[1]
            return (max(tm, tn) / min(tm, tn), -tn)

        if policy in _POLICY_PREFERS:  # TileLang's rule: the most waves along M (FullRow) / N (FullCol)
            candidates.append((shape, max(fits, key=_POLICY_PREFERS[policy])))
        else:
            candidates.append((shape, min(fits, key=score)))
    if candidates:
        # the arch's shape order decides, except that a policy first wants the shape that gives it the most waves
        prefer = _POLICY_PREFERS.get(policy, lambda grid: 0)
        shape, (wm, wn) = max(candidates, key=lambda c: (prefer(c[1]), -candidates.index(c)))
        _check_operand_layout(shape)
        a_k_chunks = bool(a_in_registers and a_k_free and shape.blocks == 1
                          and shape.k_per_lane * dt.bytes == CHUNK)
        plan = GemmPlan(arch, dt, block_M, block_N, block_K, threads, bool(transpose_A), bool(transpose_B),
                        num_stages, shape, wm, wn, bool(a_in_registers), a_k_chunks)
        if check:
            plan.check_budget()
        return plan
    raise CompileError(
        f"T.gemm: block {block_M}x{block_N}x{block_K} with {threads} threads ({waves} waves) fits no MFMA shape of "
        f"{arch.name} {dt.short}: " + "; ".join(reasons)
    )
