"""The timing model's functional runs take shortcuts for speed (issue 23: any foreign 8192^3 GEMM estimated in
<= 5 s): lazy global memory (argument pages staged on first touch, no stores written back), LDS DMAs that move
no bytes in the footprint run, and footprints from each lane's first and last element. The estimate of a small
foreign GEMM is the same with them as without (trace.SHORTCUTS off: the full runs), and leaves the caller's
tensors as they were. HipKittens' 512^3 bf16 GEMM (LDS DMA, buffer_load_dwordx4) and aiter's gfx950 bf16 GEMM
at 512x512x1024: 5-10 s in all here. Lazy memory itself reads what the tensors hold and faults where eager
memory does (instant).
"""
import sys
from pathlib import Path

import pytest
import torch

from tilegcn.runtime.emulator.state import Fault, GlobalMemory

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))


def _hk_estimate():
    from model_accuracy import hk_gemm_launch
    from tilegcn.perfmodel import estimate

    mod, name, launch, c = hk_gemm_launch(512)
    est = estimate(mod, name, launch["grid"], launch["block"], kernarg=launch["kernarg"], buffers=launch["buffers"],
                   shared_mem=launch["shared_mem"], device="MI355X", flops=2 * 512 ** 3)
    return est, c


def _aiter_estimate():
    from model_accuracy import foreign_estimate

    return foreign_estimate("aiter", (512, 512, 1024), None), None


@pytest.mark.parametrize("run", [_hk_estimate, _aiter_estimate], ids=["hipkittens", "aiter"])
def test_small_foreign_gemm_estimate_is_the_same_without_the_shortcuts(run, monkeypatch):
    from tilegcn.perfmodel import trace

    fast, c = run()
    if c is not None:
        assert not c.any()  # the estimate wrote nothing back into the output tensor
    monkeypatch.setattr(trace, "SHORTCUTS", False)
    full, _ = run()
    assert fast.cycles == full.cycles
    assert fast.breakdown["l2_hit_rate"] == full.breakdown["l2_hit_rate"]
    assert fast.breakdown["l2_requests"] == full.breakdown["l2_requests"]


def test_lazy_memory_reads_the_tensor_faults_alike_and_writes_nothing_back():
    t = torch.arange(3 * 1024 + 5, dtype=torch.int32)  # 3 pages and a bit
    mem = GlobalMemory([t], [], torch.device("cpu"), lazy=True)
    word = torch.tensor([[0, 1030, 2 * 1024 + 7, 3 * 1024 + 4]], dtype=torch.int64)
    flat = mem.translate(t.data_ptr() + 4 * word, 4, None)
    assert mem.load_dwords(flat, 1).reshape(-1).tolist() == word.reshape(-1).tolist()
    mem.store_dwords(flat, torch.full((1, 4, 1), -1, dtype=torch.int32), None)
    assert mem.load_dwords(flat, 1).reshape(-1).tolist() == [-1] * 4  # the kernel sees its own stores
    mem.finish()
    assert torch.equal(t, torch.arange(3 * 1024 + 5, dtype=torch.int32))
    past_end = torch.tensor([[t.data_ptr() + 4 * t.numel()]], dtype=torch.int64)
    with pytest.raises(Fault, match="outside every tensor argument"):
        mem.translate(past_end, 4, None)
