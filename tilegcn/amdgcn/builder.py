"""KernelBuilder: the instruction stream of one kernel while the passes lower tile IR into it.

Code is emitted into *frames*: the kernel body is frame 0 and every loop opens a frame. A value is
computed in the outermost frame where all of its symbols exist, so loop-invariant address math lands
before the loop automatically (the loop's own instructions join the parent only when it closes).
Registers are virtual (`b.v`, `b.s`, `b.a`: regalloc.VirtualFile); the allocation pass places them once the
instruction list is final, from the lives it reads off the instructions (values live across a loop included).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import sympy

from . import isa, isa_table
from .isa import Inst, Reg
from .regalloc import VirtualFile
from .symcache import free_symbols

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
        self._plain_valu: set = set()  # opcodes valu() has checked against the instruction table for this arch

    # -- emission -------------------------------------------------------------------------------
    def emit(self, op, *operands, defs=None, uses=None, kind=None, suffix="", comment="", frame=None):
        """Append instruction `op` with `operands` (assembler order) to the current frame (or `frame`). Its kind and,
        where not given, the registers it writes (`defs`) and reads (`uses`) come from its row of the instruction
        table (isa_table): the registers in its written / read operand slots, then its implicit ones (SCC, VCC, M0,
        EXEC). An opcode the table lacks, one `self.arch` lacks, or operands other than the row's count are an
        InternalError."""
        row = isa_table.lookup(op, suffix)
        if self.arch.name not in row.arches:
            isa_table.refuse_on_arch(row, self.arch.name)
        if len(operands) != len(row.operands):
            isa_table.refuse_operands(row, operands)
        if defs is None or uses is None:
            implied_defs, implied_uses = isa_table.implied_defs_uses(row, operands)
            defs = implied_defs if defs is None else tuple(defs)
            uses = implied_uses if uses is None else tuple(uses)
        inst = Inst(op, operands, tuple(defs), tuple(uses), kind or row.kind, suffix, comment)
        self.frames[-1 if frame is None else frame].insts.append(inst)
        return inst

    def valu(self, op: str, dst: Reg, *srcs, frame: int | None = None) -> Inst:
        """emit() of a VALU instruction whose first operand is the one it writes and whose others it reads (a VOP1,
        VOP2 or VOP3 row of the table without implicit operands), the instruction emit() would make, without its
        general case analysis: the epilogue's conversions and the address arithmetic emit over a thousand of these
        per GEMM."""
        if op not in self._plain_valu:
            isa_table.check_plain_valu(op, self.arch.name)
            self._plain_valu.add(op)
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
