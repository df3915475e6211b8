"""Software pipelining of `for k in T.Pipelined(n, num_stages=S)`: a tile-IR -> tile-IR transform.

Input: verified tile IR. A loop with S > 1 whose body holds only global -> shared copies and T.gemm (the GEMM K
loop) is rewritten; any other loop is left as it is (it runs serially, as with S = 1).
Output: the same computation with S rotating LDS buffers per shared tile (`stage` s of a buffer), in which every
shared copy is an AsyncCopy into a stage, copies are grouped by CommitGroup, and WaitGroup(p) says how many of the
newest groups may still be in flight before a gemm reads its stage:

    prologue:  copies of k = 0 .. S-2 into stages 0 .. S-2, one group each
    steady:    for k in 0 .. n-S:  wait_group(S-2); copies of k+S-1 into stage (k+S-1) % S; commit; gemm stage k % S
    epilogue:  for k in n-S+1 .. n-1:  wait_group(n-1-k); gemm stage k % S

A steady step waits before it issues: the barrier that publishes stage k % S also ends every wave's reads of
stage (k-1) % S, which the copies then overwrite, so a K step has one s_barrier. (Issuing first and waiting
after needs a barrier before the copies too: two a step, and every wave's copies bunched between them, which the
timing model shows as ~30 % of a 256x256 GEMM's time stalled at barriers.)

The steady part is a loop unrolled S times, so every stage index is a constant (no per-iteration address math);
steady iterations that do not fill a whole unrolled trip are emitted after the loop. Correct for any n >= 1:
with n < S the prologue issues only n groups and there is no steady part. The lowering (gemm.py) turns
AsyncCopy into LDS DMA or register-staged copies and WaitGroup into exact `s_waitcnt` + `s_barrier`.
"""
from __future__ import annotations

import dataclasses

import sympy

from ..ir import nodes as N


def pipeline_loops(kernel: N.Kernel) -> N.Kernel:
    body = _rewrite(kernel.body)
    return kernel if body == kernel.body else dataclasses.replace(kernel, body=body)


def pipelinable(loop: N.Loop) -> bool:
    copies = [s for s in loop.body if isinstance(s, N.Copy)]
    return (loop.num_stages > 1 and bool(copies) and any(isinstance(s, N.Gemm) for s in loop.body)
            and all(isinstance(s, (N.Copy, N.Gemm)) for s in loop.body)
            and all((c.src.buffer.scope, c.dst.buffer.scope) == (N.GLOBAL, N.SHARED) for c in copies))


def _rewrite(stmts: list) -> list:
    out = []
    for s in stmts:
        if isinstance(s, N.Loop) and pipelinable(s):
            out.extend(_pipeline(s))
        elif isinstance(s, N.Loop):
            body = _rewrite(s.body)
            out.append(s if body == s.body else dataclasses.replace(s, body=body))
        else:
            out.append(s)
    return out


def _pipeline(loop: N.Loop) -> list:
    n, S, k = loop.extent, loop.num_stages, loop.var
    copies = [s for s in loop.body if isinstance(s, N.Copy)]
    gemms = [s for s in loop.body if isinstance(s, N.Gemm)]

    def issue(kk, stage: int) -> list:
        return [N.AsyncCopy(_at(c.src, k, kk), c.dst, stage=stage, loc=c.loc) for c in copies] + \
            [N.CommitGroup(loc=loop.loc)]

    def compute(stage: int) -> list:
        return [dataclasses.replace(g, stage=stage) for g in gemms]

    def steady(kk, j: int) -> list:  # iteration kk, with kk % S == j
        return [N.WaitGroup(S - 2, loc=loop.loc)] + issue(kk + S - 1, (j + S - 1) % S) + compute(j)

    out = []
    for kk in range(min(S - 1, n)):
        out += issue(kk, kk)
    count = max(0, n - S + 1)  # steady iterations
    trips = count // S
    if trips:
        var = sympy.Symbol(f"{k}_", integer=True, nonnegative=True)
        body = [s for j in range(S) for s in steady(S * var + j, j)]
        out.append(N.Loop(var, trips, 1, body, loc=loop.loc))
    for kk in range(S * trips, count):
        out += steady(kk, kk % S)
    for kk in range(count, n):
        out += [N.WaitGroup(n - 1 - kk, loc=loop.loc)] + compute(kk % S)
    return out


def _at(region: N.Region, var, value) -> N.Region:
    starts = tuple(sympy.sympify(s).subs(var, value) for s in region.starts)
    return N.Region(region.buffer, starts, region.extents)
