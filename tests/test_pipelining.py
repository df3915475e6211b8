"""`T.Pipelined(n, num_stages=S)`: the tile-IR transform (passes/pipelining.py) and pipelined GEMMs on the emulator.

The transform is checked by executing its output IR abstractly: copies land only when a wait_group retires their
group, a gemm must find in its stage exactly the tiles of its own k (not an older one, not one still in flight),
and every k is computed once, in order. The LDS budget error; s_waitcnt / s_barrier lines of the 256x256x64 K loop
deleted in turn (a seeded sample here, every one in bench/pipelined_waits.py: the emulator must refuse each
deletion); the disk cache of a pipelined kernel. Pipelined GEMMs against torch (every correctness case at
num_stages 2 and 3) are in tests/test_gemm.py.
"""
from __future__ import annotations

import os
import random
import re

import sympy
import pytest
import torch

import kernels
import tilegcn
from conftest import release_emulator_programs
from test_gemm import DTYPES, TILES, assert_close, inputs, launch, outside_tolerance, reference
from tilegcn.errors import ArgumentError, CompileError, ResourceError
from tilegcn import ops
from tilegcn.ir import nodes as N
from tilegcn.ir.printer import print_kernel
from tilegcn.ir.types import as_dtype
from tilegcn.passes.gemm_plan import plan_gemm
from tilegcn.amdgcn.arch import get_arch
from tilegcn.passes.pipelining import _pipeline, covers_round_trip, pipeline_loops


@pytest.fixture(autouse=True)
def emulator(monkeypatch):
    monkeypatch.setenv("TILEGCN_DEVICE", "emulator")


# ---- the transform, executed abstractly -----------------------------------------------------------------------
BK = 64


def k_loop_kernel(n: int, stages: int, tile: int = 128, K: int | None = None) -> N.Kernel:
    """A tile x tile x BK GEMM's K loop over n K tiles of a (tile, K) x (K, tile) problem (K = n x BK unless given)."""
    bf16, K = as_dtype("bfloat16"), K or BK * n
    A = N.Buffer("A", N.GLOBAL, bf16, (tile, K))
    B = N.Buffer("B", N.GLOBAL, bf16, (K, tile))
    A_s = N.Buffer("A_s", N.SHARED, bf16, (tile, BK))
    B_s = N.Buffer("B_s", N.SHARED, bf16, (BK, tile))
    acc = N.Buffer("acc", N.FRAGMENT, as_dtype("float32"), (tile, tile))
    k = sympy.Symbol("k", integer=True, nonnegative=True)
    body = [ops.Copy(N.Region(A, (0, BK * k), (tile, BK)), N.Region(A_s, (0, 0), (tile, BK))),
            ops.Copy(N.Region(B, (BK * k, 0), (BK, tile)), N.Region(B_s, (0, 0), (BK, tile))),
            ops.Gemm(A_s, B_s, acc)]
    return N.Kernel("k", [], [A, B, A_s, B_s, acc], (1, 1, 1), (256, 1, 1), (), [ops.Loop(k, n, stages, body)])


def _tile_k(copy: ops.AsyncCopy, env) -> int:
    """Which K tile (or K phase) a copy fetches: its K start / its K extent (A's dim 1, B's dim 0)."""
    dim = 1 if copy.src.buffer.name == "A" else 0
    return int(sympy.sympify(copy.src.starts[dim]).subs(env)) // copy.src.extents[dim]


def execute(stmts, env=None, state=None):
    """Run the IR's control flow; returns the k of every gemm in order. Asserts the data each gemm reads."""
    state = state if state is not None else dict(lds={}, current=[], groups=[], computed=[])
    env = env or {}
    for s in stmts:
        if isinstance(s, ops.Loop):
            assert s.num_stages == 1, "a loop left with num_stages > 1 after the transform"
            for t in range(s.extent):
                execute(s.body, {**env, s.var: t}, state)
        elif isinstance(s, ops.AsyncCopy):
            key = (s.dst.buffer.name, s.stage)
            state["lds"][key] = None  # being overwritten: unreadable until its group is waited for
            masked = s.live is not None and int(sympy.sympify(s.live[0]).subs(env)) >= s.live[1]
            state["current"].append((key, "nothing in range" if masked else _tile_k(s, env)))
            state.setdefault("loaded", []).append(None if masked else _tile_k(s, env))
        elif isinstance(s, ops.CommitGroup):
            state["groups"].append(state["current"])
            state["current"] = []
        elif isinstance(s, ops.WaitGroup):
            done = state["groups"][:max(0, len(state["groups"]) - s.pending)]
            state["groups"] = state["groups"][len(done):]
            for group in done:
                for key, k in group:
                    state["lds"][key] = k
                    state.setdefault("retired", []).append(k)
        elif isinstance(s, ops.Gemm):
            k = len(state["computed"])
            for buf in (s.A, s.B):
                got = state["lds"].get((buf.name, s.stage))
                assert got == k, f"gemm #{k} reads {buf.name} stage {s.stage} holding tile {got}"
            state["computed"].append(k)
        else:
            raise AssertionError(f"unexpected statement {s}")
    return state["computed"]


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 9])
def test_pipelined_ir_computes_every_k_once_in_order_from_landed_tiles(n, stages):
    out = pipeline_loops(k_loop_kernel(n, stages))
    if stages == 1:
        assert isinstance(out.body[0], ops.Loop) and out.body[0].num_stages == 1  # today's serial loop
        return
    assert execute(out.body) == list(range(n))
    copies = [s for s in N.walk(out.body) if isinstance(s, ops.AsyncCopy)]
    assert {s.stage for s in copies} == set(range(min(stages, n)))  # S rotating buffers (fewer when n < S)
    text = print_kernel(out)
    assert "async_copy" in text and "commit_group" in text and "wait_group" in text


@pytest.mark.parametrize("stages", [2, 3])
def test_steady_step_waits_before_it_issues_so_one_barrier_serves_both(stages):
    """Each steady step first waits for its own stage (S-2 newer groups stay in flight), then issues the copy S-1
    steps ahead, then computes: the wait's barrier both publishes the stage and ends every wave's reads of the
    stage the copy overwrites, so a K step has one s_barrier, not two (one before the copies, one after)."""
    out = pipeline_loops(k_loop_kernel(9, stages))
    (loop,) = [s for s in out.body if isinstance(s, ops.Loop)]
    kinds = [type(s).__name__ for s in loop.body if not isinstance(s, ops.AsyncCopy)]
    assert kinds == ["WaitGroup", "CommitGroup", "Gemm"] * stages  # unrolled by S: constant stage indices
    assert [s.pending for s in loop.body if isinstance(s, ops.WaitGroup)] == [stages - 2] * stages


def _steady_loop(kernel: N.Kernel) -> ops.Loop:
    (loop,) = [s for s in kernel.body if isinstance(s, ops.Loop)]
    return loop


@pytest.mark.parametrize("wait_first", [True, False], ids=["wait_first", "issue_first"])
@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("n", [3, 4, 6, 8, 9])
def test_the_last_steps_run_in_the_loop_and_nothing_past_k_is_loaded(n, stages, wait_first):
    """The steps after the last tile is issued run as trips of the steady loop, their copies issued with nothing in
    range (no peeled copy of the loop body); only n % S steps follow the loop. No live copy fetches a tile past the
    last, a copy past the end is never retired by a wait (a register-staged one would be written to LDS), and every
    gemm still reads its landed tile."""
    loop = k_loop_kernel(n, stages).body[0]
    out = _pipeline(loop, wait_first=wait_first)
    state = dict(lds={}, current=[], groups=[], computed=[])
    assert execute(out, state=state) == list(range(n))
    assert max(t for t in state["loaded"] if t is not None) == n - 1
    assert "nothing in range" not in state["retired"]
    masked = [t for t in state["loaded"] if t is None]
    if n < stages:  # prologue and drain, no loop
        assert not masked
        return
    (steady,) = [s for s in out if isinstance(s, ops.Loop)]
    peeled = [s for s in out[out.index(steady) + 1:] if isinstance(s, ops.Gemm)]
    assert len(peeled) == n % stages
    assert len(masked) == 2 * max(0, stages - 1 - n % stages)  # A and B of each last-trip step past the last tile


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_a_two_stage_lds_dma_loop_runs_k_phases_and_never_waits_for_everything(n):
    """gfx950, 256x256x64, num_stages=2, copies by LDS DMA: waiting first would wait for the only stage in flight
    (vmcnt(0)). The pass splits each K tile into two phases of K=32 (4 stage buffers of half the size: the same LDS
    bytes); a steady step waits with two phases still in flight, and every phase is computed once, in order, from
    landed data."""
    out = pipeline_loops(k_loop_kernel(n, 2, tile=256), get_arch("gfx950"))
    shared = {b.name: b.shape for b in out.buffers if b.scope == N.SHARED}
    assert shared == {"A_s": (256, BK // 2), "B_s": (BK // 2, 256)}
    assert execute(out.body) == list(range(2 * n))
    copies = [s for s in N.walk(out.body) if isinstance(s, ops.AsyncCopy)]
    assert {s.stage for s in copies} == set(range(min(4, 2 * n)))
    if 2 * n - 3 >= 4:  # steady phases (2n - 4 + 1) fill an unrolled trip of 4: there is a loop
        assert [w.pending for w in _steady_loop(out).body if isinstance(w, ops.WaitGroup)] == [2] * 4


def test_a_ragged_k_phase_wholly_past_k_is_not_run():
    """K = 100 in 64-wide tiles is 2 tiles and 4 phases of 32; the last phase starts at 96 < 100 and runs, but with
    K = 90 it starts past K: 3 phases are copied and computed."""
    for K, phases in ((100, 4), (90, 3)):
        out = pipeline_loops(k_loop_kernel(2, 2, tile=256, K=K), get_arch("gfx950"))
        assert execute(out.body) == list(range(phases))


def test_register_staged_copies_wait_first_unsplit():
    """Copies staged in VGPRs (gfx942's path) keep the one-barrier step at num_stages=2, unsplit: its vmcnt(0) waits
    for loads issued a whole K step earlier (the pass's docstring gives the timing model's figures)."""
    out = pipeline_loops(k_loop_kernel(9, 2, tile=256), get_arch("gfx942"), by_dma=lambda buf: False)
    assert {b.shape for b in out.buffers if b.scope == N.SHARED} == {(256, BK), (BK, 256)}
    kinds = [type(s).__name__ for s in _steady_loop(out).body if not isinstance(s, ops.AsyncCopy)]
    assert kinds == ["WaitGroup", "CommitGroup", "Gemm"] * 2
    assert execute(out.body) == list(range(9))


@pytest.mark.parametrize("layout", ["NK", "KN"], ids=["NT", "NN"])
@pytest.mark.parametrize("threads", [256, 512])
def test_the_256_tile_two_stage_lds_dma_loop_never_waits_for_every_load(threads, layout):
    """Issue 7's loop (256x256x64 bf16, num_stages=2, gfx950): no s_waitcnt vmcnt(0) in the steady K loop (K phases),
    at 4 and at 8 waves."""
    A, B, _, C = inputs(256, 256, 64 * 8, torch.bfloat16, layout == "NK", False, seed=3)
    asm = kernels.gemm.compile(A, B, C, arch="gfx950", block_M=256, block_N=256, block_K=64, threads=threads,
                               num_stages=2, transpose_B=layout == "NK").asm
    lines = asm.splitlines()
    waits = [lines[i] for i in _loop_lines(asm) if lines[i].strip().startswith("s_waitcnt")]
    assert any("vmcnt" in w for w in waits) and not [w for w in waits if "vmcnt(0)" in w]


@pytest.mark.parametrize("layout", ["NK", "KN"], ids=["NT", "NN"])
def test_the_prologue_copies_reuse_the_loops_voffsets(layout):
    """The prologue's LDS-DMA copies (stages 0..2 of the K phases) address their slots with the VGPRs the steady
    loop's copies use, the K offset in soffset: no per-slot V# and swizzled voffset rebuilt before the loop."""
    A, B, _, C = inputs(256, 256, 64 * 8, torch.bfloat16, layout == "NK", False, seed=3)
    asm = kernels.gemm.compile(A, B, C, arch="gfx950", block_M=256, block_N=256, block_K=64, num_stages=2,
                               transpose_B=layout == "NK").asm
    lines = [ln.split("//")[0].strip() for ln in asm.splitlines()]
    loop = set(_loop_lines(asm))
    head = min(loop)

    def voffsets(rows):
        return {lines[i].split()[1].rstrip(",") for i in rows if lines[i].startswith("buffer_load") and
                lines[i].endswith(" lds")}

    before = voffsets(range(head))
    assert len([i for i in range(head) if lines[i].startswith("buffer_load")]) == 3 * 8  # 3 phases x 8 slots
    assert before and before <= voffsets(loop)


def _tile_loop(tile: int, stages: int) -> ops.Loop:
    """The K loop of a tile x tile x BK bf16 GEMM (only its gemm matters to `covers_round_trip`)."""
    bf16 = as_dtype("bfloat16")
    A_s = N.Buffer("A_s", N.SHARED, bf16, (tile, BK))
    B_s = N.Buffer("B_s", N.SHARED, bf16, (BK, tile))
    acc = N.Buffer("acc", N.FRAGMENT, as_dtype("float32"), (tile, tile))
    return ops.Loop(sympy.Symbol("k", integer=True, nonnegative=True), 4, stages, [ops.Gemm(A_s, B_s, acc)])


@pytest.mark.parametrize("tile, stages, arch, waits_first", [
    (256, 2, "gfx950", True),  # 2048 MFMA clk a step (4096 FLOP/clk/CU) against a ~1000 clk round trip
    (128, 2, "gfx950", False),  # 512 clk: the loop is latency-bound, it issues first
    (128, 3, "gfx950", True),  # 2 x 512
    (128, 2, "gfx942", True),  # 1024 clk at 2048 FLOP/clk/CU against 500
])
def test_a_step_waits_first_where_its_mfma_work_covers_the_round_trip(tile, stages, arch, waits_first):
    """S18's latency test decides the order of a steady step (pipelining.py): (S-1) x the step's MFMA clk on a CU
    against the arch's loaded round trip; the hand-computed figures are in the parameters' comments."""
    assert covers_round_trip(_tile_loop(tile, stages), get_arch(arch)) == waits_first


# ---- pipelined GEMMs on the emulator ----------------------------------------------------------------------------
# Correctness of every GEMM case at num_stages 2 and 3: tests/test_gemm.py (test_pipelined_gemm_matches_torch);
# here, the copy paths each pipelined config must take (LDS DMA, transposing reads, register staging).
# ragged: N = 260, rows of B (K, N) are 520 bytes, not whole 16-byte runs (register-staged copies); ragged8: the
# same with N = 264, so B (K, N) is copied by LDS DMA on gfx950 too; narrow: ragged M, N, K in two 256x256 blocks
SMALL = {"ragged": (300, 260, 336), "ragged8": (300, 264, 336), "row": (1, 300, 200), "one_k_tile": (130, 128, 64),
         "narrow": (300, 130, 336)}
# (arch, dtype, B layout, tile, threads, shape, epilogue, num_stages)
CASES = [
    ("gfx942", "bf16", "KN", "64x64x32", 256, "ragged", False, 3),
    ("gfx942", "f16", "NK", "64x64x32", 256, "row", True, 2),
    ("gfx942", "f16", "KN", "128x128x64", 256, "ragged", True, 2),
    ("gfx942", "bf16", "NK", "128x128x64", 256, "one_k_tile", False, 2),
    ("gfx942", "bf16", "KN", "256x256x64", 256, "narrow", True, 2),  # one LDS buffer, the next stage in VGPRs
    ("gfx942", "f16", "NK", "256x256x64", 256, "narrow", False, 2),
    ("gfx942", "bf16", "KN", "256x256x64", 512, "narrow", True, 2),  # 8 waves: staging registers take turns
    ("gfx950", "bf16", "NK", "256x256x64", 256, "ragged", True, 2),
    ("gfx950", "f16", "KN", "256x256x64", 512, "ragged", False, 2),
    ("gfx950", "bf16", "KN", "128x128x64", 256, "ragged", True, 3),
    ("gfx950", "bf16", "KN", "256x256x64", 256, "narrow", False, 2),  # B (K, N) with rows of 260 bytes: register-staged
    ("gfx950", "f16", "NK", "128x128x64", 256, "one_k_tile", False, 3),
    ("gfx950", "f16", "NK", "64x64x32", 256, "ragged", False, 3),
    ("gfx950", "bf16", "KN", "64x64x32", 256, "row", True, 2),
    ("gfx950", "bf16", "KN", "128x128x64", 256, "ragged8", True, 2),
    ("gfx950", "f16", "KN", "64x64x32", 256, "ragged8", False, 3),
    # 512 threads, 256 runs per copy: half the waves copy nothing (EXEC-masked); the address values computed under
    # that mask must not be reused by the gemm's reads (they once were: rows 32-63 silently wrong)
    ("gfx942", "bf16", "KN", "64x64x32", 512, "ragged", False, 2),
    ("gfx950", "bf16", "NK", "64x64x32", 512, "ragged8", True, 2),
]


def _case_id(case):
    arch, dt, layout, tile, threads, shape, epi, stages = case
    return f"{arch}-{dt}-B{layout}-{tile}-t{threads}-{shape}-{'bias_relu' if epi else 'plain'}-S{stages}"


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_pipelined_gemm_takes_its_copy_path(case):
    arch, dt, layout, tile, threads, shape, epilogue, stages = case
    transpose_B = layout == "NK"
    (M, N_, K), (bm, bn, bk) = SMALL[shape], TILES[tile]
    A, B, bias, C = inputs(M, N_, K, DTYPES[dt], transpose_B, epilogue, seed=CASES.index(case))
    stats = launch(A, B, bias, C, arch, block_M=bm, block_N=bn, block_K=bk, threads=threads,
                   transpose_B=transpose_B, num_stages=stages)
    assert_close(C, reference(A, B, bias, transpose_B), K, _case_id(case))
    dma = stats.by_mnemonic.get("buffer_load_dwordx4", 0) and stats.bytes_global_to_lds
    whole_runs = all(row * A.element_size() % 16 == 0 for row in (K, K if transpose_B else N_))
    if arch == "gfx950" and whole_runs:  # rows of whole 16-byte runs: every operand byte by LDS DMA, B (K, N) too
        assert dma and "ds_write_b128" not in stats.by_mnemonic and "ds_write_b16" not in stats.by_mnemonic
    if arch == "gfx950":  # B (K, N) stays (K, N) in LDS and is read transposing
        assert bool(stats.by_mnemonic.get("ds_read_b64_tr_b16")) == (not transpose_B)
    if arch == "gfx942":  # no 16-byte LDS DMA there: register-staged copies
        assert not stats.bytes_global_to_lds


def test_lds_budget_error_names_bytes_and_what_fits():
    A, B, _, C = inputs(256, 256, 256, torch.bfloat16, True, False, seed=1)
    with pytest.raises(ResourceError) as err:  # LDS DMA writes every stage into its own LDS buffer
        kernels.gemm.compile(A, B, C, arch="gfx950", block_M=256, block_N=256, block_K=64, num_stages=3,
                             transpose_B=True)
    msg = str(err.value)
    assert "needs 196608 bytes" in msg and "gfx950 has 163840" in msg
    assert "num_stages=2 fits" in msg and "block_K=32 with num_stages=3 fits" in msg
    kernels.gemm.compile(A, B, C, arch="gfx950", block_M=256, block_N=256, block_K=32, num_stages=3,
                         transpose_B=True)  # it does


def test_lds_budget_error_of_a_k_phased_loop_names_the_users_tile_and_stages():
    """num_stages=2 on gfx950 runs LDS-DMA loops in K phases of block_K / 2 (4 half stages): an LDS budget error
    still speaks of the block_K and num_stages the user wrote, not of the phases."""
    A, B, _, C = inputs(256, 256, 256, torch.bfloat16, False, False, seed=1)
    with pytest.raises(ResourceError) as err:
        kernels.gemm.compile(A, B, C, arch="gfx950", block_M=256, block_N=256, block_K=128, num_stages=2)
    msg = str(err.value)
    assert "needs 262144 bytes (A_s 2 stages x 65536, B_s 2 stages x 65536)" in msg
    assert "num_stages=1 fits" in msg and "block_K=64 with num_stages=2 fits" in msg


def test_register_staged_stages_share_one_lds_buffer_where_two_do_not_fit():
    """gfx942 256x256x64 at num_stages=2: two LDS buffers of A and B would need 128 KiB of its 64 KiB; the stage
    ahead waits in VGPRs, so one LDS buffer (64 KiB) is what the kernel asks for. B stored (K, N) is transposed in
    registers: v_perm_b32 packs k pairs, ds_write_b128 writes 8 k of one n, no 2-byte ds_write. num_stages=3 keeps
    two stages in VGPRs (64 a stage), which fits once the unrolled loop's three staging sets take turns (lifetime
    holes); num_stages=4 would keep three: a register budget error naming the staging registers, never a spill."""
    A, B, _, C = inputs(256, 256, 256, torch.bfloat16, False, False, seed=1)
    config = dict(arch="gfx942", block_M=256, block_N=256, block_K=64)
    k = kernels.gemm.compile(A, B, C, num_stages=2, **config)
    assert k.metadata["lds_bytes"] == 65536 and "scratch" not in k.asm
    assert "ds_write_b16" not in k.asm and "v_perm_b32" in k.asm
    k3 = kernels.gemm.compile(A, B, C, num_stages=3, **config)
    assert k3.metadata["lds_bytes"] == 65536 and k3.metadata["vgprs"] <= 256 and "scratch" not in k3.asm
    with pytest.raises(ResourceError, match=r"needs \d+ VGPRs, gfx942 has 256 \(live at the peak: .*staging A_s stage"):
        kernels.gemm.compile(A, B, C, num_stages=4, **config)


@pytest.mark.parametrize("layout", ["NK", "KN"])
def test_gfx942_eight_waves_fit_the_256_tile_at_two_stages(layout):
    """512 threads are 8 waves, 2 on each SIMD, which leaves each wave 256 of the SIMD's 512 registers a lane (VGPRs
    up to accum_offset, then AGPRs). The 256x256x64 tile at num_stages=2 keeps the next K step in VGPRs (16 + 16 a
    lane) beside 128 accumulator AGPRs. The loop, unrolled over the two stages, fills one stage's staging registers
    while the other's hold nothing, so the two share registers (lifetime holes, amdgcn/liveness.py): it fits, with
    no scratch (before: 260 / 272 registers, refused). num_stages=3 keeps two K steps ahead: still refused. (The
    default K loop at 8 waves is the ping-pong, tests/test_ping_pong.py; ping_pong=False is this loop in step.)"""
    A, B, _, C = inputs(256, 256, 256, torch.bfloat16, layout == "NK", False, seed=2)
    config = dict(arch="gfx942", block_M=256, block_N=256, block_K=64, threads=512, transpose_B=layout == "NK")
    k = kernels.gemm.compile(A, B, C, num_stages=2, ping_pong=False, **config)
    next_free = int(re.search(r"\.amdhsa_next_free_vgpr (\d+)", k.asm)[1])
    assert k.metadata["agprs"] == 128 and next_free <= 256 and "scratch" not in k.asm
    assert ".private_segment_fixed_size: 0" in k.asm
    with pytest.raises(ResourceError, match=r"512 threads are 8 waves, 2 on each of the CU's 4 SIMDs"):
        kernels.gemm.compile(A, B, C, num_stages=3, **config)


@pytest.mark.parametrize("tile, stages", [("256x256x64", 2), ("128x128x64", 3)])
def test_gfx950_loop_with_B_as_KN_copies_by_lds_dma_only(tile, stages):
    """B (K, N) on gfx950 (the README's default layout): the steady K loop of the `.s` loads both operands by LDS
    DMA as stored (no buffer_load into VGPRs, no ds_write) and reads B with ds_read_b64_tr_b16; with 3 stages the
    wait leaves the next stage's loads in flight (never vmcnt(0)); with 2 the step waits for its stage before it
    issues the next one (pipelining.py), so vmcnt(0) is the exact wait there."""
    (bm, bn, bk) = TILES[tile]
    A, B, _, C = inputs(bm, bn, bk * 8, torch.bfloat16, False, False, seed=3)
    asm = kernels.gemm.compile(A, B, C, arch="gfx950", block_M=bm, block_N=bn, block_K=bk, num_stages=stages).asm
    lines = asm.splitlines()
    loop = [lines[i].split("//")[0].strip() for i in _loop_lines(asm)]
    loads = [ln for ln in loop if ln.startswith(("buffer_load", "global_load"))]
    assert loads and all(ln.endswith(" lds") for ln in loads), loads
    assert not [ln for ln in loop if ln.startswith("ds_write")]
    reads = [ln.split()[0] for ln in loop if ln.startswith("ds_read")]
    # per K step of a wave: one ds_read_b128 per A fragment, two ds_read_b64_tr_b16 per B fragment
    plan = plan_gemm("gfx950", "bf16", bm, bn, bk, 256)
    steps = sum(ln.startswith("v_mfma") for ln in loop) // (plan.k_steps * plan.repeats_M * plan.repeats_N)
    assert reads.count("ds_read_b128") == steps * plan.read_steps * plan.repeats_M
    assert reads.count("ds_read_b64_tr_b16") == steps * plan.read_steps * plan.repeats_N * 2
    assert not [ln for ln in loop if "readfirstlane" in ln]
    assert not [ln for ln in loop if "vmcnt(0)" in ln]


# ---- every wait and barrier of the pipelined loop is needed --------------------------------------------------------
def _loop_lines(asm: str) -> range:
    """Line numbers of the K loop's body: after the loop label, up to its backward branch (the last branch to a
    label above it: a ping-pong loop's wave-group barrier after the loop is skipped by a forward branch)."""
    lines = asm.splitlines()
    for end in reversed([i for i, ln in enumerate(lines) if ln.strip().startswith("s_cbranch")]):
        start = lines.index(f"{lines[end].split()[-1]}:")
        if start < end:
            return range(start + 1, end)
    raise AssertionError("no K loop (a backward s_cbranch) in the assembly")


def _k_loop_kernel(A, B, C, arch, transpose_B):
    """The 256x256x64 GEMM at num_stages=2 where its stage buffers fit the arch's LDS, else at num_stages=1 (the
    stages that fit are the user's choice, and the one they would run)."""
    cfg = dict(arch=arch, block_M=256, block_N=256, block_K=64, transpose_B=transpose_B)
    try:
        return kernels.gemm.compile(A, B, C, num_stages=2, **cfg)
    except ResourceError:
        return kernels.gemm.compile(A, B, C, num_stages=1, **cfg)


def _run_edited(lines, k, arch, args):
    """Assemble the edited `.s` and run it on the emulator with checks on (its output lands in `args`): the name of
    the error the emulator refused it with, or None."""
    from tilegcn.errors import HazardError, RaceError
    from tilegcn.runtime import emulator
    from tilegcn.toolchain import assemble

    module = emulator.load(assemble("\n".join(lines), arch))
    try:
        module.launch(k.metadata["name"], grid=tuple(k.metadata["grid"]), block=tuple(k.metadata["block"]),
                      args=args)
    except (HazardError, RaceError) as err:
        return type(err).__name__
    return None


class PipelinedLoopWaits:
    """The 256x256x64 GEMM (num_stages=2 where it fits) on a K of 64 x 5 (S=2: prologue, two trips of the steady
    loop, two unrolled iterations each: the back-edge, drain), its inputs, its torch reference and the line numbers
    of every s_waitcnt / s_barrier of its K loop: what the sampled test and bench/pipelined_waits.py delete."""

    def __init__(self, arch: str, layout: str):
        self.arch, self.transpose_B = arch, layout == "NK"
        self.K = 64 * 5
        self.A, self.B, _, self.C = inputs(256, 256, self.K, torch.bfloat16, self.transpose_B, False, seed=7)
        self.kernel = _k_loop_kernel(self.A, self.B, self.C, arch, self.transpose_B)
        self.lines = self.kernel.asm.splitlines()
        self.ref = reference(self.A, self.B, None, self.transpose_B)
        self.targets = [i for i in _loop_lines(self.kernel.asm)
                        if self.lines[i].strip().startswith(("s_waitcnt", "s_barrier"))]

    def describe(self, i: int) -> str:
        return f"line {i}: {self.lines[i].split('//')[0].strip()}"

    def delete(self, i: int) -> str:
        """Run the kernel with line i deleted: "caught" (HazardError / RaceError), "redundant" (the right result
        without it: the pass should stop emitting it) or "unchecked" (a wrong result and no error: a gap in the
        emulator's checks)."""
        out = torch.full_like(self.C, float("nan"))
        refused = _run_edited(self.lines[:i] + self.lines[i + 1:], self.kernel, self.arch, [self.A, self.B, out])
        release_emulator_programs()  # the edited code object never runs again (~8-15 MB of decoded program each)
        if refused:
            return "caught"
        return "unchecked" if bool(outside_tolerance(out, self.ref, self.K).any()) else "redundant"


def sample_of_waits(loop: PipelinedLoopWaits, every: int, extra: int, seed: int) -> list[int]:
    """A deterministic sample of the loop's wait lines: every `every`-th one, the first vmcnt wait and the first
    s_barrier (both kinds are always tried), and `extra` more drawn by random.Random(seed)."""
    targets = loop.targets
    chosen = set(targets[::every])
    chosen.add(next(i for i in targets if "vmcnt" in loop.lines[i]))
    chosen.add(next(i for i in targets if loop.lines[i].strip().startswith("s_barrier")))
    rest = [i for i in targets if i not in chosen]
    chosen.update(random.Random(seed).sample(rest, min(extra, len(rest))))
    return sorted(chosen)


# The sample's seed: fixed so that a run repeats; TILEGCN_TEST_SEED=<n> draws another sample.
WAIT_SAMPLE_SEED = int(os.environ.get("TILEGCN_TEST_SEED", "2024"))


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["NK", "KN"], ids=["NT", "NN"])
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_deleting_a_sample_of_the_pipelined_loops_waits_is_caught(arch, layout):
    """Delete each sampled s_waitcnt / s_barrier of the 256x256x64 K loop in turn, reassemble and run: the emulator
    must refuse every deletion with a HazardError / RaceError. A deletion it accepts with the right result names a
    redundant wait; one that silently gives a wrong result is a gap in the emulator's checks. Both fail the test,
    naming the line. Every wait of every parameter: `python bench/pipelined_waits.py`."""
    loop = PipelinedLoopWaits(arch, layout)
    assert any("vmcnt" in loop.lines[i] for i in loop.targets)
    assert any(loop.lines[i].strip().startswith("s_barrier") for i in loop.targets)
    sample = sample_of_waits(loop, every=16, extra=2, seed=WAIT_SAMPLE_SEED)
    print(f"TILEGCN_TEST_SEED={WAIT_SAMPLE_SEED}: deleting {len(sample)} of the loop's {len(loop.targets)} waits")
    outcomes = {i: loop.delete(i) for i in sample}
    where = f"{len(sample)} of {len(loop.targets)} waits tried (TILEGCN_TEST_SEED={WAIT_SAMPLE_SEED})"
    redundant = [loop.describe(i) for i, outcome in outcomes.items() if outcome == "redundant"]
    unchecked = [loop.describe(i) for i, outcome in outcomes.items() if outcome == "unchecked"]
    assert not redundant, f"{where}; redundant (right result without them): {redundant}"
    assert not unchecked, f"{where}; wrong result with no HazardError/RaceError: {unchecked}"


def test_a_pipelined_kernel_is_a_disk_cache_hit_later(recwarn):
    """kernel.ir holds the traced IR and then the pipelined one; the entry check must accept its own entry
    (it once rebuilt every pipelined kernel in every new process, with a CacheWarning)."""
    a = torch.randn(128, 256, dtype=torch.bfloat16)
    b = torch.randn(256, 128, dtype=torch.bfloat16)
    c = torch.empty(128, 128, dtype=torch.bfloat16)
    first = kernels.gemm.compile(a, b, c, num_stages=2, arch="gfx950")
    assert "after the tile-IR passes" in first.ir
    kernels.gemm.cache_clear()  # forget this process's kernels: the next compile goes to the disk cache
    again = kernels.gemm.compile(a, b, c, num_stages=2, arch="gfx950")
    assert kernels.gemm.cache_stats.disk_hits == 1 and kernels.gemm.cache_stats.compiles == 0
    assert again.asm == first.asm
    assert not [w for w in recwarn.list if "cache entry" in str(w.message)]


# ---- gfx942's 4-byte LDS DMA: tilegcn.jit(copy="lds_dma") -------------------------------------------------------
gemm_by_dma = tilegcn.jit(kernels.gemm.fn, copy="lds_dma")


@pytest.mark.parametrize("shape, dtype, tile, stages", [
    ((256, 256, 256), "bf16", "128x128x64", 2),  # A + B stages = 64 KiB: gfx942's whole LDS
    ((200, 150, 136), "f16", "128x128x64", 2),  # partial tiles in M, N and K
    ((130, 70, 100), "bf16", "64x64x32", 3),  # K rows of 200 bytes: 8-byte aligned runs, still 4-byte pieces
], ids=["256^3-bf16", "ragged-f16", "K100-bf16-3stages"])
def test_gfx942_lds_dma_copy_matches_torch(shape, dtype, tile, stages):
    """copy="lds_dma" on gfx942 (NT: both operands K-major) copies by buffer_load_dword ... lds, 4 bytes a lane,
    with no register staging, and computes A @ B.T within tolerance."""
    bm, bn, bk = TILES[tile]
    A, B, _, C = inputs(*shape, DTYPES[dtype], True, False, seed=3)
    cfg = dict(arch="gfx942", block_M=bm, block_N=bn, block_K=bk, transpose_B=True, num_stages=stages)
    asm = gemm_by_dma.compile(A, B, C, **cfg).asm
    dma = [ln for ln in asm.splitlines() if ln.strip().startswith("buffer_load_dword ") and " lds" in ln]
    assert dma and "ds_write" not in asm and "buffer_load_dwordx4" not in asm
    gemm_by_dma(A, B, C, **cfg)
    assert_close(C, reference(A, B, None, True), shape[2], f"gfx942 lds_dma {shape} {dtype} {tile} x{stages}")


def _gemm_args(transpose_B):
    A, B, _, C = inputs(128, 128, 128, torch.bfloat16, transpose_B, False, seed=1)
    return A, B, C


def test_copy_option_errors_name_the_cause():
    with pytest.raises(ArgumentError, match="unknown copy='dma'.*'registers'"):
        tilegcn.jit(kernels.gemm.fn, copy="dma")
    with pytest.raises(CompileError, match="copy='lds_dma': LDS DMA cannot transpose: operand B"):
        gemm_by_dma.compile(*_gemm_args(False), arch="gfx942", num_stages=2)  # B (K, N): gfx942 cannot read it
    with pytest.raises(CompileError, match="not pipelined"):
        gemm_by_dma.compile(*_gemm_args(True), arch="gfx942", transpose_B=True, num_stages=1)
    with pytest.raises(ResourceError, match="LDS budget exceeded: needs 131072 bytes"):  # a buffer per stage
        gemm_by_dma.compile(*_gemm_args(True), arch="gfx942", transpose_B=True, num_stages=2, block_M=256,
                            block_N=256)


def test_copy_registers_keeps_gfx950_off_lds_dma():
    asm = tilegcn.jit(kernels.gemm.fn, copy="registers").compile(*_gemm_args(True), arch="gfx950", transpose_B=True,
                                                                 num_stages=2).asm
    assert " lds" not in asm.replace("offen lds", "").replace("ds_", "") and "offen lds" not in asm
    assert "ds_write_b128" in asm
