"""Deferred memory operations read their operands when they issue; only destinations wait for retirement.

LLVM legally reuses the data register of a `ds_write` (or the address of any memory op) right after the
instruction issues, before `s_waitcnt`: the hardware has already read it. An emulator that read the data
when the write retired would store the new value.
"""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from asm.emukit import module, srd  # noqa: E402

PROLOGUE = """s_load_dwordx2 s[4:5], s[0:1], 0x0
              s_load_dwordx2 s[6:7], s[0:1], 0x8
              v_and_b32 v1, 0x3ff, v0
              v_lshlrev_b32 v2, 2, v1
              s_waitcnt lgkmcnt(0)"""


def run(body, arch="gfx942"):
    text = "\n".join([PROLOGUE, srd(8, 4, 4096), srd(12, 6, 4096), body, "s_endpgm"])
    mod = module(text, arch=arch, args=("ptr", "ptr"), lds=4096, sgprs=32, vgprs=32)
    src = torch.arange(1000, 2024, dtype=torch.int32)
    dst = torch.zeros(1024, dtype=torch.int32)
    mod.launch("k", (1, 1, 1), (64, 1, 1), [src, dst])
    return src, dst


# Each write's data register (and address) is overwritten right after the write issues, before the wait.
REUSE = {
    "ds_write_b32": """v_add_u32 v3, 7, v1
                       ds_write_b32 v2, v3
                       v_mov_b32 v3, -1
                       v_mov_b32 v2, 0x800
                       s_waitcnt lgkmcnt(0)
                       ds_read_b32 v4, v5""",
    "ds_write2_b32": """v_add_u32 v3, 7, v1
                        v_add_u32 v6, 7, v1
                        v_lshlrev_b32 v7, 3, v1
                        ds_write2_b32 v7, v3, v6 offset1:1
                        v_mov_b32 v3, -1
                        v_mov_b32 v6, -1
                        s_waitcnt lgkmcnt(0)
                        v_lshlrev_b32 v7, 3, v1
                        ds_read_b32 v4, v7""",
    "ds_write2st64_b32": """v_add_u32 v3, 7, v1
                            v_add_u32 v6, 7, v1
                            ds_write2st64_b32 v2, v3, v6 offset1:1
                            v_mov_b32 v3, -1
                            v_mov_b32 v6, -1
                            s_waitcnt lgkmcnt(0)
                            ds_read_b32 v4, v5""",
    "ds_write_b64": """v_add_u32 v6, 7, v1
                       v_mov_b32 v7, 0
                       v_lshlrev_b32 v8, 3, v1
                       ds_write_b64 v8, v[6:7]
                       v_mov_b32 v6, -1
                       s_waitcnt lgkmcnt(0)
                       v_lshlrev_b32 v8, 3, v1
                       ds_read_b32 v4, v8""",
    "buffer_store_dword": """v_add_u32 v3, 7, v1
                             buffer_store_dword v3, v2, s[12:15], 0 offen offset:2048
                             v_mov_b32 v3, -1
                             v_mov_b32 v2, 0
                             s_waitcnt vmcnt(0)
                             v_lshlrev_b32 v2, 2, v1
                             buffer_load_dword v4, v2, s[12:15], 0 offen offset:2048
                             s_waitcnt vmcnt(0)""",
}


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("form", sorted(REUSE))
def test_write_data_is_captured_at_issue(form, arch):
    body = REUSE[form].replace("ds_read_b32 v4, v5", "v_lshlrev_b32 v5, 2, v1\nds_read_b32 v4, v5")
    body += """
               s_waitcnt lgkmcnt(0)
               v_lshlrev_b32 v2, 2, v1
               buffer_store_dword v4, v2, s[12:15], 0 offen"""
    _, dst = run(body, arch)
    assert torch.equal(dst[:64], torch.arange(64, dtype=torch.int32) + 7), form
