"""The timing model's rules that foreign kernels showed wrong, each against its outside source: transcendental ops
(LLVM's gfx942/gfx950 scheduling model, read with llvm-mca), VALU co-execution under an MFMA (AMD's Matrix
Instruction Calculator, S9), the VALU hold after a gfx950 MFMA (S33), gfx950's ds_read_b128 phases (S21p), the LDS
FIFO of a SIMD pair and the MI355X clock (S19). aiter's FAv3 attention overlaps its softmax (v_exp_f32,
v_pk_mul_f32) with its MFMAs; the Gluon GEMMs read LDS in padded rows (docs/timing.md, foreign kernels)."""
import os
import re
import subprocess
import sys

import pytest
import torch

from tilegcn.amdgcn.arch import TIMING
from tilegcn.perfmodel import estimate
from tilegcn.perfmodel.ops import coexecutes

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "asm"))
from emukit import module  # noqa: E402

DEVICE = {"gfx942": "MI300X", "gfx950": "MI355X"}


def _cycles(lines, arch):
    mod = module("\n".join(lines + ["s_endpgm"]), arch=arch, vgprs=96)
    return estimate(mod, "k", (1, 1, 1), (64, 1, 1), [torch.zeros(64, dtype=torch.int32)],
                    device=DEVICE[arch]).cycles


def _mca(arch, mnemonic_line):
    """(latency, reciprocal throughput) llvm-mca gives the instruction, in LLVM's quad-cycles; None without it."""
    from tilegcn.toolchain import find_llvm

    mc = find_llvm().mc  # the llvm-mca of the LLVM tilegcn assembles with (an older one may not know gfx950)
    tool = os.path.join(os.path.dirname(mc), os.path.basename(mc).replace("llvm-mc", "llvm-mca"))
    if not os.path.exists(tool):
        return None
    out = subprocess.run([tool, "-mtriple=amdgcn", f"-mcpu={arch}", "-iterations=1"], input=mnemonic_line + "\n",
                         capture_output=True, text=True).stdout
    m = re.search(r"^\s*\d+\s+(\d+)\s+([\d.]+)\s.*v_exp_f32", out, re.M)
    assert m, f"llvm-mca printed no instruction info:\n{out}"
    return int(m[1]), float(m[2])


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_a_transcendental_takes_one_issue_slot_and_its_reader_waits_for_the_result(arch):
    t = TIMING[arch]
    mca = _mca(arch, "v_exp_f32 v1, v2")
    if mca is not None:  # the oracle: LLVM holds the VALU one quad-cycle, the result comes 4 quad-cycles later
        assert (4 * mca[0], 4 * mca[1]) == (t.trans_clk, t.issue_slot_clk)
    independent = {n: _cycles([f"v_exp_f32 v{i}, v{40 + i}" for i in range(n)], arch) for n in (4, 8)}
    chain = {n: _cycles(["v_exp_f32 v1, v1"] * n, arch) for n in (4, 8)}
    assert independent[8] - independent[4] == 4 * t.issue_slot_clk
    assert chain[8] - chain[4] == 4 * t.trans_clk


# S9 (ROCm/amd_matrix_instruction_calculator 2ef9189, CDNA3 table): the MFMAs that cannot co-execute with VALU,
# and some that can
CDNA3_NO_COEXEC = ["v_mfma_f32_32x32x1_2b_f32", "v_mfma_f32_16x16x1_4b_f32", "v_mfma_f32_4x4x1_16b_f32",
                   "v_mfma_f32_32x32x2_f32", "v_mfma_f32_16x16x4_f32", "v_mfma_f64_16x16x4_f64",
                   "v_mfma_f64_4x4x4_4b_f64"]
CDNA3_COEXEC = ["v_mfma_f32_16x16x8_xf32", "v_mfma_f32_32x32x8_bf16", "v_mfma_f32_16x16x16_f16",
                "v_mfma_i32_32x32x16_i8", "v_mfma_f32_32x32x16_fp8_fp8", "v_mfma_f32_32x32x4_2b_bf16"]


def test_mfmas_co_execute_with_valu_as_the_matrix_instruction_calculator_says():
    assert not any(coexecutes(name) for name in CDNA3_NO_COEXEC)
    assert all(coexecutes(name) for name in CDNA3_COEXEC)


def _mfmas_with_valu(mfma, a, n_valu):
    out = []
    for k in range(4):
        out.append(f"{mfma} v[{16 * (k % 2)}:{16 * (k % 2) + 15}], {a}, {a}, v[{16 * (k % 2)}:{16 * (k % 2) + 15}]")
        out += [f"v_add_f32 v{60 + j}, v{70 + j}, v{80 + j}" for j in range(n_valu)]
    return out


def test_valu_ops_issue_under_a_bf16_mfma_but_wait_out_an_f32_one():
    # gfx942: v_mfma_f32_32x32x8_bf16 runs 32 clk; six independent VALU ops (24 clk of issue) fit under it
    bf16 = "v_mfma_f32_32x32x8_bf16"
    assert _cycles(_mfmas_with_valu(bf16, "v[32:33]", 6), "gfx942") == _cycles(_mfmas_with_valu(bf16, "v[32:33]", 0),
                                                                               "gfx942")
    # v_mfma_f32_32x32x2_f32: 16 passes (64 clk); VALU ops wait until 2 slots past its end (S33), so each MFMA and
    # its six VALU ops take 18 + 6 slots instead of 16: 4 x 32 clk more (the issue slots' phase aside)
    f32 = "v_mfma_f32_32x32x2_f32"
    slower = _cycles(_mfmas_with_valu(f32, "v32", 6), "gfx942") - _cycles(_mfmas_with_valu(f32, "v32", 0), "gfx942")
    assert 4 * 32 <= slower <= 4 * 32 + 4


def test_a_gfx950_mfma_holds_packed_f32_ops_past_its_end():
    # S33: after an MFMA whose A source is 16 bytes a lane, a VALU op issues 2 slots on, a packed-f32 op
    # passes + 3 slots on (v_mfma_f32_32x32x16_bf16: 8 passes, 32 clk)
    mfma = "v_mfma_f32_32x32x16_bf16 v[16:31], v[0:3], v[4:7], v[16:31]"
    plain = _cycles([mfma, "v_mul_f32 v40, v41, v42"], "gfx950")
    packed = _cycles([mfma, "v_pk_mul_f32 v[40:41], v[42:43], v[44:45]"], "gfx950")
    # the wave ends when the MFMA has left the pipe (32 clk) or s_endpgm's slot, after its last op's, has passed
    assert packed - plain == (8 + 3) * 4 + 2 * 4 - 32


# ---- LDS and vector memory paths ---------------------------------------------------------------------------------
def _last_issue(events, wave, prefix):
    return max(e["ts"] for e in events if e.get("ph") == "X" and e.get("tid") == wave and e["name"].startswith(prefix))


def test_the_two_simds_of_a_pair_share_the_lds_fifo_in_turn(tmp_path):
    # two waves, on SIMDs 0 and 1 (one LDS port), each with 32 conflict-free ds_read_b128: the FIFO hands its entries
    # out in arrival order, so both finish their reads together instead of SIMD 0 draining its reads first
    body = "\n".join(["v_and_b32 v1, 63, v0", "v_lshlrev_b32 v1, 4, v1"] + ["ds_read_b128 v[2:5], v1"] * 32
                     + ["s_waitcnt lgkmcnt(0)", "s_endpgm"])
    mod = module(body, arch="gfx950", vgprs=16, lds=1024, max_threads=128)
    path = tmp_path / "trace.json"
    estimate(mod, "k", (1, 1, 1), (128, 1, 1), [torch.zeros(16, dtype=torch.int32)], device="MI355X", trace=str(path))
    events = __import__("json").loads(path.read_text())["traceEvents"]
    per_read = 1024 / TIMING["gfx950"].lds_port_read_bytes_per_clk  # one wave's b128 read on the port
    assert abs(_last_issue(events, 0, "ds@") - _last_issue(events, 1, "ds@")) <= 2 * per_read


def _loads(n):
    lines = ["s_load_dwordx2 s[4:5], s[0:1], 0", "v_lshlrev_b32 v1, 4, v0", "s_waitcnt lgkmcnt(0)",
             "s_mov_b32 s8, s4", "s_and_b32 s9, s5, 0xffff", "s_mov_b32 s10, 0x7fffffff", "s_mov_b32 s11, 0x20000"]
    lines += [f"buffer_load_dwordx4 v[2:5], v1, s[8:11], 0 offen offset:{1024 * (k % 4)}" for k in range(n)]
    return "\n".join(lines + ["s_waitcnt vmcnt(0)", "s_endpgm"])


def test_gfx950_b128_reads_are_served_in_the_phases_hipkittens_measured():
    from tilegcn.amdgcn.arch import get_arch
    from tilegcn.runtime.emulator.stats import bank_conflicts

    arch = get_arch("gfx950")

    def conflicts(a, b):
        """Lane b reads the next dword of lane a's bank (256 B on); every other lane a bank of its own."""
        addr = torch.arange(64, dtype=torch.int64) * 16
        addr[b] = addr[a] + 256
        return bank_conflicts(addr.view(1, 64), None, 16, arch.lds_banks, arch.lds_read_phases[16])

    # S21p (MI355X, rocprofv3 bank-conflict counts for each pair of lanes): lanes 0 and 12 share a phase, lanes 0
    # and 4 do not (runs of 16 consecutive lanes would put 0 and 4 together)
    assert conflicts(0, 12) == 1 and conflicts(0, 4) == 0 and conflicts(4, 8) == 1 and conflicts(0, 32) == 0


def test_the_mi355x_clock_rises_as_the_simds_idle():
    t = TIMING["gfx950"]
    assert t.clock_at(t.clock_busy_ref) == t.clock_hz
    # S19's a16w16 table: 57 % MFMA efficiency (v4) ran at 1.86 GHz, 99 % (v8) at 1.55 GHz
    assert t.clock_at(0.99) < t.clock_hz < t.clock_at(0.57) <= t.peak_clock_hz
    assert TIMING["gfx942"].clock_at(0.5) == TIMING["gfx942"].clock_hz  # no such data for MI300X: one clock
    # a kernel of loads alone leaves the MFMA pipes idle: its seconds are at the clock of an idle SIMD
    est = estimate(module(_loads(4), arch="gfx950", vgprs=8, sgprs=16), "k", (1, 1, 1), (64, 1, 1),
                   [torch.zeros(4096, dtype=torch.int32)], device="MI355X")
    assert est.breakdown["mfma_busy_pct"] == 0 and est.clock_hz == t.clock_at(est.breakdown["valu_busy_pct"] / 100)
    assert est.clock_hz > t.clock_hz


def test_the_timing_model_charges_gfx950_b128_reads_in_the_measured_phases():
    # 32 ds_read_b128 of one wave, lane i at 16 i, except lane `moved` at lane 0's bank one row on (where lane 16
    # reads): lane 12, in lane 0's phase (S21p), costs each read a conflict cycle; lane 4, in lane 16's phase, none
    # (a broadcast), as if no lane had moved (lane 99)
    def cycles(moved):
        body = "\n".join(["v_and_b32 v1, 63, v0", "v_lshlrev_b32 v1, 4, v1", f"v_cmp_eq_u32 vcc, {moved}, v0",
                          "v_mov_b32 v6, 0x100", "v_cndmask_b32 v1, v1, v6, vcc"] + ["ds_read_b128 v[2:5], v1"] * 32
                         + ["s_waitcnt lgkmcnt(0)", "s_endpgm"])
        mod = module(body, arch="gfx950", vgprs=16, lds=1024)
        return estimate(mod, "k", (1, 1, 1), (64, 1, 1), [torch.zeros(16, dtype=torch.int32)], device="MI355X").cycles

    assert cycles(4) == cycles(99) < cycles(12)
