"""Layout pass: which thread holds which fragment element, and in which registers.

Input: a verified Kernel. Output: a `FragmentLayout` for every fragment, with registers reserved for
the kernel's lifetime. Fragments connected by a T.Parallel statement or a fragment-to-fragment copy
share one layout (they are processed element by element). A group holding a T.gemm accumulator takes
the MFMA accumulator layout of the gemm plan; every other group gets the *blocked* layout: runs of
`run` consecutive elements along the last dim, run q of the tile held by thread q % threads, so that
global copies become 16-byte buffer loads/stores where alignment allows.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..errors import CompileError
from ..ir import nodes as N
from ..ir.ops import statements_of

TID = sympy.Symbol("tid", integer=True, nonnegative=True)
MAX_ACCESS_BYTES = 16  # widest buffer load/store: dwordx4


@dataclass(eq=False)
class FragmentLayout:
    buffer: N.Buffer
    elems: int  # elements per thread
    run: int  # consecutive elements along the last dim held by one thread
    regs: object = None  # Reg range: 1 VGPR per fp32 element, 2 16-bit elements per VGPR
    acc_coords: object = None  # gemm accumulator layouts: r -> (i, j) from the gemm plan
    acc_split: object = None  # the same as (origin, integer offsets): r -> ((i0, j0), (di, dj))
    replicated: int = 0  # thread-id bits over which threads hold copies of the same elements (a reduction's output)

    @property
    def packed(self) -> bool:
        return self.buffer.dtype.is_16bit

    @property
    def nregs(self) -> int:
        return -(-self.elems // 2) if self.packed else self.elems

    def coords(self, r: int, threads: int) -> tuple:
        """SymPy index (one per dim) of this thread's element `r`, in terms of TID."""
        if self.acc_coords is not None:
            return self.acc_coords(r)
        shape = self.buffer.shape
        cols = shape[-1]
        runs_per_row = cols // self.run
        slot, e = divmod(r, self.run)
        q = TID + threads * slot
        row = sympy.floor(q / runs_per_row) if runs_per_row > 1 else q
        col = (sympy.Mod(q, runs_per_row) * self.run if runs_per_row > 1 else 0) + e
        index = [col]
        for extent in reversed(shape[1:-1]):  # inner dims wrap; the outermost never exceeds its extent
            index.append(sympy.Mod(row, extent) if extent > 1 else sympy.Integer(0))
            row = sympy.floor(row / extent) if extent > 1 else row
        if len(shape) > 1:
            index.append(row)
        return tuple(reversed(index))


def _groups(kernel: N.Kernel):
    """Union-find over fragments that must share a layout."""
    parent = {b: b for b in kernel.buffers if b.scope == N.FRAGMENT}

    def find(x):
        while parent[x] is not x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a, b):
        parent[find(a)] = find(b)

    for s in N.walk(kernel.body):
        for a, b in s.layout_links():  # the op's layout constraints (tilegcn/ops/)
            union(a, b)
    groups: dict = {}
    for b in parent:
        groups.setdefault(find(b), []).append(b)
    return list(groups.values())


def _run_length(group, kernel: N.Kernel) -> int:
    """Longest run that keeps every thread's elements in whole 16-byte global accesses."""
    sizes = [b.dtype.bytes for b in group]
    for s in N.walk(kernel.body):
        for src, dst in s.copy_pairs():
            if src in group or dst in group:
                sizes.append((dst if src in group else src).dtype.bytes)
    return MAX_ACCESS_BYTES // min(sizes)


def blocked_layout(buffer: N.Buffer, run: int, threads: int) -> FragmentLayout:
    numel, cols = buffer.numel, buffer.shape[-1]
    run = min(run, cols)
    while run > 1 and (cols % run or numel % (run * threads)):
        run //= 2
    if numel % threads:
        raise CompileError(f"fragment {buffer.name}{list(buffer.shape)} has {numel} elements, not a multiple "
                           f"of the {threads} threads", location=buffer.loc)
    return FragmentLayout(buffer, numel // threads, run)


def assign_layouts(kernel: N.Kernel, b, gemm_plans: dict) -> dict:
    """FragmentLayout per fragment buffer; reserves their registers in builder `b`.

    `gemm_plans` maps accumulator buffers to their GemmPlan (from the gemm pass).
    """
    layouts = plan_layouts(kernel, gemm_plans)
    for buf, lay in layouts.items():
        if buf in gemm_plans:
            lay.regs = b.a.alloc(lay.nregs, align=4, what=f"accumulator {buf.name}")
        else:
            lay.regs = b.v.alloc(lay.nregs, align=2 if lay.nregs > 1 else 1, what=f"fragment {buf.name}")
    return layouts


def plan_layouts(kernel: N.Kernel, gemm_plans: dict) -> dict:
    """FragmentLayout per fragment buffer, without registers. A group holding a reduction's destination takes the
    slice of the source's layout (passes/reduce.py), after the groups it reads from."""
    threads = kernel.threads
    layouts = {}
    reduced = _reduction_outputs(kernel)
    groups = _groups(kernel)
    for group in [g for g in groups if not any(buf in reduced for buf in g)]:
        accs = [buf for buf in group if buf in gemm_plans]
        if accs:
            from .gemm import accumulator_coords, accumulator_origin_and_offsets

            plan = gemm_plans[accs[0]]
            for buf in group:
                if tuple(buf.shape) != (plan.block_M, plan.block_N):
                    raise CompileError(f"fragment {buf.name}{list(buf.shape)} shares a layout with the gemm "
                                       f"accumulator [{plan.block_M}, {plan.block_N}]", location=buf.loc)
                layouts[buf] = FragmentLayout(buf, plan.acc_regs_per_lane, plan.mfma.d_row_block,
                                              acc_coords=accumulator_coords(plan),
                                              acc_split=accumulator_origin_and_offsets(plan))
        else:
            first = blocked_layout(group[0], _run_length(group, kernel), threads)
            for buf in group:
                layouts[buf] = FragmentLayout(buf, first.elems, first.run)
    if reduced:
        _reduction_layouts(kernel, groups, reduced, layouts)
    return layouts


def _reduction_outputs(kernel: N.Kernel) -> dict:
    """{destination Buffer: [Reduce statements writing it]} in program order."""
    out: dict = {}
    for s in statements_of(kernel.body, "reduce"):
        out.setdefault(s.dst, []).append(s)
    return out


def _reduction_layouts(kernel: N.Kernel, groups: list, reduced: dict, layouts: dict):
    """Lay out the groups holding reduction destinations, each once its sources are laid out (a reduction of a
    reduction follows the first)."""
    from .reduce import reduced_layout, same_layout

    pending = [g for g in groups if any(buf in reduced for buf in g)]
    while pending:
        ready = [g for g in pending
                 if all(s.src in layouts for buf in g if buf in reduced for s in reduced[buf])]
        if not ready:
            s = next(s for g in pending for buf in g if buf in reduced for s in reduced[buf])
            raise CompileError(f"T.reduce_{s.op}: {s.dst.name} takes the slice of {s.src.name}'s layout, but "
                               f"{s.src.name}'s layout depends on {s.dst.name}'s (they are used together in a "
                               "T.Parallel or a fragment copy); reduce into a fragment used apart from its source",
                               location=s.loc)
        for group in ready:
            pending.remove(group)
            stmts = [s for buf in group if buf in reduced for s in reduced[buf]]
            chosen = None
            for s in stmts:
                lay = reduced_layout(s.dst, layouts[s.src], s, kernel.threads)
                if chosen is None:
                    chosen = lay
                elif not same_layout(chosen, lay, kernel.threads):
                    raise CompileError(f"T.reduce_{s.op} into {s.dst.name}: the fragments "
                                       f"{', '.join(b.name for b in group)} are used together (one layout) but "
                                       "their reductions give them different ones (their sources are laid out "
                                       "differently); layout conversions between them are not supported yet",
                                       location=s.loc)
            for buf in group:
                layouts[buf] = FragmentLayout(buf, chosen.elems, 1, acc_coords=chosen.acc_coords,
                                              replicated=chosen.replicated)
