"""A loop-invariant T.gemm A operand held in registers: a tile-IR -> tile-IR transform.

Input: tile IR after memory staging. A shared tile that one whole-tile copy from global memory writes, and that
only gemms inside a later loop of the same statement list read, as their A operand (not transposed), is the same
in every trip: flash attention's Q tile, read by QK^T at every KV step. Reading it from LDS costs ds_reads every
trip and holds its LDS bytes through the loop (block_M x dim x 2 bytes: 32 KB of a 128 x 128 fp16 Q, which at
2 K/V stages keeps a 160 KB CU at one workgroup). Output: the tile becomes a fragment of the same shape and dtype:
the copy loads it from global memory into the MFMA operand layout once (layout inference gives the fragment the
gemm's A operand layout, as for TileLang's `gemm_rs`), the gemms read it from registers (`plan.a_in_registers`),
and the shared tile no longer exists. The compiler gives this up where the registers do not fit (compiler.py
`_allocate_registers`: the kernel is lowered again with the operand in LDS).
"""
from __future__ import annotations

import dataclasses

from ..ir import nodes as N
from ..ir.ops import COMPUTE, LOAD


def operands_to_registers(kernel: N.Kernel) -> N.Kernel:
    """`kernel` with each loop-invariant shared A operand (the module docstring) made a fragment."""
    moved = {}
    for stmts in _statement_lists(kernel.body):
        for i, s in enumerate(stmts):
            buf = _invariant_operand(s, stmts[i + 1:], kernel.body)
            if buf is not None:
                moved[buf] = dataclasses.replace(buf, scope=N.FRAGMENT)
    if not moved:
        return kernel
    body = _rewritten(kernel.body, moved)
    return dataclasses.replace(kernel, body=body, buffers=[moved.get(b, b) for b in kernel.buffers])


def _invariant_operand(copy, later: list, program: list):
    """The shared tile `copy` writes when it is such an operand (the module docstring), else None."""
    if copy.k_loop_role() != LOAD or copy.bodies():
        return None
    buf = copy.dst.buffer
    if buf.dtype.bytes != 2 or tuple(copy.dst.starts) != (0,) * len(buf.shape) \
            or tuple(copy.dst.extents) != tuple(buf.shape):
        return None  # a fragment A operand is 16-bit; a part of the tile would leave the rest to other writers
    readers = [x for x in N.walk(program) if x is not copy and buf in {r.buffer for r in x.reads() + x.writes()}]
    if not readers or not all(_reads_as_a(x, buf) for x in readers):
        return None
    inside = {id(x) for s in later for body in s.bodies() for x in N.walk(body)}
    return buf if all(id(x) in inside for x in readers) else None


def _reads_as_a(x, buf) -> bool:
    return x.k_loop_role() == COMPUTE and x.A is buf and x.B is not buf and not x.transpose_A


def _statement_lists(body: list):
    yield body
    for x in body:
        for inner in x.bodies():
            yield from _statement_lists(inner)


def _rewritten(body: list, moved: dict) -> list:
    out = []
    for s in body:
        if s.bodies():
            s = s.with_bodies(tuple(_rewritten(b, moved) for b in s.bodies()))
        if s.k_loop_role() == LOAD and s.dst.buffer in moved:
            s = dataclasses.replace(s, dst=N.Region(moved[s.dst.buffer], s.dst.starts, s.dst.extents))
        elif s.k_loop_role() == COMPUTE and s.A in moved:
            s = dataclasses.replace(s, A=moved[s.A])
        out.append(s)
    return out
