"""T.gemm planning math (tilegcn/passes/gemm_plan.py): a whole-tile simulation of the plan against A @ B, LDS bank
conflicts under the emulator's model, base + constant separation of the offsets, and the error paths.

The simulation uses its own copy of the MFMA layout formulas (docs/isa-notes.md), not tilegcn.amdgcn.mfma_layout, so a
mistake shared by the plan and the layout module would still show; one test also runs the emulator's MFMA.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools

import numpy as np
import pytest
import sympy as sp
import torch

from tilegcn.amdgcn.arch import get_arch
from tilegcn.errors import CompileError, ResourceError
from tilegcn.passes.gemm_plan import (
    LANE_SYM, TID, WAVE_SYM, ds_extra_cycles, plan_gemm, swizzle_chunk, swizzled_offset,
)

ARCHES = ("gfx942", "gfx950")
TILES = ((64, 64, 32), (128, 128, 64), (256, 256, 64))
THREADS = (256, 512)
CONFIGS = [(a, t, n) for a in ARCHES for t in TILES for n in THREADS]


@functools.lru_cache(maxsize=None)
def plan_of(arch, tile, threads, tA=False, tB=False, dtype="bf16", stages=1):
    return plan_gemm(arch, dtype, *tile, threads, tA, tB, num_stages=stages)


def _id(c):
    return f"{c[0]}-{'x'.join(map(str, c[1]))}-{c[2]}t"


# ---------------------------------------------------------------------------------------------------------------
# independent MFMA reference (docs/isa-notes.md): operands as [64 lanes, k_per_lane] 16-bit values, D as [64, d_regs]


def operand_matrix(halves, dim, kpl):
    """[dim, K] matrix from per-lane halves [64, kpl]: X[r][kk] at lane dim*(kk//kpl) + r, position kk % kpl
    (register (kk % kpl)//2, half kk % 2). A's rows are i, B's 'rows' are its columns j."""
    K = 64 * kpl // dim
    r, kk = np.meshgrid(np.arange(dim), np.arange(K), indexing="ij")
    return halves[dim * (kk // kpl) + r, kk % kpl]


def d_position(dim):
    """(lane, reg) arrays over [dim, dim] of D[p][q]: lane dim*((p//4) % G) + q, reg 4*(p//(4G)) + p % 4."""
    G = 64 // dim
    p, q = np.meshgrid(np.arange(dim), np.arange(dim), indexing="ij")
    return dim * ((p // 4) % G) + q, 4 * (p // (4 * G)) + p % 4


def bits_to_float(bits, dtype):
    bits = np.asarray(bits, dtype=np.uint16)
    if dtype == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return bits.view(np.float16).astype(np.float64)


def random_operands(plan, seed=0):
    g = torch.Generator().manual_seed(seed)
    tdt = torch.bfloat16 if plan.dtype.short == "bf16" else torch.float16
    A = torch.randn(plan.block_M, plan.block_K, generator=g).to(tdt)
    B = torch.randn(plan.block_K, plan.block_N, generator=g).to(tdt)
    return A, B


def user_tile_bits(plan, operand, A, B):
    """The user's shared tile (as laid out in global memory) as uint16 bits."""
    if operand == "A":
        t = A.T if plan.transpose_A else A
    else:
        t = B.T if plan.transpose_B else B
    assert tuple(t.shape) == plan.user_tile_shape(operand)
    return t.contiguous().view(torch.int16).numpy().view(np.uint16)


def fill_lds(plan, A, B, dma=False):
    """LDS image (uint16 per 2 bytes) after every thread's copy slots; asserts each tile byte is written once."""
    lds = np.zeros(plan.lds_bytes // 2, np.uint16)
    count = np.zeros(plan.lds_bytes // 2, np.int64)
    tids = np.arange(plan.threads)
    for op in ("A", "B"):
        cp = plan.dma_copy_plan(op) if dma else plan.copy_plan(op)
        bits = user_tile_bits(plan, op, A, B)
        for s in range(cp.slots):
            act = cp.active(tids, s)
            row, col = cp.global_coords(tids, s)
            row, col = row[act], col[act]
            run = bits[row[:, None], col[:, None] + np.arange(8)]  # [threads, 8]
            offs = [np.asarray(o)[act] for o in cp.lds_offsets(tids, s)]
            if cp.kind in ("b128", "lds_dma"):
                assert len(offs) == 1 and (offs[0] % 16 == 0).all()
                idx = offs[0][:, None] // 2 + np.arange(8)
                lds[idx] = run
                np.add.at(count, idx.reshape(-1), 1)
            else:
                assert cp.kind == "transpose" and len(offs) == 8
                for e in range(8):
                    assert (offs[e] % 2 == 0).all()
                    lds[offs[e] // 2] = run[:, e]
                    np.add.at(count, offs[e] // 2, 1)
        lo = plan.operand_lds_offset(op) // 2
        n = (plan.lds_a_bytes if op == "A" else plan.lds_b_bytes) // 2
        assert (count[lo:lo + n] == 1).all(), f"{op}: LDS tile not written exactly once"
    return lds


def ds_read_b64_tr_b16(lds, off):
    """[64, 4] uint16 halves, as the CDNA4 ISA guide describes the transposing read: each 16-lane group reads a
    4 x 16 tile of 16-bit elements, lanes 4r..4r+3 reading 8 bytes each of its row r, and lane j of the group
    receives column j (element r of its result from row r)."""
    assert (off % 8 == 0).all()
    tile = lds[off[:, None] // 2 + np.arange(4)].reshape(4, 4, 16)  # [group, row r, 16 columns]
    return tile.transpose(0, 2, 1).reshape(64, 4)


def read_fragments(plan, lds, wave):
    """{(operand, rep, step): [64, 8] uint16 halves} from the plan's read offsets (ds_read_b128, or two
    ds_read_b64_tr_b16 filling halves 0-3 and 4-7)."""
    lanes = np.arange(64)
    frags = {}
    for step in range(plan.read_steps):
        for rd in plan.reads(step):
            halves = np.zeros((64, 8), np.uint16)
            for index, piece in enumerate(plan.read_pieces(rd.operand)):
                off = plan.operand_read_offsets(rd.operand, wave, lanes, rd.rep, step, piece=index)
                part = slice(2 * piece.vgpr, 2 * (piece.vgpr + piece.count))
                if piece.mnemonic == "ds_read_b128":
                    assert (off % 16 == 0).all()
                    halves[:, part] = lds[off[:, None] // 2 + np.arange(8)]
                else:
                    assert piece.mnemonic == "ds_read_b64_tr_b16" and plan.arch.has_ds_read_tr_b16
                    halves[:, part] = ds_read_b64_tr_b16(lds, off)
            frags[(rd.operand, rd.rep, step)] = halves
    return frags


def simulate(plan, A, B, dma=False):
    """C tile computed by following the plan: copy, read, MFMA (reference layouts), scatter with acc_element."""
    lds = fill_lds(plan, A, B, dma)
    dim, kpl, dt = plan.dim, plan.mfma.k_per_lane, plan.dtype.short
    d_lane, d_reg = d_position(dim)
    C = np.full((plan.block_M, plan.block_N), np.nan)
    hits = np.zeros(C.shape, np.int64)
    lanes = np.arange(64)
    for w in range(plan.waves):
        frags = read_fragments(plan, lds, w)
        acc = np.zeros((64, plan.acc_regs_per_lane))
        for step in range(plan.read_steps):
            for mi in plan.mfma_sequence(step):
                (ra, a0, na), (rb, b0, nb) = mi.src_a, mi.src_b
                assert ra.operand == "B" and rb.operand == "A" and na == nb == plan.mfma.a_regs
                ha = frags[(ra.operand, ra.rep, ra.step)][:, 2 * a0:2 * (a0 + na)]
                hb = frags[(rb.operand, rb.rep, rb.step)][:, 2 * b0:2 * (b0 + nb)]
                SA = bits_to_float(operand_matrix(ha, dim, kpl), dt)  # [dim (j), K]
                SB = bits_to_float(operand_matrix(hb, dim, kpl), dt)  # [dim (i), K]
                D = SA @ SB.T  # D'[p = j][q = i]
                np.add.at(acc, (d_lane, mi.acc_first + d_reg), D)
        for rm, rn, reg in itertools.product(range(plan.repeats_M), range(plan.repeats_N), range(plan.mfma.d_regs)):
            i, j = plan.acc_element(rm, rn, reg, w, lanes)
            C[i, j] = acc[:, (rm * plan.repeats_N + rn) * plan.mfma.d_regs + reg]
            np.add.at(hits, (i, j), 1)
    assert (hits == 1).all(), "acc_element does not cover the C tile exactly once"
    return C


# ---------------------------------------------------------------------------------------------------------------
# the whole plan against A @ B


@pytest.mark.parametrize("tA,tB", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_simulated_tile_matches_matmul(cfg, tA, tB):
    arch, tile, threads = cfg
    plan = plan_of(arch, tile, threads, tA, tB)
    A, B = random_operands(plan, seed=hash((cfg, tA, tB)) % 1000)
    C = simulate(plan, A, B)
    ref = (A.float() @ B.float()).numpy()
    np.testing.assert_allclose(C, ref, rtol=1e-5, atol=1e-4)


def test_f16_and_16x16_shapes():
    """f16 goes through the same math; 16x16 shapes are chosen where a 32x32 one cannot tile the wave grid."""
    for arch in ARCHES:
        plan = plan_gemm(arch, "f16", 64, 64, 32, 512, True, False)
        assert plan.mfma.M == 16 and plan.mfma is get_arch(arch).mfma_shapes["f16"][1]
        A, B = random_operands(plan, 3)
        np.testing.assert_allclose(simulate(plan, A, B), (A.float() @ B.float()).numpy(), rtol=1e-5, atol=1e-4)
    # gfx950 with a 16-wide block_K: 32x32x16 still fits (one read step of 16 k), 16x16x32 would not
    assert plan_gemm("gfx950", "bf16", 64, 64, 16, 256).mfma.K == 16
    # gfx942 with 1024 threads on 64x64: only 16x16x16 tiles 16 waves (4x4 of 16x16)
    p = plan_gemm("gfx942", "bf16", 64, 64, 32, 1024)
    assert (p.mfma.M, p.waves_M, p.waves_N, p.repeats_M, p.repeats_N) == (16, 4, 4, 1, 1)
    A, B = random_operands(p, 4)
    np.testing.assert_allclose(simulate(p, A, B), (A.float() @ B.float()).numpy(), rtol=1e-5, atol=1e-4)


def test_emulator_mfma_agrees():
    """Feed the emulator's MFMA (tilegcn.runtime.emulator.mfma, built on mfma_layout) the planned registers."""
    emu = pytest.importorskip("tilegcn.runtime.emulator.mfma")
    for arch, threads in (("gfx942", 256), ("gfx950", 512)):
        plan = plan_of(arch, (128, 128, 64), threads, True, False)
        A, B = random_operands(plan, 7)
        lds = fill_lds(plan, A, B)
        C = np.zeros((plan.block_M, plan.block_N))
        lanes = np.arange(64)
        name = plan.mfma.name(plan.dtype.short)
        for w in range(plan.waves):
            frags = read_fragments(plan, lds, w)
            acc = torch.zeros(1, 64, plan.acc_regs_per_lane)
            for step in range(plan.read_steps):
                for mi in plan.mfma_sequence(step):
                    (ra, a0, na), (rb, b0, nb) = mi.src_a, mi.src_b
                    ha = frags[(ra.operand, ra.rep, ra.step)][:, 2 * a0:2 * (a0 + na)]
                    hb = frags[(rb.operand, rb.rep, rb.step)][:, 2 * b0:2 * (b0 + nb)]
                    regs = [torch.from_numpy(np.ascontiguousarray(h).view(np.int32)).view(1, 64, na) for h in (ha, hb)]
                    sl = slice(mi.acc_first, mi.acc_first + mi.acc_count)
                    acc[:, :, sl] = emu.execute(name, regs[0], regs[1], acc[:, :, sl].contiguous())
            for rm, rn, reg in itertools.product(range(plan.repeats_M), range(plan.repeats_N), range(plan.mfma.d_regs)):
                i, j = plan.acc_element(rm, rn, reg, w, lanes)
                C[i, j] = acc[0, :, (rm * plan.repeats_N + rn) * plan.mfma.d_regs + reg].numpy()
        np.testing.assert_allclose(C, (A.float() @ B.float()).numpy(), rtol=1e-4, atol=1e-3)


def dma_instructions(plan, cp):
    """(slot, wave, thread ids, active lanes) of each LDS-DMA wave instruction of copy plan `cp` that has an
    active lane."""
    for s in range(cp.slots):
        for w in range(plan.waves):
            t = 64 * w + np.arange(64)
            act = cp.active(t, s)
            if act.any():
                yield s, w, t, act


@pytest.mark.parametrize("layouts", [(False, True), (True, False)], ids=["k-major", "k-rows"])
@pytest.mark.parametrize("cfg", [c for c in CONFIGS if c[0] == "gfx950"], ids=_id)
def test_lds_dma_copy_fills_the_same_image(cfg, layouts):
    """The swizzle applied on the global side (LDS DMA: contiguous LDS per lane) gives the register path's image,
    and each wave's DMA instruction still reads whole user-tile rows (coalesced): for K-major operands and for
    operands stored (K, X) (read with ds_read_b64_tr_b16)."""
    arch, tile, threads = cfg
    plan = plan_of(arch, tile, threads, *layouts)
    assert all(plan.transposed_read(op) == (not plan.is_k_major(op)) for op in "AB")
    A, B = random_operands(plan, 11)
    assert (fill_lds(plan, A, B, dma=True) == fill_lds(plan, A, B)).all()
    for op in "AB":
        cp = plan.dma_copy_plan(op)
        cols = cp.tile_shape[1]
        for s, w, t, act in dma_instructions(plan, cp):
            row, col = cp.global_coords(t, s)
            for r in np.unique(row[act]):
                assert sorted(col[act][row[act] == r]) == list(range(0, cols, 8))
            assert cp.dma_m0(w, s) + 16 * np.arange(64)[act].min() == cp.lds_offsets(t[act][0], s)[0]
    no_tr = dataclasses.replace(get_arch(arch), has_ds_read_tr_b16=False)
    with pytest.raises(CompileError, match="cannot transpose"):
        plan_gemm(no_tr, "bf16", *tile, threads, True, True).dma_copy_plan("A")
    with pytest.raises(CompileError, match="no 16-byte LDS DMA"):
        plan_of("gfx942", tile, threads).dma_copy_plan("A")


def test_k_permutation_and_register_contents():
    """Register (reg, half) of lane l in MFMA step (s, sub) holds k = mfma_k(s, sub, kk) for kk = the layout's k."""
    for arch in ARCHES:
        for tile, threads in (((64, 64, 32), 512), ((128, 128, 64), 256)):
            plan = plan_of(arch, tile, threads, True, True)
            kpl, dim = plan.mfma.k_per_lane, plan.dim
            seen = []
            for s in range(plan.read_steps):
                for sub in range(plan.mfma_per_read):
                    ks = plan.mfma_k(s, sub, np.arange(plan.mfma.K))
                    seen += list(ks)
            assert sorted(seen) == list(range(plan.block_K)), "k permutation is not a bijection onto block_K"
            # the LDS holds A^T's data K-major: check lane contents against the user tile directly
            A, B = random_operands(plan, 5)
            lds = fill_lds(plan, A, B)
            abits = A.contiguous().view(torch.int16).numpy().view(np.uint16)
            frags = read_fragments(plan, lds, wave=plan.waves - 1)
            wm, _ = plan.wave_coords(plan.waves - 1)
            for (op, rep, s), h in frags.items():
                if op != "A":
                    continue
                for sub in range(plan.mfma_per_read):
                    part = h[:, kpl * sub:kpl * (sub + 1)]
                    for lane in (0, 5, dim + 3, 63):
                        i = wm * plan.wave_tile_M + rep * dim + lane % dim
                        kk = kpl * (lane // dim) + np.arange(kpl)
                        assert (part[lane] == abits[i, plan.mfma_k(s, sub, kk)]).all()


# ---------------------------------------------------------------------------------------------------------------
# LDS bank conflicts (model: phases of banks*4/bytes lanes; distinct dwords per bank - 1; broadcast is free)


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
@pytest.mark.parametrize("tA", [False, True], ids=["A", "At"])
def test_operand_reads_are_conflict_free(cfg, tA):
    arch, tile, threads = cfg
    plan = plan_of(arch, tile, threads, tA)
    lanes = np.arange(64)
    n = 0
    for w in range(plan.waves):
        for step in range(plan.read_steps):
            for rd in plan.reads(step):
                for index, piece in enumerate(plan.read_pieces(rd.operand)):
                    off = plan.operand_read_offsets(rd.operand, w, lanes, rd.rep, step, piece=index)
                    assert ds_extra_cycles(arch, off, 4 * piece.count, read=True) == 0, (rd, w, piece)
                n += 1
    assert n == plan.waves * plan.read_steps * (plan.repeats_M + plan.repeats_N)
    assert plan.transposed_read("B") == (arch == "gfx950")  # B (K, N): ds_read_b64_tr_b16 where the arch has it


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_copy_write_conflicts(cfg):
    """ds_write_b128 of K-major copies: 0. Transposing copies: at most 1 extra cycle per wave instruction. Where a
    K-major row spans all banks (gfx942, block_K >= 64), k pairs packed by v_perm_b32 (ds_write_b32/b64/b128): a
    write phase covers one row, whose chunks the swizzle spreads over the banks: 0. Shorter rows: ds_write_b16 (a
    phase of 64 lanes covers whole rows): 0, but 1 where block_K is 32, because a wave then writes two 64-byte rows
    whose row indices agree mod 8 (8 consecutive x per thread), so they share banks and swizzle value on both 32
    and 64 banks"""
    arch, tile, threads = cfg
    plan = plan_of(arch, tile, threads, True, False)  # A transposed, B transposed: both by the transposing copy
    plan_km = plan_of(arch, tile, threads, False, True)  # both K-major (b128)
    for p in (plan, plan_km):
        for op in "AB":
            cp = p.copy_plan(op)
            worst = 0
            for s in cp.write_slots:
                for w in range(p.waves):
                    t = 64 * w + np.arange(64)
                    act = cp.active(t, s)
                    if act.any():
                        for off in cp.lds_offsets(t, s):
                            worst = max(worst, ds_extra_cycles(arch, off, cp.write_bytes, act, read=False))
            if cp.kind == "b128":
                assert worst == 0
            else:
                assert worst == (1 if plan.block_K == 32 else 0)


def test_bank_model_sees_unswizzled_conflicts():
    """Sanity check of the model: without the swizzle the same reads conflict, and a broadcast is free."""
    plan = plan_of("gfx942", (128, 128, 64), 256)
    lanes = np.arange(64)
    row, chunk = lanes % plan.dim, lanes // plan.dim
    # 8 phases, 8 lanes on 4 banks
    assert ds_extra_cycles("gfx942", row * plan.row_bytes + 16 * chunk, 16, read=True) == 8 * 7
    assert ds_extra_cycles("gfx942", np.zeros(64, np.int64), 16, read=True) == 0
    assert ds_extra_cycles("gfx950", np.arange(64) * 256, 4, read=True) == 63  # 64 lanes on bank 0


def test_bank_model_matches_the_emulator():
    """ds_extra_cycles is the emulator's model (tilegcn.runtime.emulator.stats.bank_conflicts, in the phases
    Arch.lds_phases gives: measured ones for gfx950's ds_read_b128)."""
    stats = pytest.importorskip("tilegcn.runtime.emulator.stats")
    rng = np.random.default_rng(0)
    for arch in ARCHES:
        banks = get_arch(arch).lds_banks
        plan = plan_of(arch, (128, 128, 64), 256, True, False)
        cases = [(plan.operand_read_offsets("A", 1, np.arange(64), 1, 1), 16, None, True),
                 (np.arange(64) * 128, 16, None, True)]
        cp = plan.copy_plan("A")
        t = np.arange(64) + 64
        if cp.kind == "transpose":  # gfx942: A transposed by the register copy
            write_bytes = 2 * cp.pack
            cases += [(cp.lds_offsets(t, 0)[3], write_bytes, None, False),
                      (cp.lds_offsets(t, 0)[3], write_bytes, rng.random(64) < 0.5, False)]
        else:  # gfx950: A stored (K, M), read with ds_read_b64_tr_b16
            cases.append((plan.operand_read_offsets("A", 1, np.arange(64), 1, 1, piece=1), 8, None, True))
        for nbytes, read in itertools.product((2, 4, 8, 16), (True, False)):
            cases.append((rng.integers(0, 4096, 64) // nbytes * nbytes, nbytes, rng.random(64) < 0.7, read))
        for addr, nbytes, act, read in cases:
            emu = stats.bank_conflicts(torch.as_tensor(np.asarray(addr, np.int64)).view(1, 64),
                                       None if act is None else torch.as_tensor(act).view(1, 64), nbytes, banks,
                                       get_arch(arch).lds_phases(nbytes, read))
            assert ds_extra_cycles(arch, addr, nbytes, act, read=read) == emu


def test_swizzle_properties():
    for arch in ARCHES:
        for row_bytes in (32, 64, 128, 256, 512):
            rc = row_bytes // 16
            rows = np.arange(256)[:, None]
            chunks = np.arange(rc)[None, :]
            phys = swizzle_chunk(arch, rows, chunks, row_bytes)
            assert (np.sort(phys, axis=1) == chunks).all()  # a permutation within each row
            assert (swizzle_chunk(arch, rows, phys, row_bytes) == chunks).all()  # an involution
            r, c = sp.symbols("r c", integer=True, nonnegative=True)
            e = sp.lambdify((r, c), swizzled_offset(arch, r, c, row_bytes), "numpy")
            assert (np.rint(e(rows, chunks)).astype(int) == swizzled_offset(arch, rows, chunks, row_bytes)).all()


# ---------------------------------------------------------------------------------------------------------------
# offsets as one VGPR base (SymPy in tid / wave, lane) + lane-independent constants


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_read_offsets_separate_into_bases_and_constants(cfg):
    arch, tile, threads = cfg
    plan = plan_of(arch, tile, threads)  # B (K, N): read with ds_read_b64_tr_b16 on gfx950
    tids = np.arange(threads)
    for op in "AB":
        fam = plan.read_offsets(op)
        reps = plan.repeats_M if op == "A" else plan.repeats_N
        pieces = len(plan.read_pieces(op))
        assert pieces == (2 if plan.transposed_read(op) else 1)
        assert len(fam.keys) == reps * plan.read_steps * pieces
        if plan.transposed_read(op):
            # the swizzle value comes from lane bits of k only: steps and halves share a base; repeats move the
            # chunk by dim/8 and share one when that is a multiple of the XOR's span 2m
            m = np.gcd(plan.lds_row_bytes(op) // 32, get_arch(arch).lds_banks * 4 // 32)
            assert len(fam.bases) == len({(r * plan.dim // 8) % (2 * m) for r in range(reps)})
            assert all(fam.base_of[key] == fam.base_of[(key[0], 0, 0)] for key in fam.keys)
        else:
            # the swizzle forces min(read_steps, m/G) bases; every repeat shares its step's base
            assert len(fam.bases) == plan.expected_read_bases
            assert {fam.base_of[(r, s, 0)] for r in range(reps) for s in range(plan.read_steps)} == set(
                range(len(fam.bases)))
            assert all(fam.base_of[(r, s, 0)] == fam.base_of[(0, s, 0)] for (r, s, _) in fam.keys)
        for (r, s, piece) in fam.keys:
            want = plan.operand_read_offsets(op, tids // 64, tids % 64, r, s, piece=piece)
            assert (fam.evaluate((r, s, piece), tids) == want).all()
            # the wave/lane form and the full expression agree too
            wl = sp.lambdify((WAVE_SYM, LANE_SYM), fam.base_expr((r, s, piece), in_wave_lane=True), "numpy")
            assert (np.rint(wl(tids // 64, tids % 64)).astype(int) + fam.const[(r, s, piece)] == want).all()
            full = sp.lambdify(TID, plan.operand_read_expr(op, r, s, piece=piece), "numpy")
            assert (np.rint(full(tids)).astype(int) == want).all()
            # constants fit the 16-bit DS offset field
            assert 0 <= fam.const[(r, s, piece)] <= get_arch(arch).ds_max_imm_offset
        # minimality: representatives of different bases do not differ by a constant
        for b1, b2 in itertools.combinations(range(len(fam.bases)), 2):
            d = fam.evaluate_base(b1, tids) - fam.evaluate_base(b2, tids)
            assert np.ptp(d) > 0


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_copy_offsets_separate_into_bases_and_constants(cfg):
    arch, tile, threads = cfg
    tids = np.arange(threads)
    for tA, tB in ((False, True), (True, False)):
        plan = plan_of(arch, tile, threads, tA, tB)
        for op in "AB":
            cp = plan.copy_plan(op)
            rowf, colf, ldsf = cp.global_row_family, cp.global_col_family, cp.lds_offsets_family
            # global coordinates: one base each, the slot only moves the row by a constant
            assert len(rowf.bases) == 1 and len(colf.bases) == 1
            for s in range(cp.slots):
                act = cp.active(tids, s)
                row, col = cp.global_coords(tids, s)
                assert (rowf.evaluate(s, tids)[act] == row[act]).all()
                assert (colf.evaluate(s, tids)[act] == col[act]).all()
                offs = cp.lds_offsets(tids, s) if s in cp.write_slots else ()
                for e, off in enumerate(offs):
                    assert (ldsf.evaluate((s, e), tids)[act] == np.asarray(off)[act]).all()
            # K-major: one LDS base for every slot; transposing: one per element (the XOR of the swizzle moves
            # with the LDS row, i.e. with the element), shared by all slots; stored (K, X) for
            # ds_read_b64_tr_b16: one per phase of the slot's first row in the swizzle's 16-row period
            want = 1 if cp.kind == "b128" else len({ldsf.base_of[(0, e)] for e in range(8)})
            if plan.transposed_read(op):
                rows_per_slot = threads * 16 // plan.lds_row_bytes(op)
                want = len({s * rows_per_slot % 16 for s in range(cp.slots)})
            assert len(ldsf.bases) == want
            if cp.kind == "transpose":
                assert all(ldsf.base_of[(s, e)] == ldsf.base_of[(0, e)] for s in cp.write_slots for e in range(8))


# ---------------------------------------------------------------------------------------------------------------
# tiling, accumulators, epilogue


def test_wave_grid_and_counts():
    p = plan_of("gfx942", (128, 128, 64), 256)
    assert (p.mfma.M, p.waves_M, p.waves_N, p.wave_tile_M, p.wave_tile_N) == (32, 2, 2, 64, 64)
    assert (p.repeats_M, p.repeats_N, p.k_steps, p.read_steps, p.pair_k) == (2, 2, 8, 4, True)
    assert p.acc_regs_per_lane == 4 * 16 and p.lds_bytes == 32768 and p.lds_b_offset == 16384
    p = plan_of("gfx950", (128, 128, 64), 256)
    assert (p.mfma.K, p.k_steps, p.read_steps, p.pair_k) == (16, 4, 4, False)
    p = plan_of("gfx942", (64, 64, 32), 512)  # 8 waves: 16x16 MFMA, 16x32 wave tiles (ties go to the wider N)
    assert (p.mfma.M, p.waves_M, p.waves_N, p.wave_tile_M, p.wave_tile_N) == (16, 4, 2, 16, 32)
    p = plan_gemm("gfx942", "bf16", 256, 64, 64, 256)  # squareness: 4x1 waves give 64x64 wave tiles
    assert (p.waves_M, p.waves_N) == (4, 1)
    seq = plan_of("gfx942", (128, 128, 64), 256).mfma_sequence(1)
    assert len(seq) == 2 * 2 * 2 and {m.k_step for m in seq} == {2, 3}
    assert [(m.sub, m.src_a[1], m.src_b[1]) for m in seq[:1] + seq[-1:]] == [(0, 0, 0), (1, 2, 2)]


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_store_runs(cfg):
    arch, tile, threads = cfg
    plan = plan_of(arch, tile, threads)
    cover = np.zeros((plan.block_M, plan.block_N), np.int64)
    for w in range(plan.waves):
        for lane in range(64):
            runs = plan.store_runs(w, lane)
            assert len(runs) * 4 == plan.acc_regs_per_lane
            for r in runs:
                assert r.length == 4 and r.j % 4 == 0
                cover[r.i, r.j:r.j + 4] += 1
                assert plan.acc_element(*divmod(r.acc_reg // plan.mfma.d_regs, plan.repeats_N),
                                        r.acc_reg % plan.mfma.d_regs + 3, w, lane) == (r.i, r.j + 3)
    assert (cover == 1).all()


# ---------------------------------------------------------------------------------------------------------------
# errors


def test_budget_errors():
    # 256x256x64 bf16 x2 stages: 131072 bytes of LDS; fits gfx950 (163840), not gfx942 (65536)
    with pytest.raises(ResourceError) as e:
        plan_gemm("gfx942", "bf16", 256, 256, 64, 256, num_stages=2)
    assert "LDS: needs 131072 bytes (A 32768 + B 32768, x2 stages), gfx942 has 65536" in str(e.value)
    p = plan_gemm("gfx942", "bf16", 256, 256, 64, 256, num_stages=2, check=False)
    p.check_budget("gfx950")
    with pytest.raises(ResourceError, match="gfx942 has 65536"):
        p.check_budget()
    # one wave holding a 256x256 tile: 1024 accumulator registers per lane
    with pytest.raises(ResourceError, match=r"accumulators: needs 1024 AGPRs per lane .* gfx950 has 256"):
        plan_gemm("gfx950", "bf16", 256, 256, 32, 64)
    # 128x256x128 with 3 stages on gfx950: LDS 3 * (32768 + 65536) = 294912
    with pytest.raises(ResourceError, match=r"LDS: needs 294912 bytes \(A 32768 \+ B 65536, x3 stages\), gfx950 has 163840"):
        plan_gemm("gfx950", "bf16", 128, 256, 128, 256, num_stages=3)
    assert issubclass(ResourceError, CompileError)


def test_compile_errors():
    with pytest.raises(CompileError, match=r"fits no MFMA shape of gfx942 bf16.*block_M % \(16\*waves_M\)"):
        plan_gemm("gfx942", "bf16", 40, 64, 32, 256)
    with pytest.raises(CompileError, match=r"block_K % 16 == 0 \(two k-steps per ds_read_b128\)"):
        plan_gemm("gfx942", "bf16", 64, 64, 8, 256)
    with pytest.raises(CompileError, match="power of two"):
        plan_gemm("gfx950", "bf16", 64, 64, 48, 256)
    with pytest.raises(CompileError, match="block_M % \\(32\\*waves_M\\)"):
        plan_gemm("gfx950", "bf16", 64, 16, 64, 1024)  # 16 waves cannot tile 64x16
    with pytest.raises(CompileError, match="threads must be a multiple of 64"):
        plan_gemm("gfx942", "bf16", 64, 64, 32, 96)
    with pytest.raises(CompileError, match="no MFMA for float32"):
        plan_gemm("gfx942", "float32", 64, 64, 32, 256)


@pytest.mark.parametrize("cfg", [c for c in CONFIGS if c[0] == "gfx942"], ids=_id)
def test_four_byte_lds_dma_fills_the_same_image(cfg):
    """gfx942's buffer_load_dword ... lds (LDS byte M0 + 4 * lane): 4 consecutive lanes fill one 16-byte LDS chunk
    with the 4-byte pieces of the global run that belongs there; the LDS tile equals the register path's, every
    byte written once, and each wave instruction's lanes start at its M0."""
    arch, tile, threads = cfg
    plan = plan_of(arch, tile, threads, False, True)
    A, B = random_operands(plan, 5)
    lds = np.zeros(plan.lds_bytes // 2, np.uint16)
    count = np.zeros(plan.lds_bytes // 2, np.int64)
    for op in "AB":
        cp = plan.dma_copy_plan(op, 4)
        bits = user_tile_bits(plan, op, A, B)
        for s, w, t, act in dma_instructions(plan, cp):
            row, col = (np.asarray(x)[act] for x in cp.global_coords(t, s))
            idx = np.asarray(cp.lds_offsets(t, s)[0])[act][:, None] // 2 + np.arange(2)
            lds[idx] = bits[row[:, None], col[:, None] + np.arange(2)]
            np.add.at(count, idx.reshape(-1), 1)
            assert cp.dma_m0(w, s) + 4 * np.arange(64)[act].min() == cp.lds_offsets(t[act][0], s)[0]
    assert (count == 1).all() and (lds == fill_lds(plan, A, B)).all()
    with pytest.raises(CompileError, match="no 2-byte LDS DMA that fills"):
        plan.dma_copy_plan("A", 2)
