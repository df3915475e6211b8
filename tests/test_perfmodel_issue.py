"""The timing model's issue rules for VALU work beside MFMAs, each against its outside source: transcendental ops
(LLVM's gfx942/gfx950 scheduling model, read with llvm-mca), VALU co-execution under an MFMA (AMD's Matrix
Instruction Calculator, S9) and the VALU hold after a gfx950 MFMA (S33). aiter's FAv3 attention overlaps its
softmax (v_exp_f32, v_pk_mul_f32) with its MFMAs this way."""
import os
import re
import shutil
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
    tool = shutil.which("llvm-mca-22") or shutil.which("llvm-mca")
    if tool is None:
        return None
    out = subprocess.run([tool, "-mtriple=amdgcn", f"-mcpu={arch}", "-iterations=1"], input=mnemonic_line + "\n",
                         capture_output=True, text=True).stdout
    m = re.search(r"^\s*\d+\s+(\d+)\s+([\d.]+)\s.*v_exp_f32", out, re.M)
    return (int(m[1]), float(m[2])) if m else None


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
