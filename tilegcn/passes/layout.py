"""Layout pass: which thread holds which fragment element, and in which registers.

Input: a verified Kernel after pipelining, and its gemm plans. Output: a `FragmentLayout` for every fragment: its
layout object (tilegcn/ir/layout.py), inferred by passes/layout_inference.py, and the registers reserved for it
for the kernel's lifetime (AGPRs for a T.gemm accumulator, VGPRs otherwise).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import nodes as N
from ..ir.ops import COMPUTE
from ..ir.layout import MAX_ACCESS_BYTES, TID, Layout, MfmaAccumulator  # noqa: F401  (TID: the lowering's thread id)
from ..ir.layout import Same, replicated_bits
from .layout_inference import infer_layouts


@dataclass(eq=False)
class FragmentLayout:
    buffer: N.Buffer
    layout: Layout
    regs: object = None  # Reg range: 1 VGPR per fp32 element, 2 16-bit elements per VGPR
    acc_coords: object = None  # gemm accumulator layouts: r -> (i, j) from the gemm plan (memoised SymPy)
    acc_split: object = None  # the same as (origin, integer offsets): r -> ((i0, j0), (di, dj))

    @property
    def elems(self) -> int:
        """Elements per thread."""
        return self.layout.elems

    @property
    def run(self) -> int:
        """Consecutive elements along the last dim held by one thread in consecutive registers."""
        return self.layout.run

    @property
    def packed(self) -> bool:
        return self.buffer.dtype.is_16bit

    @property
    def nregs(self) -> int:
        return -(-self.elems // 2) if self.packed else self.elems

    def coords(self, r: int, threads: int | None = None) -> tuple:
        """SymPy index (one per dim) of this thread's element `r`, in terms of TID."""
        if self.acc_coords is not None:
            return self.acc_coords(r)
        return self.layout.coords(r)

    @property
    def replicated(self) -> int:
        """The thread-id bits over which threads hold copies of the same elements (ir/layout.replicated_bits)."""
        if "_replicated" not in self.__dict__:
            self.__dict__["_replicated"] = replicated_bits(self.layout) if self.layout.replicated else 0
        return self.__dict__["_replicated"]

    def writer(self, r: int):
        """None, or the expressions in TID one of which is 0 on the one thread that stores element r (ir/layout.py)."""
        return self.layout.writer(r)


def _allocation_order(kernel: N.Kernel, gemm_plans: dict) -> list:
    """Fragments grouped by shared layout (groups in order of their first fragment, fragments in declaration
    order): the order registers are reserved in, kept from the union-find this pass had before inference, so
    that register numbers (and the generated code) do not move."""
    frags = [b for b in kernel.buffers if b.scope == N.FRAGMENT]
    root = {b: b for b in frags}

    def find(x):
        while root[x] is not x:
            x = root[x]
        return x

    for s in N.walk(kernel.body):
        for c in s.layout_constraints(gemm_plans, kernel.threads):
            if isinstance(c, Same) and c.a in root and c.b in root:
                root[find(c.b)] = find(c.a)
    groups: dict = {}
    for b in frags:
        groups.setdefault(find(b), []).append(b)
    return [b for group in groups.values() for b in group]


def fragment_layouts(kernel: N.Kernel, gemm_plans: dict, inferred: dict) -> dict:
    """{fragment Buffer: FragmentLayout} (no registers yet) for the layouts `inferred` by layout inference, in the
    order registers are reserved."""
    layouts = {}
    for buf in _allocation_order(kernel, gemm_plans):
        lay = FragmentLayout(buf, inferred[buf])
        if isinstance(lay.layout, MfmaAccumulator):
            from .gemm import accumulator_coords, accumulator_origin_and_offsets

            plan = next(p for acc, p in gemm_plans.items() if inferred[acc] == lay.layout)
            lay.acc_coords = accumulator_coords(plan)
            lay.acc_split = accumulator_origin_and_offsets(plan)
        layouts[buf] = lay
    return layouts


def assign_layouts(kernel: N.Kernel, b, gemm_plans: dict, inferred: dict | None = None,
                   vgpr_accumulators: bool = True) -> dict:
    """FragmentLayout per fragment buffer; reserves their registers in builder `b`.

    `gemm_plans` maps accumulator buffers to their GemmPlan (from the gemm pass); `inferred` the layouts from
    passes/layout_inference.py (inferred here when not given: then `kernel` must need no layout conversion);
    `vgpr_accumulators=False` keeps every accumulator in AGPRs (else `vector_accumulators` go to VGPRs).
    """
    if inferred is None:
        kernel, inferred = infer_layouts(kernel, gemm_plans)
    layouts = fragment_layouts(kernel, gemm_plans, inferred)
    in_vgprs = vector_accumulators(kernel.body, gemm_plans) if vgpr_accumulators else set()
    for buf, lay in layouts.items():
        if buf in in_vgprs:
            lay.regs = b.v.alloc(lay.nregs, align=b.arch.vector_tuple_align, what=f"accumulator {buf.name} (VGPRs)")
        elif buf in gemm_plans:
            lay.regs = b.a.alloc(lay.nregs, align=4, what=f"accumulator {buf.name}")
        else:
            lay.regs = b.v.alloc(lay.nregs, align=2 if lay.nregs > 1 else 1, what=f"fragment {buf.name}")
    return layouts


def vector_accumulators(body: list, gemm_plans: dict) -> set:
    """The gemm accumulators kept in VGPRs instead of AGPRs: those that a statement writing a fragment (T.Parallel,
    a reduction, a fragment copy; not a gemm or a fill) reads or writes beside the gemm in a nested statement list,
    a loop's body: flash attention's scores, masked and exponentiated every KV step, and its output, rescaled every
    step. In AGPRs each such statement reads every element out with a v_accvgpr_read and writes it back with a
    v_accvgpr_write (3 instructions per element, and VGPR temporaries for the whole tile); every MFMA tilegcn
    emits takes VGPRs for srcC and vdst on the archs it targets (gfx90a and later: CDNA3 / CDNA4 ISA guides,
    matrix core chapter; llvm-mc assembles both). A GEMM's accumulator, touched by its clear and by the epilogue
    and store after the K loop, stays in AGPRs, where it costs no VGPR."""
    found = set()
    for stmts in _nested_lists(body):
        accs = {x.C for x in stmts if x.k_loop_role() == COMPUTE and x.C in gemm_plans}
        for x in stmts:
            if x.k_loop_role() == COMPUTE or x.opname == "fill":
                continue
            if any(r.buffer.scope == N.FRAGMENT for r in x.writes()):
                found |= accs & {r.buffer for r in x.reads() + x.writes()}
    return found


def _nested_lists(body: list):
    """Every statement list nested in `body` (the bodies of its loops and branches, at any depth)."""
    for x in body:
        for inner in x.bodies():
            yield inner
            yield from _nested_lists(inner)
