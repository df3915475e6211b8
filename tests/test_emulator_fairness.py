"""Fair scheduling on the emulated device: waves of different workgroups that wait for each other (a spin
lock, Triton's `atomic_cas` mutex) finish, and a launch whose waves wait for something no wave will do stops
within seconds with an error naming the spinning waves."""
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from asm.emukit import module  # noqa: E402
from tilegcn.errors import EmulatorError  # noqa: E402

# One lane per wave takes the mutex at lock[0] with a compare-and-swap (0 -> 1) in a spin loop, adds one to
# counter[0] with a plain load/add/store (only mutual exclusion keeps that right), then releases the lock.
# {retries} may count the failed attempts in a register, so the waiting waves' registers keep changing.
SPIN_LOCK = """s_load_dwordx2 s[4:5], s[0:1], 0x0
               s_load_dwordx2 s[6:7], s[0:1], 0x8
               s_mov_b64 exec, 1
               v_mov_b32 v1, 0
               v_mov_b32 v2, 1
               v_mov_b32 v3, 0
               v_mov_b32 v6, 0
               s_waitcnt lgkmcnt(0)
             .Lretry:
               {retries}
               global_atomic_cmpswap v4, v1, v[2:3], s[4:5] sc0
               s_waitcnt vmcnt(0)
               v_cmp_eq_u32 vcc, 0, v4
               s_cbranch_vccz .Lretry
               global_load_dword v5, v1, s[6:7]
               s_waitcnt vmcnt(0)
               v_add_u32 v5, 1, v5
               global_store_dword v1, v5, s[6:7]
               s_waitcnt vmcnt(0)
               global_store_dword v1, v3, s[4:5]
               s_waitcnt vmcnt(0)
               s_endpgm"""

# Every wave waits for flag[0] to become non-zero; nothing ever sets it.
WAIT_FOR_FLAG = """s_load_dwordx2 s[4:5], s[0:1], 0x0
                   s_waitcnt lgkmcnt(0)
                 .Lpoll:
                   s_load_dword s6, s[4:5], 0x0
                   s_waitcnt lgkmcnt(0)
                   s_cmp_eq_u32 s6, 0
                   s_cbranch_scc1 .Lpoll
                   s_endpgm"""


@pytest.fixture(autouse=True)
def bounded_steps(monkeypatch):
    """A regression must fail in seconds, not run out the default step limit (minutes)."""
    monkeypatch.setenv("TILEGCN_EMULATOR_MAX_STEPS", "100000")


@pytest.mark.parametrize("retries", ["", "v_add_u32 v6, 1, v6"], ids=["pure-spin", "counting-retries"])
def test_spin_lock_across_workgroups_completes(retries):
    workgroups = 8 if not retries else 3  # waiters whose registers change hand over only at the end of a turn
    mod = module(SPIN_LOCK.format(retries=retries), args=("ptr", "ptr"), vgprs=8, sgprs=16)
    lock, counter = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    mod.launch("k", grid=(workgroups, 1, 1), block=(64, 1, 1), args=[lock, counter])
    assert int(counter[0]) == workgroups and int(lock[0]) == 0


def test_spin_lock_in_workgroups_of_several_waves_with_barriers():
    """Wave 0 of each workgroup takes the lock while its other waves wait at a barrier; then wave 1 adds one to
    the counter, and after a second barrier wave 0 releases the lock. A workgroup whose waves all reached
    the barrier passes it while other workgroups' waves still spin."""
    body = """s_load_dwordx2 s[4:5], s[0:1], 0x0
              s_load_dwordx2 s[6:7], s[0:1], 0x8
              v_readfirstlane_b32 s8, v0
              v_mov_b32 v1, 0
              v_mov_b32 v2, 1
              v_mov_b32 v3, 0
              s_waitcnt lgkmcnt(0)
              s_mov_b64 exec, 1
              s_cmp_eq_u32 s8, 0
              s_cbranch_scc0 .Lwait
            .Lretry:
              global_atomic_cmpswap v4, v1, v[2:3], s[4:5] sc0
              s_waitcnt vmcnt(0)
              v_cmp_eq_u32 vcc, 0, v4
              s_cbranch_vccz .Lretry
            .Lwait:
              s_barrier
              s_cmp_eq_u32 s8, 64
              s_cbranch_scc0 .Lskip
              global_load_dword v5, v1, s[6:7]
              s_waitcnt vmcnt(0)
              v_add_u32 v5, 1, v5
              global_store_dword v1, v5, s[6:7]
              s_waitcnt vmcnt(0)
            .Lskip:
              s_barrier
              s_cmp_eq_u32 s8, 0
              s_cbranch_scc0 .Lend
              global_store_dword v1, v3, s[4:5]
              s_waitcnt vmcnt(0)
            .Lend:
              s_endpgm"""
    mod = module(body, args=("ptr", "ptr"), vgprs=8, sgprs=16)
    lock, counter = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    mod.launch("k", grid=(6, 1, 1), block=(192, 1, 1), args=[lock, counter])
    assert int(counter[0]) == 6 and int(lock[0]) == 0


def test_a_wait_nobody_releases_errors_quickly_naming_the_waves():
    mod = module(WAIT_FOR_FLAG, args=("ptr",), vgprs=8, sgprs=16)
    flag = torch.zeros(1, dtype=torch.int32)
    start = time.perf_counter()
    with pytest.raises(EmulatorError) as err:
        mod.launch("k", grid=(3, 1, 1), block=(64, 1, 1), args=[flag])
    assert time.perf_counter() - start < 5
    msg = str(err.value)
    assert "hangs" in msg and "s_cbranch_scc1" in msg
    for wg in range(3):
        assert f"wave 0 of workgroup ({wg}, 0, 0)" in msg


def test_waves_parked_at_a_barrier_while_another_wave_spins_are_named():
    """Wave 1 of the workgroup spins on a flag that wave 0 would set after the barrier: a deadlock."""
    body = """s_load_dwordx2 s[4:5], s[0:1], 0x0
              v_readfirstlane_b32 s7, v0
              s_waitcnt lgkmcnt(0)
              s_cmp_eq_u32 s7, 0
              s_cbranch_scc1 .Lfirst
            .Lpoll:
              s_load_dword s6, s[4:5], 0x0
              s_waitcnt lgkmcnt(0)
              s_cmp_eq_u32 s6, 0
              s_cbranch_scc1 .Lpoll
              s_barrier
              s_endpgm
            .Lfirst:
              s_barrier
              s_endpgm"""
    mod = module(body, args=("ptr",), vgprs=8, sgprs=16)
    with pytest.raises(EmulatorError, match=r"(?s)wave 1 of workgroup \(0, 0, 0\) spin.*"
                                            r"wave 0 of workgroup \(0, 0, 0\) wait\(s\) at `s_barrier`"):
        mod.launch("k", grid=(1, 1, 1), block=(128, 1, 1), args=[torch.zeros(1, dtype=torch.int32)])
