"""Atomics on the emulated device: llc-compiled `atomicrmw` / `cmpxchg` (LLVM picks global_atomic_* with and
without return, and the buffer_wbl2 / buffer_inv around them; ds_*_rtn_* on LDS), plus hand-written buffer atomics.

Lanes of one instruction hitting one address happen in some order; the checks hold for every order:
the final memory value, and that the returned pre-op values chain (each return plus its operand is another
return or the final value)."""
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from asm.emukit import llc_module, run_lanes, srd  # noqa: E402

N = 512
SLOTS = 8
gen = torch.Generator().manual_seed(5)


def atomic_ir(rmw: str, ty: str, returning: bool) -> str:
    """Thread t applies `rmw` to slot[idx[t]] with value val[t]; the returned value goes to ret[t]."""
    keep = f"\n  %r = getelementptr {ty}, ptr addrspace(1) %ret, i32 %i\n  store {ty} %old, ptr addrspace(1) %r" \
        if returning else ""
    return f"""define amdgpu_kernel void @k(ptr addrspace(1) %slot, ptr addrspace(1) %idx, ptr addrspace(1) %val,
                                    ptr addrspace(1) %ret) {{
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %b = mul i32 %wg, 256
  %i = add i32 %b, %tid
  %ip = getelementptr i32, ptr addrspace(1) %idx, i32 %i
  %j = load i32, ptr addrspace(1) %ip
  %vp = getelementptr {ty}, ptr addrspace(1) %val, i32 %i
  %v = load {ty}, ptr addrspace(1) %vp
  %p = getelementptr {ty}, ptr addrspace(1) %slot, i32 %j
  %old = {rmw.format(p="%p", v="%v", ty=ty)}{keep}
  ret void
}}
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
"""


def run_atomic(rmw, ty, dtype, vals, init, returning=True, arch="gfx942"):
    mod = llc_module(atomic_ir(rmw, ty, returning), arch)
    idx = torch.randint(0, SLOTS, (N,), dtype=torch.int32, generator=gen)
    slot, ret = init.clone(), torch.zeros(N, dtype=dtype)
    mod.launch("k", (N // 256, 1, 1), (256, 1, 1), [slot, idx, vals, ret])
    return mod, idx, slot, ret


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_returning_integer_add_chains_and_sums(arch):
    vals = torch.randint(1, 1000, (N,), dtype=torch.int32, generator=gen)
    init = torch.randint(0, 100, (SLOTS,), dtype=torch.int32, generator=gen)
    mod, idx, slot, ret = run_atomic("atomicrmw add ptr addrspace(1) {p}, {ty} {v} monotonic", "i32", torch.int32,
                                     vals, init, arch=arch)
    assert "global_atomic_add" in {i.base for i in mod.instrs}
    for s in range(SLOTS):
        mine = idx == s
        assert int(slot[s]) == int(init[s]) + int(vals[mine].sum())
        # returns and the final value are the partial sums in some order
        assert Counter(ret[mine].tolist() + [int(slot[s])]) == Counter([int(init[s])] + (ret[mine] + vals[mine]).tolist())


def test_non_returning_float_add_and_cache_control():
    vals = torch.randn(N, generator=gen)
    init = torch.zeros(SLOTS)
    mod, idx, slot, _ = run_atomic("atomicrmw fadd ptr addrspace(1) {p}, {ty} {v} syncscope(\"agent\") monotonic",
                                   "float", torch.float32, vals, init, returning=False)
    names = {i.base for i in mod.instrs}
    assert "global_atomic_add_f32" in names
    ref = torch.stack([vals[idx == s].double().sum() for s in range(SLOTS)]).float()
    assert torch.allclose(slot, ref, atol=1e-4)
    mod, *_ = run_atomic("atomicrmw add ptr addrspace(1) {p}, {ty} {v} seq_cst", "i32", torch.int32,
                         torch.ones(N, dtype=torch.int32), torch.zeros(SLOTS, dtype=torch.int32), returning=False)
    assert {"buffer_wbl2", "buffer_inv"} <= {i.base for i in mod.instrs}


@pytest.mark.parametrize("op,fn", [("max", torch.maximum), ("umin", None), ("xchg", None)])
def test_min_max_exchange(op, fn):
    vals = torch.randint(-2**31, 2**31 - 1, (N,), dtype=torch.int32, generator=gen)
    init = torch.randint(-2**31, 2**31 - 1, (SLOTS,), dtype=torch.int32, generator=gen)
    _, idx, slot, ret = run_atomic(f"atomicrmw {op} ptr addrspace(1) {{p}}, {{ty}} {{v}} monotonic", "i32",
                                   torch.int32, vals, init)
    for s in range(SLOTS):
        mine = vals[idx == s]
        if op == "max":
            assert int(slot[s]) == max(int(init[s]), int(mine.max()))
        elif op == "umin":
            assert int(slot[s]) & 0xFFFFFFFF == min(int(init[s]) & 0xFFFFFFFF, *(int(v) & 0xFFFFFFFF for v in mine))
        else:  # every value is returned once or ends in memory, as is the initial value
            assert Counter(ret[idx == s].tolist() + [int(slot[s])]) == Counter(mine.tolist() + [int(init[s])])


def test_cmpxchg_exactly_one_winner_per_address():
    mod = llc_module(atomic_ir("cmpxchg ptr addrspace(1) {p}, i32 0, i32 {v} monotonic monotonic\n"
                               "  %old = extractvalue {{i32, i1}} %pair, 0", "i32", True)
                     .replace("%old = cmpxchg", "%pair = cmpxchg"), "gfx942")
    assert "global_atomic_cmpswap" in {i.base for i in mod.instrs}
    vals = torch.arange(1, N + 1, dtype=torch.int32)
    idx = torch.randint(0, SLOTS, (N,), dtype=torch.int32, generator=gen)
    slot, ret = torch.zeros(SLOTS, dtype=torch.int32), torch.zeros(N, dtype=torch.int32)
    mod.launch("k", (N // 256, 1, 1), (256, 1, 1), [slot, idx, vals, ret])
    for s in range(SLOTS):
        mine = idx == s
        winners = vals[mine & (ret == 0)]
        assert winners.numel() == 1 and int(slot[s]) == int(winners[0])
        assert bool((ret[mine & (ret != 0)] == slot[s]).all())


def test_64bit_add_returns_old_values():
    vals = torch.randint(-2**62, 2**62, (N,), dtype=torch.int64, generator=gen)
    init = torch.randint(-2**62, 2**62, (SLOTS,), dtype=torch.int64, generator=gen)
    mod, idx, slot, ret = run_atomic("atomicrmw add ptr addrspace(1) {p}, {ty} {v} monotonic", "i64", torch.int64,
                                     vals, init)
    assert "global_atomic_add_x2" in {i.base for i in mod.instrs}
    for s in range(SLOTS):
        mine = idx == s
        assert int(slot[s]) == int(init[s] + vals[mine].sum())
        assert Counter(ret[mine].tolist() + [int(slot[s])]) == Counter([int(init[s])] + (ret[mine] + vals[mine]).tolist())


def test_buffer_atomics_return_only_with_sc0_and_skip_out_of_range_lanes():
    """buffer_atomic_add with sc0 returns into vdata; without, vdata keeps its value. Lanes whose offset is
    past NUM_RECORDS (64 bytes: dwords 0..15 of `buf`) neither add nor return (they read 0)."""
    n = 64
    off = (torch.arange(n, dtype=torch.int32) % 20) * 4  # dwords 0..19; 16..19 are out of range
    one = torch.ones(n, dtype=torch.int32)
    buf = torch.zeros(n, dtype=torch.int32)
    body = f"""{srd(96, 8, 64)}
               v_mov_b32 v20, v11
               v_mov_b32 v21, v11
               buffer_atomic_add v20, v10, s[96:99], 0 offen sc0
               buffer_atomic_add v21, v10, s[96:99], 0 offen
               s_waitcnt vmcnt(0)"""
    outs = run_lanes(body, [off, one, buf], n_out=2, block=64)
    in_range = off < 64
    assert bool((outs[1] == 1).all())  # no sc0: vdata unchanged
    assert bool((outs[0][~in_range] == 0).all())
    for d in range(16):
        lanes = (off == 4 * d)
        count = int(lanes.sum())
        assert int(buf[d]) == 2 * count  # both atomics added 1 per in-range lane
        assert sorted(outs[0][lanes].tolist()) == list(range(count))  # the first one's returns: 0 .. count-1
    assert bool((buf[16:] == 0).all())


def lds_atomic_ir(rmw: str, ty: str) -> str:
    """One workgroup of 256 threads: LDS slots zeroed, thread t applies `rmw` to slot idx[t] with val[t] and keeps the
    returned old value in ret[t]; the slots are then copied out (llc picks the ds_* atomic and its waits)."""
    return f"""@lds = internal addrspace(3) global [{SLOTS} x {ty}] poison, align 4
define amdgpu_kernel void @k(ptr addrspace(1) %slot, ptr addrspace(1) %idx, ptr addrspace(1) %val,
                                    ptr addrspace(1) %ret) {{
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %first = icmp ult i32 %t, {SLOTS}
  br i1 %first, label %zero, label %go
zero:
  %z = getelementptr {ty}, ptr addrspace(3) @lds, i32 %t
  store {ty} zeroinitializer, ptr addrspace(3) %z
  br label %go
go:
  call void @llvm.amdgcn.s.barrier()
  %ip = getelementptr i32, ptr addrspace(1) %idx, i32 %t
  %j = load i32, ptr addrspace(1) %ip
  %vp = getelementptr {ty}, ptr addrspace(1) %val, i32 %t
  %v = load {ty}, ptr addrspace(1) %vp
  %p = getelementptr {ty}, ptr addrspace(3) @lds, i32 %j
  %old = {rmw.format(p="%p", v="%v", ty=ty)}
  %r = getelementptr {ty}, ptr addrspace(1) %ret, i32 %t
  store {ty} %old, ptr addrspace(1) %r
  call void @llvm.amdgcn.s.barrier()
  br i1 %first, label %out, label %done
out:
  %q = getelementptr {ty}, ptr addrspace(3) @lds, i32 %t
  %x = load {ty}, ptr addrspace(3) %q
  %s = getelementptr {ty}, ptr addrspace(1) %slot, i32 %t
  store {ty} %x, ptr addrspace(1) %s
  br label %done
done:
  ret void
}}
declare i32 @llvm.amdgcn.workitem.id.x()
declare void @llvm.amdgcn.s.barrier()
"""


# the LDS atomics tilegcn's T.atomic_* emits (passes/atomic.py), as llc compiles `atomicrmw` on addrspace(3)
LDS_CASES = [("fadd", "float", "ds_add_rtn_f32"), ("add", "i32", "ds_add_rtn_u32"), ("max", "i32", "ds_max_rtn_i32"),
             ("min", "i32", "ds_min_rtn_i32")]


@pytest.mark.parametrize("op,ty,mnemonic", LDS_CASES, ids=[c[0] for c in LDS_CASES])
def test_lds_atomics_apply_every_update_and_chain_returns(op, ty, mnemonic):
    mod = llc_module(lds_atomic_ir(f"atomicrmw {op} ptr addrspace(3) {{p}}, {{ty}} {{v}} monotonic", ty), "gfx950")
    assert mnemonic in {i.base for i in mod.instrs}
    n = 256
    idx = torch.randint(0, SLOTS, (n,), dtype=torch.int32, generator=gen)
    vals = torch.randint(-50, 50, (n,), dtype=torch.int32, generator=gen)
    vals = vals.float() if ty == "float" else vals  # small integers: float sums exact in any order
    slot, ret = torch.zeros(SLOTS, dtype=vals.dtype), torch.zeros(n, dtype=vals.dtype)
    mod.launch("k", (1, 1, 1), (n, 1, 1), [slot, idx, vals, ret])
    for s in range(SLOTS):
        mine = vals[idx == s]
        if op in ("fadd", "add"):
            assert slot[s] == mine.sum()
            # the returns and the final value are the partial sums in some order
            assert Counter((ret[idx == s]).tolist() + [slot[s].item()]) == \
                Counter([0] + (ret[idx == s] + mine).tolist())
        elif op == "max":  # the slots start at 0
            assert int(slot[s]) == max(0, int(mine.max()))
        else:
            assert int(slot[s]) == min(0, int(mine.min()))


def test_lds_cmpxchg_exactly_one_winner_per_slot():
    """ds_cmpst_rtn_b32 as llc emits it for cmpxchg on LDS (data0 the compare value, data1 the new one)."""
    ir = lds_atomic_ir("cmpxchg ptr addrspace(3) {p}, i32 0, i32 {v} monotonic monotonic\n"
                       "  %old = extractvalue {{i32, i1}} %pair, 0", "i32").replace("%old = cmpxchg", "%pair = cmpxchg")
    mod = llc_module(ir, "gfx942")
    assert "ds_cmpst_rtn_b32" in {i.base for i in mod.instrs}
    n = 256
    idx = torch.randint(0, SLOTS, (n,), dtype=torch.int32, generator=gen)
    vals = torch.arange(1, n + 1, dtype=torch.int32)
    slot, ret = torch.zeros(SLOTS, dtype=torch.int32), torch.full((n,), -1, dtype=torch.int32)
    mod.launch("k", (1, 1, 1), (n, 1, 1), [slot, idx, vals, ret])
    for s in range(SLOTS):
        mine = idx == s
        winners = vals[mine & (ret == 0)]
        assert winners.numel() == 1 and int(slot[s]) == int(winners[0])  # the others saw the winner's value
        assert bool((ret[mine & (ret != 0)] == slot[s]).all())
