"""KernelBuilder: the instruction stream of one kernel while the passes lower tile IR into it.

Code is emitted into *frames*: the kernel body is frame 0 and every loop opens a frame. A value is
computed in the outermost frame where all of its symbols exist, so loop-invariant address math lands
before the loop automatically (the loop's own instructions join the parent only when it closes).
Registers are virtual (`b.v`, `b.s`, `b.a`: regalloc.VirtualFile); the allocation pass places them once the
instruction list is final, from the lives it reads off the instructions (values live across a loop included).
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field

import sympy

from . import isa
from .isa import Inst, Reg
from .regalloc import VirtualFile
from .symcache import free_symbols

_KIND_BY_PREFIX = (
    ("s_load", isa.SMEM), ("s_buffer_load", isa.SMEM), ("s_waitcnt", isa.WAIT), ("s_barrier", isa.BARRIER),
    ("s_cbranch", isa.BRANCH), ("s_branch", isa.BRANCH), ("s_nop", isa.SOPP), ("s_setprio", isa.SOPP),
    ("s_endpgm", isa.SOPP), ("s_", isa.SALU), ("v_mfma", isa.MFMA), ("buffer_store", isa.VMEM_STORE),
    ("global_store", isa.VMEM_STORE), ("buffer_load", isa.VMEM_LOAD), ("global_load", isa.VMEM_LOAD),
    ("ds_read", isa.DS_READ), ("ds_write", isa.DS_WRITE), ("v_", isa.VALU),
)
_NO_DEF_KINDS = frozenset((isa.VMEM_STORE, isa.DS_WRITE, isa.LDS_DMA, isa.WAIT, isa.BARRIER, isa.BRANCH, isa.SOPP))
_SCC_ONLY = ("s_cmp_", "s_bitcmp")  # scalar compares write SCC only and read all their register operands
_SCC = (isa.SCC,)


@functools.lru_cache(maxsize=None)
def kind_of(op: str, suffix: str = "") -> str:
    if op.startswith("buffer_load") and suffix.split()[-1:] == ["lds"]:
        return isa.LDS_DMA
    for prefix, kind in _KIND_BY_PREFIX:
        if op.startswith(prefix):
            return kind
    raise ValueError(f"unknown instruction {op}")


@functools.lru_cache(maxsize=None)
def _facts(op: str, suffix: str) -> tuple:
    """(kind, whether it writes SCC only) of an instruction: one lookup per emit."""
    return kind_of(op, suffix), op.startswith(_SCC_ONLY)


def _implied_defs_uses(operands: tuple, defs, uses, kind: str, scc_only: bool) -> tuple:
    """(defs, uses) of an instruction where emit() was not given them: the first register operand is written (none
    for stores, waits and branches; SCC for scalar compares), the other register operands are read. Plain loops and
    tuples: emit() runs this for most of a kernel's instructions, and a comprehension costs a call on Python 3.11."""
    regs = []
    for o in operands:
        if type(o) is Reg:
            regs.append(o)
    if defs is None:
        if scc_only:
            defs = _SCC
        elif kind in _NO_DEF_KINDS:
            defs = ()
            if uses is None:
                return defs, tuple(regs)
        elif regs:
            defs = (regs[0],)
            if uses is None:
                return defs, tuple(regs[1:])
        else:
            return (), ()
    if uses is None:
        uses = []
        for r in regs:
            if r not in defs:
                uses.append(r)
    return defs, uses


@dataclass
class Frame:
    insts: list
    symbols: set = field(default_factory=set)  # symbols defined by this frame (loop variables)
    cse: dict = field(default_factory=dict)  # (file, expr) -> Reg


class KernelBuilder:
    def __init__(self, arch, kernel_name: str):
        self.arch = arch
        self.name = kernel_name
        groups: list = []  # every virtual register group of the kernel, numbered across the files
        self.v = VirtualFile("v", groups)
        self.s = VirtualFile("s", groups)
        self.a = VirtualFile("a", groups)
        self.frames = [Frame([])]
        self.symbol_regs: dict = {}  # sympy.Symbol -> Reg holding its value
        self.lane_symbols: set = set()  # symbols that differ per lane (the thread id)
        self._labels = 0
        self.lds_bytes = 0
        self.constant_sgprs: dict = {}
        self.constant_vgprs: dict = {}

    # -- emission -------------------------------------------------------------------------------
    def emit(self, op, *operands, defs=None, uses=None, kind=None, suffix="", comment="", frame=None):
        if kind:
            scc_only = op.startswith(_SCC_ONLY)
        else:
            kind, scc_only = _facts(op, suffix)
        if defs is None or uses is None:
            defs, uses = _implied_defs_uses(operands, defs, uses, kind, scc_only)
        inst = Inst(op, operands, tuple(defs), tuple(uses), kind, suffix, comment)
        self.frames[-1 if frame is None else frame].insts.append(inst)
        return inst

    def valu(self, op: str, dst: Reg, *srcs, frame: int | None = None) -> Inst:
        """emit() of a VALU instruction (a `v_` op other than v_mfma) that writes `dst` and reads `srcs`, the
        instruction emit() would make, without its general case analysis: the epilogue's conversions and the
        address arithmetic emit over a thousand of these per GEMM."""
        uses = []  # a plain loop: a comprehension costs a function call on Python 3.11
        for s in srcs:
            if type(s) is Reg:
                uses.append(s)
        inst = Inst(op, (dst, *srcs), (dst,), tuple(uses), isa.VALU)
        self.frames[-1 if frame is None else frame].insts.append(inst)
        return inst

    def comment(self, text: str):
        self.frames[-1].insts.append(Inst("", kind=isa.COMMENT, comment=text))

    def label(self, base: str = "L") -> str:
        self._labels += 1
        return f".L{base}_{self._labels}"

    @property
    def insts(self) -> list:
        assert len(self.frames) == 1, "a loop frame is still open"
        return self.frames[0].insts

    # -- frames ---------------------------------------------------------------------------------
    def frame_of(self, expr) -> int:
        """Index of the outermost frame in which every symbol of `expr` is defined."""
        if not isinstance(expr, sympy.Basic) or len(self.frames) == 1:
            return 0
        symbols = free_symbols(expr)
        depth = 0
        for i, f in enumerate(self.frames):
            if symbols & f.symbols:
                depth = i
        return depth

    @contextlib.contextmanager
    def loop_frame(self, var: sympy.Symbol, var_reg: Reg):
        self.symbol_regs[var] = var_reg
        frame = Frame([], symbols={var})
        self.frames.append(frame)
        try:
            yield frame
        finally:
            self.frames.pop()

    def alloc_in_frame(self, file: str, frame: int, count: int = 1, align: int = 1, what: str = "") -> Reg:
        """A register group for a value computed in `frame` (a loop-invariant value used in a loop is live
        across it: the allocator sees that in the instructions, so the frame needs no bookkeeping here)."""
        return getattr(self, file).alloc(count, align, what)

    @contextlib.contextmanager
    def statement_scope(self):
        """Values computed for one top-level statement are not reused by later ones (their CSE entries
        are dropped), so address math of one copy is not kept live for the rest of the kernel."""
        outer = self.frames[0].cse
        before = set(outer)
        try:
            yield
        finally:
            for key in [k for k in outer if k not in before]:
                del outer[key]

    @contextlib.contextmanager
    def lanes_masked(self):
        """Code emitted inside runs with some lanes switched off (an EXEC mask): a VGPR value computed there holds
        garbage in the inactive lanes, so it must not be reused after the mask is lifted. Its CSE entries (and VGPR
        constants materialised under the mask) are forgotten on exit; values the mask's code found already computed
        stay valid, and so do SGPR values (EXEC does not apply to SALU). Values placed in an outer frame are emitted
        before the loop, outside the mask, and stay too."""
        frame = self.frames[-1]
        before = set(frame.cse)
        constants = set(self.constant_vgprs) if len(self.frames) == 1 else None
        try:
            yield
        finally:
            for key in [k for k in frame.cse if k not in before and k[0] == "v"]:
                del frame.cse[key]
            if constants is not None:
                for value in [v for v in self.constant_vgprs if v not in constants]:
                    del self.constant_vgprs[value]

    def cse_get(self, file: str, expr):
        key = (file, expr)
        if len(self.frames) == 1:
            return self.frames[0].cse.get(key)
        for f in reversed(self.frames):
            hit = f.cse.get(key)
            if hit is not None:
                return hit
        return None

    def cse_put(self, file: str, expr, reg: Reg, frame: int):
        self.frames[frame].cse[(file, expr)] = reg

    # -- constants ------------------------------------------------------------------------------
    def vgpr_constant(self, value: int) -> Reg:
        """A VGPR holding `value` in every lane, for operands that may use neither literal nor SGPR
        (v_cndmask_b32 already reads VCC through the one constant bus on gfx9)."""
        value &= 0xFFFFFFFF
        reg = self.constant_vgprs.get(value)
        if reg is None:
            reg = self.alloc_in_frame("v", 0, what=f"const {value:#x}")
            self.emit("v_mov_b32", reg, value, frame=0)
            self.constant_vgprs[value] = reg
        return reg

    def sgpr_constant(self, value: int) -> Reg:
        """An SGPR holding `value` (VOP3 on gfx9 takes no literal), materialised once in frame 0."""
        value &= 0xFFFFFFFF
        reg = self.constant_sgprs.get(value)
        if reg is None:
            reg = self.alloc_in_frame("s", 0, what=f"const {value:#x}")
            self.emit("s_mov_b32", reg, value, frame=0)
            self.constant_sgprs[value] = reg
        return reg
