"""LDS allocation: a byte offset for every shared buffer, within the arch's LDS budget.

Input: a kernel after pipelining (passes/pipelining.py) and its gemm plans. A shared buffer written by
AsyncCopy into stages 0..S-1 gets S copies of itself, one after the other. Output: {Buffer: offset of stage 0},
{Buffer: bytes between stages}, total bytes; ResourceError when the total exceeds arch.lds_bytes, naming the
bytes needed and available and, for pipelined buffers, which num_stages (or a halved block_K) would fit.
"""
from __future__ import annotations

from ..errors import ResourceError
from ..ir import nodes as N



def stage_counts(kernel: N.Kernel) -> dict:
    """{shared Buffer: pipeline stages} (1 for a buffer never written by an AsyncCopy)."""
    stages: dict = {}
    for s in N.walk(kernel.body):
        if isinstance(s, N.AsyncCopy):
            stages[s.dst.buffer] = max(stages.get(s.dst.buffer, 1), s.stage + 1)
    return stages


def allocate_shared(kernel: N.Kernel, arch, gemm_plans: dict):
    align = arch.lds_banks * arch.lds_bank_bytes  # a swizzled tile starts on a whole sweep of the banks
    stages = stage_counts(kernel)
    offsets, strides, total, parts = {}, {}, 0, []
    staged_bytes = fixed_bytes = 0
    for buf in kernel.buffers:
        if buf.scope != N.SHARED:
            continue
        size = buf.numel * buf.dtype.bytes
        stride = -(-size // align) * align
        n = stages.get(buf, 1)
        offsets[buf], strides[buf] = total, stride
        parts.append(f"{buf.name} {size}" if n == 1 else f"{buf.name} {n} stages x {stride}")
        total += stride * n
        if n > 1:
            staged_bytes += stride
        else:
            fixed_bytes += stride
    if total > arch.lds_bytes:
        first = next((b for b in kernel.buffers if b.scope == N.SHARED), None)
        hint = _what_fits(arch.lds_bytes - fixed_bytes, staged_bytes, max(stages.values(), default=1), gemm_plans)
        raise ResourceError(f"LDS budget exceeded: needs {total} bytes ({', '.join(parts)}), "
                            f"{arch.name} has {arch.lds_bytes}{hint}", location=first.loc if first else None)
    return offsets, strides, total


def _what_fits(room: int, per_stage: int, num_stages: int, gemm_plans: dict) -> str:
    if num_stages == 1 or per_stage <= 0:
        return ""
    fit = room // per_stage
    hints = [f"num_stages={fit} fits" if fit >= 1 else "not even num_stages=1 fits"]
    block_K = {p.block_K for p in gemm_plans.values()}
    if len(block_K) == 1 and (bk := block_K.pop()) >= 16 and room >= num_stages * (per_stage // 2):
        hints.append(f"block_K={bk // 2} with num_stages={num_stages} fits")
    return "; " + ", or ".join(hints)
