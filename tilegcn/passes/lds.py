"""LDS allocation: a byte offset for every shared buffer, within the arch's LDS budget.

Input: a kernel and its gemm plans (a gemm's operand tiles may need more bytes than their shape, e.g.
for pipelining stages). Output: {Buffer: offset}, total bytes; ResourceError (needed vs available)
when the total exceeds arch.lds_bytes.
"""
from __future__ import annotations

from ..errors import ResourceError
from ..ir import nodes as N



def allocate_shared(kernel: N.Kernel, arch, gemm_plans: dict):
    align = arch.lds_banks * arch.lds_bank_bytes  # a swizzled tile starts on a whole sweep of the banks
    offsets, total, parts = {}, 0, []
    for buf in kernel.buffers:
        if buf.scope != N.SHARED:
            continue
        size = buf.numel * buf.dtype.bytes
        offsets[buf] = total
        parts.append(f"{buf.name} {size}")
        total += -(-size // align) * align
    if total > arch.lds_bytes:
        first = next((b for b in kernel.buffers if b.scope == N.SHARED), None)
        raise ResourceError(f"LDS budget exceeded: needs {total} bytes ({', '.join(parts)}), "
                            f"{arch.name} has {arch.lds_bytes}", location=first.loc if first else None)
    return offsets, total
