"""The timing model on a load no lane of which is in its buffer's range (a pipelined K loop's masked tail issues its
copies past the end with a V# of NUM_RECORDS 0): it returns zeros without reading memory (docs/isa-notes.md), so the
model charges its issue slot only, no TCP time, bytes or round trip."""
import os
import sys

import pytest
import torch

from tilegcn.amdgcn.arch import TIMING
from tilegcn.perfmodel import estimate

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "asm"))
from emukit import module, srd  # noqa: E402

DEVICE = {"gfx942": "MI300X", "gfx950": "MI355X"}


def _load_kernel(num_records):
    """One buffer_load_dword a lane over a V# of `num_records` bytes, waited for; None: no load."""
    return "\n".join([
        "s_load_dwordx2 s[4:5], s[0:1], 0",
        "v_lshlrev_b32 v1, 2, v0",
        "s_waitcnt lgkmcnt(0)",
        srd(8, 4, num_records or 0),
        "v_mov_b32 v2, 0" if num_records is None else "buffer_load_dword v2, v1, s[8:11], 0 offen",
        "s_waitcnt vmcnt(0)",
        "s_endpgm",
    ])


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_a_load_with_no_lane_in_range_costs_its_issue_slot_only(arch):
    est = {}
    for records in (256, 0, None):
        mod = module(_load_kernel(records), arch=arch, vgprs=8, sgprs=16)
        est[records] = estimate(mod, "k", (1, 1, 1), (64, 1, 1), [torch.zeros(64, dtype=torch.int32)],
                                device=DEVICE[arch])
    assert est[256].cycles > est[None].cycles + TIMING[arch].l2_hit_latency_clk  # a real load waits its round trip
    assert est[0].cycles == est[None].cycles  # the v_mov_b32 it replaces takes the same issue slot
    assert est[0].breakdown["l1_util_pct"] == 0 < est[256].breakdown["l1_util_pct"]
