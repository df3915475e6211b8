"""The ping-pong K loop (passes/pipelining.py `_pipeline_ping_pong`): an 8-wave GEMM whose two wave groups run one
barrier apart, one group's MFMAs beside the other's LDS reads and copies (gfx950: LDS DMA into four K-phase stages;
gfx942: copies staged through VGPRs into two K-phase LDS slots). On the emulated device against torch
(the emulator refuses a read of LDS still in flight and cross-wave races inside a barrier epoch, so a group offset
that broke the stage hand-over would fail here), the user's choice through T.Pipelined's annotations, and the
timing model's reason for making it the default at 8 waves on both arches.
"""
from __future__ import annotations

import re

import pytest
import torch

import kernels
from test_gemm import assert_close, inputs, reference
from tilegcn.errors import CompileError

PING_PONG_MARK = "wave group 1's extra barrier"  # the comment on the second group's offset barrier
CONFIG = dict(block_M=256, block_N=256, block_K=64, threads=512, num_stages=2)


@pytest.mark.parametrize("layout", ["NN", "NT"])
def test_ping_pong_gemm_matches_torch_with_a_ragged_k(layout):
    """K = 200: 7 K phases of 32, so one trip of the unrolled loop (4 phases, copies past the end masked) and 3
    remainder steps, the last phase partly past K; the same result as the loop with both groups in step."""
    transpose_B = layout == "NT"
    A, B, _, C = inputs(256, 256, 200, torch.bfloat16, transpose_B, False, seed=11)
    kernel = kernels.gemm.compile(A, B, C, arch="gfx950", transpose_B=transpose_B, **CONFIG)
    assert PING_PONG_MARK in kernel.asm  # gfx950's default at 8 waves
    kernels.gemm(A, B, C, arch="gfx950", transpose_B=transpose_B, **CONFIG)
    assert_close(C, reference(A, B, None, transpose_B), 200, f"ping-pong {layout}")
    in_step = torch.full_like(C, float("nan"))
    kernels.gemm(A, B, in_step, arch="gfx950", transpose_B=transpose_B, ping_pong=False, **CONFIG)
    assert torch.equal(C, in_step)  # the same MFMAs in the same order per element


def test_ping_pong_false_keeps_the_groups_in_step():
    A, B, _, C = inputs(256, 256, 256, torch.bfloat16, False, False, seed=1)
    asm = kernels.gemm.compile(A, B, C, arch="gfx950", ping_pong=False, **CONFIG).asm
    assert PING_PONG_MARK not in asm and "s_setprio" not in asm


def test_ping_pong_true_is_refused_beyond_num_stages_2():
    """gfx942 at num_stages=3 keeps two K steps in staging VGPRs: no ping-pong, said at the user's loop."""
    A, B, _, C = inputs(256, 256, 256, torch.bfloat16, False, False, seed=1)
    with pytest.raises(CompileError, match=r"ping_pong.*num_stages=2.*drop the annotation") as err:
        kernels.gemm.compile(A, B, C, arch="gfx942", ping_pong=True, **{**CONFIG, "threads": 256, "num_stages": 3})
    assert "kernels.py" in str(err.value)  # the T.Pipelined line


@pytest.mark.parametrize("layout", ["NN", "NT"])
def test_gfx942_register_staged_ping_pong_matches_torch_and_fits(layout):
    """gfx942's 8-wave 256x256x64 GEMM at num_stages=2 runs as a ping-pong by default (copies staged through
    VGPRs, two K-phase LDS slots): K = 160 is 5 phases, two trips of the loop (the last one's copies past the end
    masked) and one step after it; 0 scratch, 256 registers a wave at most (2 waves a SIMD), and the same result
    as the loop with its groups in step."""
    transpose_B = layout == "NT"
    A, B, _, C = inputs(256, 256, 160, torch.bfloat16, transpose_B, False, seed=5)
    kernel = kernels.gemm.compile(A, B, C, arch="gfx942", transpose_B=transpose_B, **CONFIG)
    assert PING_PONG_MARK in kernel.asm
    fields = r"\.(vgpr_count|agpr_count|private_segment_fixed_size): (\d+)"
    meta = {k: int(v) for k, v in re.findall(fields, kernel.asm)}
    assert meta["private_segment_fixed_size"] == 0 and meta["vgpr_count"] <= 256  # (VGPRs + AGPRs on gfx942)
    kernels.gemm(A, B, C, arch="gfx942", transpose_B=transpose_B, **CONFIG)
    assert_close(C, reference(A, B, None, transpose_B), 160, f"gfx942 ping-pong {layout}")
    in_step = torch.full_like(C, float("nan"))
    kernels.gemm(A, B, in_step, arch="gfx942", transpose_B=transpose_B, ping_pong=False, **CONFIG)
    assert torch.equal(C, in_step)


def test_an_unknown_pipelined_annotation_is_refused():
    import tilegcn
    from tilegcn import language as T

    @tilegcn.jit
    def copy_loop(A, B):
        with T.Kernel(1, threads=64):
            for k in T.Pipelined(2, num_stages=1, annotations={"order": [0]}):
                pass

    a = torch.zeros(4, dtype=torch.float32)
    with pytest.raises(CompileError, match="only the key 'ping_pong'"):
        copy_loop.compile(a, a, arch="gfx950")


@pytest.mark.parametrize("arch, device", [("gfx950", "MI355X"), ("gfx942", "MI300X")])
def test_the_model_rates_the_ping_pong_above_the_loop_in_step(arch, device):
    """2048^3 bf16 (one round of 64 workgroups): the ping-pong keeps one wave group's MFMAs running while the other
    passes its barrier and reads; in step, both groups wait at each barrier with the matrix pipe idle. (8192^3,
    bench/gemm_vs_foreign.py: MI355X 1.094 M against 1.371 M cycles, MI300X 2.151 M against 2.824 M.)"""
    a = torch.zeros(2048, 2048, dtype=torch.bfloat16)
    est = {pp: kernels.gemm.compile(a, a, a, arch=arch, ping_pong=pp, **CONFIG)
           .estimate(device=device, args=[a, a.clone(), a.clone()]) for pp in (None, False)}
    assert est[None].cycles < 0.95 * est[False].cycles  # measured 81.3 k against 94.2 k
    assert est[None].breakdown["mfma_busy_pct"] > est[False].breakdown["mfma_busy_pct"] + 5  # 83.2 against 71.6 %


def test_an_arch_that_raises_the_priority_wraps_each_mfma_cluster_and_still_computes(monkeypatch):
    """gemm_ping_pong_prio is 0 on both arches (the model rates s_setprio slower); an arch table that sets it gets
    `s_setprio` around every MFMA cluster of the loop, as HipKittens writes it, and the same result."""
    import dataclasses

    import tilegcn
    from tilegcn.amdgcn import arch as arch_table

    monkeypatch.setitem(arch_table.ARCHES, "gfx950",
                        dataclasses.replace(arch_table.ARCHES["gfx950"], gemm_ping_pong_prio=1))
    fresh = tilegcn.jit(kernels.gemm.fn)  # no in-memory specialisation compiled with the real table
    A, B, _, C = inputs(256, 256, 160, torch.bfloat16, False, False, seed=2)
    lines = [ln.split("//")[0].strip() for ln in fresh.compile(A, B, C, arch="gfx950", **CONFIG).asm.splitlines()]
    raised = [i for i, ln in enumerate(lines) if ln == "s_setprio 1"]
    assert len(raised) == 5  # 5 K phases: 4 in the loop's trip, 1 after it
    for i in raised:  # MFMAs, then the priority back down, then the barrier that ends the cluster
        end = lines.index("s_setprio 0", i)
        assert all(ln.startswith("v_mfma") or ln.startswith("s_nop") for ln in lines[i + 1:end])
        assert lines[end + 1] == "s_barrier"
    fresh(A, B, C, arch="gfx950", **CONFIG)
    assert_close(C, reference(A, B, None, False), 160, "ping-pong at raised priority")
