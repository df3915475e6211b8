"""LDS allocation: a byte offset for every shared buffer, within the arch's LDS budget.

Input: a kernel after pipelining (passes/pipelining.py) and its gemm plans. A shared buffer written by AsyncCopy into
stages 0..S-1 gets L LDS copies of itself ("LDS buffers", one after the other; stage s lives in buffer s % L):
L = S where they fit, and always for a buffer filled by LDS DMA (the DMA writes its stage's buffer while older
stages are still read). A register-staged buffer keeps the stages ahead in VGPRs and writes LDS only when its
stage is due, so it can share LDS buffers: L is the largest divisor of S that fits (1 for 256x256x64 bf16 at
num_stages=2 on gfx942's 64 KiB, the HipKittens MI300X schedule). Output: {Buffer: offset of buffer 0},
{Buffer: bytes between LDS buffers}, {Buffer: L}, total bytes; ResourceError when even the least LDS the copy paths
need exceeds arch.lds_bytes, naming the bytes needed and available and which num_stages / block_K would fit.
"""
from __future__ import annotations

from ..errors import ResourceError
from ..ir import nodes as N


def stage_counts(kernel: N.Kernel) -> dict:
    """{shared Buffer: pipeline stages} (1 for a buffer never written by an AsyncCopy)."""
    stages: dict = {}
    for s in N.walk(kernel.body):
        for buf, stage in s.stage_writes():  # async copies into a pipeline stage (tilegcn/ops/async_copy.py)
            stages[buf] = max(stages.get(buf, 1), stage + 1)
    return stages


def allocate_shared(kernel: N.Kernel, arch, gemm_plans: dict, by_dma=lambda buf: True):
    """`by_dma(buf)`: whether the pipelined copies into `buf` may go by LDS DMA (then every stage needs its own LDS
    buffer); the default assumes they may."""
    align = arch.lds_banks * arch.lds_bank_bytes  # a swizzled tile starts on a whole sweep of the banks
    shared = [b for b in kernel.buffers if b.scope == N.SHARED]
    stages = stage_counts(kernel)
    sizes = {b: -(-b.numel * b.dtype.bytes // align) * align for b in shared}
    S = max(stages.values(), default=1)
    sharing = {b for b in shared if stages.get(b, 1) > 1 and not by_dma(b)}

    def layout(L: int) -> dict:
        return {b: L if b in sharing else stages.get(b, 1) for b in shared}

    for L in sorted((d for d in range(1, S + 1) if S % d == 0), reverse=True):
        counts = layout(L)
        if _total(sizes, counts) <= arch.lds_bytes:
            break
    offsets, total = {}, 0
    for b in shared:
        offsets[b] = total
        total += sizes[b] * counts[b]
    if total > arch.lds_bytes:
        parts = ", ".join(f"{b.name} {sizes[b]}" if counts[b] == 1 else f"{b.name} {counts[b]} stages x {sizes[b]}"
                          for b in shared)
        hint = _what_fits(arch.lds_bytes, sizes, stages, sharing, S, gemm_plans)
        raise ResourceError(f"LDS budget exceeded: needs {total} bytes ({parts}), {arch.name} has {arch.lds_bytes}"
                            f"{hint}", location=shared[0].loc)
    return offsets, sizes, counts, total


def _total(sizes: dict, counts: dict) -> int:
    return sum(sizes[b] * counts[b] for b in sizes)


def _what_fits(room: int, sizes: dict, stages: dict, sharing: set, num_stages: int, gemm_plans: dict) -> str:
    """Which num_stages (the DMA-filled buffers need one LDS buffer per stage) or halved block_K would fit."""
    fixed = sum(sizes[b] for b in sizes if b in sharing or stages.get(b, 1) == 1)  # one LDS buffer each
    per_stage = sum(sizes[b] for b in sizes if b not in sharing and stages.get(b, 1) > 1)
    hints = []
    if num_stages > 1 and per_stage:
        fit = (room - fixed) // per_stage
        hints.append(f"num_stages={fit} fits" if fit >= 1 else "not even num_stages=1 fits")
    block_K = {p.block_K for p in gemm_plans.values()}
    staged = [b for b in sizes if stages.get(b, 1) > 1]
    if num_stages > 1 and len(block_K) == 1 and (bk := block_K.pop()) >= 16 and \
            _total({b: sizes[b] // 2 if b in staged else sizes[b] for b in sizes},
                   {b: 1 if b in sharing or b not in staged else num_stages for b in sizes}) <= room:
        hints.append(f"block_K={bk // 2} with num_stages={num_stages} fits")
    return "; " + ", or ".join(hints) if hints else ""
