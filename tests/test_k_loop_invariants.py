"""Nothing loop-invariant in the GEMM's K loop, as a reader of the kernel's `.s` sees it.

The buffer descriptors (V#s) of the operands are built once before the loop; each K step only advances an offset
(soffset, or voffset where a ragged dim 0 is walked), M0 for LDS DMA, and the loop counter; a trip selects the
NUM_RECORDS word of the V# its copies past the end load with (passes/pipelining.py, masked tail). Numerics of the same
kernels, ragged shapes included, are checked against torch in test_gemm.py and test_pipelining.py.
"""
from __future__ import annotations

import re

import pytest
import torch

import kernels

NOT_SALU = ("s_waitcnt", "s_barrier", "s_nop", "s_setprio", "s_cbranch", "s_branch")
_SGPRS = re.compile(r"\bs(\d+)\b|\bs\[(\d+):(\d+)\]")


def loop_body(asm: str) -> list:
    """Instructions of the K loop (the last backward branch's loop), comments stripped."""
    lines = [ln.split("//")[0].strip() for ln in asm.splitlines()]
    end = max(i for i, ln in enumerate(lines) if ln.startswith("s_cbranch"))
    start = lines.index(lines[end].split()[-1] + ":")
    return [ln for ln in lines[start + 1:end + 1] if ln and not ln.endswith(":")]


def sgprs(operand: str) -> set:
    """SGPR numbers named by an operand: s7 -> {7}, s[4:7] -> {4, 5, 6, 7}."""
    out = set()
    for one, lo, hi in _SGPRS.findall(operand):
        out |= {int(one)} if one else set(range(int(lo), int(hi) + 1))
    return out


def operands(inst: str) -> list:
    return [o.strip() for o in inst.split(None, 1)[1].split(",")] if " " in inst else []


def written_sgprs(inst: str) -> set:
    """SGPRs an SALU instruction writes (its first operand; s_cmp* writes only SCC)."""
    if not inst.startswith("s_") or inst.startswith(NOT_SALU + ("s_cmp",)):
        return set()
    return sgprs(operands(inst)[0])


CONFIGS = [  # arch, B layout, tile (M = N), num_stages
    ("gfx950", "NT", 256, 2), ("gfx950", "NN", 256, 2), ("gfx942", "NT", 256, 1), ("gfx942", "NN", 128, 2),
]


@pytest.mark.parametrize("arch, layout, tile, stages", CONFIGS, ids=["-".join(map(str, c)) for c in CONFIGS])
def test_k_loop_builds_no_descriptor(arch, layout, tile, stages):
    bk, K = 64, 64 * 8
    A = torch.empty(tile, K, dtype=torch.bfloat16)
    B = torch.empty(*((tile, K) if layout == "NT" else (K, tile)), dtype=torch.bfloat16)
    C = torch.empty(tile, tile, dtype=torch.bfloat16)
    asm = kernels.gemm.compile(A, B, C, arch=arch, block_M=tile, block_N=tile, block_K=bk, threads=256,
                               transpose_B=layout == "NT", num_stages=stages).asm
    body = loop_body(asm)
    loads = [i for i in body if i.startswith("buffer_load")]
    quads = {next(o for o in operands(i) if o.startswith("s[")) for i in loads}
    descriptors = set().union(*map(sgprs, quads))
    # the one V# word a trip may write: NUM_RECORDS (word 2) of the descriptor that the last trip's copies of tiles
    # past the end load with (set to 0 there: the masked tail), one s_cselect per operand
    num_records = {min(sgprs(q)) + 2 for q in quads}
    selects = [i for i in body if written_sgprs(i) & descriptors]
    assert all(i.startswith("s_cselect_b32") and written_sgprs(i) <= num_records for i in selects), selects
    assert len(selects) <= 2, selects
    written = set().union(*(written_sgprs(i) for i in body if i not in selects))
    assert loads and not descriptors & written, f"V# SGPRs {sorted(descriptors & written)} written in the K loop"
    assert not any(i.startswith("v_readfirstlane") for i in body)
    # what SALU is left: the loop counter, M0 per LDS DMA, and the offset advance: at most a shift and an add per
    # operand and K step (a descriptor rebuild is ~15), plus, for an LDS-DMA load whose slot starts at another row of
    # the walked dim (B as (K, N) on gfx950), one add for that slot's soffset: LDS DMA's instruction offset also
    # moves the LDS side, so the slot's constant cannot go there
    steps = len(loads) * 16 * 256 // (2 * tile * bk * 2)  # 16-byte loads of one A and one B tile per K step
    counter = sgprs(operands(next(i for i in reversed(body) if i.startswith("s_cmp")))[0])
    salu = [i for i in body if i.startswith("s_") and not i.startswith(NOT_SALU + ("s_cmp",))]
    advance = [i for i in salu if operands(i)[0] != "m0" and not written_sgprs(i) & counter and i not in selects]
    dma_slots = sum(i.endswith(" lds") for i in loads) if layout == "NN" else 0
    assert len(advance) <= 2 * 2 * steps + dma_slots, f"{len(advance)} SALU besides counter and M0 for {steps} K steps: {advance}"
