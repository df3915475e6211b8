"""Software pipelining of `for k in T.Pipelined(n, num_stages=S)`: a tile-IR -> tile-IR transform.

Input: verified tile IR. A loop with S > 1 whose body holds only global -> shared copies and T.gemm (the GEMM K
loop) is rewritten; any other loop is left as it is (it runs serially, as with S = 1).
Output: the same computation with S rotating LDS buffers per shared tile (`stage` s of a buffer), in which every
shared copy is an AsyncCopy into a stage, copies are grouped by CommitGroup, and WaitGroup(p) says how many of the
newest groups may still be in flight before a gemm reads its stage:

    prologue:  copies of k = 0 .. S-2 into stages 0 .. S-2, one group each
    steady:    for k in 0 .. n-S:  wait_group(S-2); copies of k+S-1 into stage (k+S-1) % S; commit; gemm stage k % S
               (or, where the wait is not covered, see below: copies; commit; wait_group(S-1); gemm stage k % S)
    epilogue:  for k in n-S+1 .. n-1:  wait_group(n-1-k); gemm stage k % S

Waiting before issuing: the barrier that publishes stage k % S also ends every wave's reads of stage (k-1) % S,
which the copies then overwrite, so a K step has one s_barrier. Issuing first keeps the new copies in flight
during the wait, but overwriting stage (k-1) % S then needs a barrier before the copies too: two a step, with
every wave's copies bunched between them (the timing model: a 256x256x64 bf16 GEMM at 8192^3 on MI355X stalls
~30 % at barriers that way). The copies of k+S-1 are read S-1 steps after they are issued in both orders, so
where S-1 steps of the loop's MFMA work cover the loaded memory round trip (S18's latency test,
`covers_round_trip`) the loads land in time either way and the loop waits first; where they do not (small tiles,
the loop latency-bound), the extra loads in flight during the wait are worth the barrier, and it issues first.

The steady part is a loop unrolled S times, so every stage index is a constant (no per-iteration address math);
steady iterations that do not fill a whole unrolled trip are emitted after the loop. Correct for any n >= 1:
with n < S the prologue issues only n groups and there is no steady part. The lowering (gemm.py) turns
AsyncCopy into LDS DMA or register-staged copies and WaitGroup into exact `s_waitcnt` + `s_barrier`.
"""
from __future__ import annotations

import dataclasses
import math

import sympy

from ..amdgcn.arch import TIMING
from ..ir import nodes as N


def pipeline_loops(kernel: N.Kernel, arch=None) -> N.Kernel:
    """`kernel` with its pipelinable loops rewritten; `arch` decides per loop which order a steady step takes
    (`covers_round_trip`); None: every loop waits first."""
    body = _rewrite(kernel.body, arch)
    return kernel if body == kernel.body else dataclasses.replace(kernel, body=body)


def pipelinable(loop: N.Loop) -> bool:
    copies = [s for s in loop.body if isinstance(s, N.Copy)]
    return (loop.num_stages > 1 and bool(copies) and any(isinstance(s, N.Gemm) for s in loop.body)
            and all(isinstance(s, (N.Copy, N.Gemm)) for s in loop.body)
            and all((c.src.buffer.scope, c.dst.buffer.scope) == (N.GLOBAL, N.SHARED) for c in copies))


def covers_round_trip(loop: N.Loop, arch) -> bool:
    """S18's latency test (timing.md, tcp_bound_tile_model.md 6): (S - 1) x the MFMA clk of one K step of a
    workgroup on its CU (its gemms' FLOPs over the arch's best MFMA rate on all SIMDs) >= the loaded round trip
    of a load (`Timing.l2_hit_latency_clk`)."""
    t = TIMING[arch.name]
    flops, rate = 0, None
    for g in (s for s in loop.body if isinstance(s, N.Gemm)):
        m, n = g.C.shape
        flops += 2 * m * n * math.prod(g.A.shape) // m
        shapes = arch.mfma_shapes.get(g.A.dtype.short) or [x for v in arch.mfma_shapes.values() for x in v]
        rate = max(2 * x.M * x.N * x.K / (x.passes * t.issue_slot_clk) for x in shapes) * t.simds_per_cu
    if rate is None:  # copies only: no MFMA work to cover the round trip
        return False
    return (loop.num_stages - 1) * flops / rate >= t.l2_hit_latency_clk


def _rewrite(stmts: list, arch) -> list:
    out = []
    for s in stmts:
        if isinstance(s, N.Loop) and pipelinable(s):
            out.extend(_pipeline(s, arch is None or covers_round_trip(s, arch)))
        elif isinstance(s, N.Loop):
            body = _rewrite(s.body, arch)
            out.append(s if body == s.body else dataclasses.replace(s, body=body))
        else:
            out.append(s)
    return out


def _pipeline(loop: N.Loop, wait_first: bool) -> list:
    n, S, k = loop.extent, loop.num_stages, loop.var
    copies = [s for s in loop.body if isinstance(s, N.Copy)]
    gemms = [s for s in loop.body if isinstance(s, N.Gemm)]

    def issue(kk, stage: int) -> list:
        return [N.AsyncCopy(_at(c.src, k, kk), c.dst, stage=stage, loc=c.loc) for c in copies] + \
            [N.CommitGroup(loc=loop.loc)]

    def compute(stage: int) -> list:
        return [dataclasses.replace(g, stage=stage) for g in gemms]

    def steady(kk, j: int) -> list:  # iteration kk, with kk % S == j
        copies = issue(kk + S - 1, (j + S - 1) % S)
        if wait_first:
            return [N.WaitGroup(S - 2, loc=loop.loc)] + copies + compute(j)
        return copies + [N.WaitGroup(S - 1, loc=loop.loc)] + compute(j)

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
