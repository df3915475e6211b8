"""Workgroup-id remap for `T.use_swizzle(panel_size, num_xcds)`.

Input: a kernel with at most one top-level Swizzle. Output: prologue SALU code that replaces the
block ids bx, by with remapped ones, before any statement uses them. Two steps (docs/isa-notes.md, XCDs):
1. Chunked XCD transform. The hardware sends workgroup i to XCD i % X. With chunk C = panel_size,
   the remap makes each XCD run C consecutive logical tiles at a time, so tiles that share operands
   share that XCD's L2: xcd = wg % X; l = wg // X; wg' = (l // C) * X*C + xcd * C + l % C, for
   wg below the last whole block of X*C ids (the tail keeps its id).
2. Panel rasterisation: logical tiles walk down panels of `panel_size` rows of by, column by column.
Grid sizes are compile-time constants, so every division is by a constant (shift or multiply-high).
The mapping is a permutation of the grid (tests check it against a Python reference).
"""
from __future__ import annotations

import sympy

from ..errors import CompileError
from .context import Context


def remap_reference(bx: int, by: int, gx: int, gy: int, panel: int, xcds: int) -> tuple:
    """The same mapping in plain Python, for tests and documentation."""
    wg, n = by * gx + bx, gx * gy
    chunk = panel
    block = xcds * chunk
    limit = (n // block) * block
    if wg < limit:
        l = wg // xcds
        wg = (l // chunk) * block + (wg % xcds) * chunk + l % chunk
    width = panel * gx
    group, in_group = divmod(wg, width)
    rows = min(gy - group * panel, panel)
    return in_group // rows, group * panel + in_group % rows


def _select(b, cond_lhs, limit: int, if_less, otherwise):
    """A fresh SGPR = if_less if cond_lhs < limit else otherwise (SCC is set right before the select)."""
    out = b.s.alloc(what="remapped id")
    b.emit("s_cmp_lt_u32", cond_lhs, limit, defs=(), uses=(cond_lhs,))
    b.emit("s_cselect_b32", out, if_less, otherwise)
    return out


def lower_swizzle(ctx: Context, s):
    """The prologue code of `s`, the kernel's one Swizzle op (tilegcn/ops/swizzle.py; the verifier allows one, at
    the top of the body)."""
    b, lower = ctx.b, ctx.lower
    gx, gy, _ = ctx.kernel.grid
    if gx * gy >= 1 << 16:
        raise CompileError(f"T.use_swizzle supports grids below 65536 workgroups, got {gx}x{gy}", location=s.loc)
    bx, by = ctx.kernel.block_ids[:2]
    panel, xcds = s.panel_size, s.num_xcds
    b.comment(f"T.use_swizzle(panel_size={panel}, num_xcds={xcds})")
    wg = sympy.Symbol("wg", integer=True, nonnegative=True)
    b.symbol_regs[wg] = lower.sgpr(by * gx + bx) if gy > 1 else b.symbol_regs[bx]

    # 1. chunked XCD transform
    block = xcds * panel
    limit = (gx * gy // block) * block
    if limit:
        l = sympy.floor(wg / xcds)
        chunked = lower.sgpr(sympy.floor(l / panel) * block + sympy.Mod(wg, xcds) * panel + sympy.Mod(l, panel))
        wg_reg = _select(b, b.symbol_regs[wg], limit, chunked, b.symbol_regs[wg])
        wg = sympy.Symbol("wg_xcd", integer=True, nonnegative=True)
        b.symbol_regs[wg] = wg_reg

    # 2. panels of `panel` rows of by
    width = panel * gx
    group = sympy.floor(wg / width)
    in_group = sympy.Mod(wg, width)
    full_groups, last_rows = divmod(gy, panel)
    variants = []
    for rows in ([panel] if full_groups else []) + ([last_rows] if last_rows else []):
        variants.append((lower.sgpr(sympy.floor(in_group / rows)),
                         lower.sgpr(group * panel + sympy.Mod(in_group, rows))))
    if len(variants) == 1:
        new_bx, new_by = variants[0]
    else:
        group_reg = lower.sgpr(group)
        (bx_full, by_full), (bx_last, by_last) = variants
        new_bx = _select(b, group_reg, full_groups, bx_full, bx_last)
        new_by = _select(b, group_reg, full_groups, by_full, by_last)
    # values computed from the hardware ids must not be found again by CSE under the remapped ids
    frame0 = b.frames[0]
    frame0.cse = {k: v for k, v in frame0.cse.items()
                  if not (isinstance(k[1], sympy.Basic) and k[1].free_symbols & {bx, by})}
    for sym, reg in ((bx, new_bx), (by, new_by)):
        if isinstance(reg, int):
            fixed = b.s.alloc()
            b.emit("s_mov_b32", fixed, reg)
            reg = fixed
        b.symbol_regs[sym] = reg
