"""Gemm lowering (T.gemm on MFMA) and shared-memory copies. Placeholder until the MFMA path lands."""
from __future__ import annotations

from ..errors import CompileError
from ..ir import nodes as N


def plan_gemms(kernel, arch) -> dict:
    for s in N.walk(kernel.body):
        if isinstance(s, N.Gemm):
            raise CompileError("T.gemm is not lowered yet", location=s.loc)
    return {}


def lower_gemm(ctx, s):
    raise CompileError("T.gemm is not lowered yet", location=s.loc)


def lower_shared_copy(ctx, s):
    raise CompileError("copies through shared memory are not lowered yet", location=s.loc)
