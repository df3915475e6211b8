"""Registers, operands and instructions as the emitter builds them.

An `Inst` knows which registers it reads (`uses`) and writes (`defs`) and its `kind`; the wait-count
and hazard passes work from those, never from parsing text.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

# Instruction kinds: what the wait and hazard passes need to know.
SALU, VALU, SMEM, VMEM_LOAD, VMEM_STORE, LDS_DMA, DS_READ, DS_WRITE, MFMA, SOPP, BRANCH, LABEL, BARRIER, WAIT = (
    "salu", "valu", "smem", "vmem_load", "vmem_store", "lds_dma", "ds_read", "ds_write", "mfma", "sopp",
    "branch", "label", "barrier", "wait")
COMMENT = "comment"


@dataclass(frozen=True)
class Reg:
    """A physical register tuple, or (`virtual`) a piece of a virtual register group that the register
    allocator (regalloc.allocate) places in the file later; its index then counts in the file's virtual
    numbering, where every group owns a contiguous range, so a slice stays inside its group."""

    file: str  # "v", "s", "a" (and the special files vcc, exec, m0, scc, the waits' "lds")
    index: int
    count: int = 1
    virtual: bool = False

    def __str__(self):
        name = f"%{self.file}" if self.virtual else self.file
        if self.count == 1:
            return f"{name}{self.index}"
        return f"{name}[{self.index}:{self.index + self.count - 1}]"

    @functools.cached_property
    def text(self) -> str:
        """The operand as the assembler reads it (computed once: rendering asks for every operand slot, and the
        allocator hands out one physical Reg object per (file, index, count), so most slots share it)."""
        return _SPECIAL_NAMES.get(self.file) or str(self)

    def __getitem__(self, i) -> "Reg":
        """One register (int) or a sub-range (slice) of a register tuple."""
        if isinstance(i, slice):
            start, stop, _ = i.indices(self.count)
            return Reg(self.file, self.index + start, stop - start, self.virtual)
        if not 0 <= i < self.count:
            raise IndexError(f"{self} has no element {i}")
        return Reg(self.file, self.index + i, 1, self.virtual)

    def units(self):
        """(file, index) of every 32-bit register in this tuple (file "%v" etc. for virtual ones)."""
        file = f"%{self.file}" if self.virtual else self.file
        return [(file, self.index + i) for i in range(self.count)]

    @functools.cached_property
    def unit_keys(self) -> tuple:
        """units() as a tuple, computed once per Reg object: the wait-count and hazard passes ask every
        instruction's registers for them after allocation, which hands out one physical Reg per placement."""
        return tuple(self.units())


def units_of(regs) -> list:
    """(file, index) of every 32-bit register of `regs` (Reg.unit_keys: file "%v" etc. for virtual ones)."""
    out = []
    for r in regs:
        out += r.unit_keys
    return out


VCC = Reg("vcc", 0, 2)
EXEC = Reg("exec", 0, 2)
M0 = Reg("m0", 0, 1)
SCC = Reg("scc", 0, 1)
_SPECIAL_NAMES = {"vcc": "vcc", "exec": "exec", "m0": "m0", "scc": "scc"}


def operand_text(x) -> str:
    if isinstance(x, Reg):
        return x.text
    if isinstance(x, bool):
        raise TypeError("bool operand")
    if isinstance(x, int):
        return str(x) if -16 <= x <= 64 else hex(x & 0xFFFFFFFF)
    if isinstance(x, float):
        return float_literal(x)
    return str(x)


_INLINE_FLOATS = {0.5: "0.5", -0.5: "-0.5", 1.0: "1.0", -1.0: "-1.0", 2.0: "2.0", -2.0: "-2.0", 4.0: "4.0",
                  -4.0: "-4.0", 0.0: "0"}


def float_literal(x: float) -> str:
    """An f32 operand: an inline constant where the ISA has one, else the 32-bit literal bits."""
    import struct

    if x in _INLINE_FLOATS and not (x == 0.0 and str(x).startswith("-")):
        return _INLINE_FLOATS[x]
    return hex(struct.unpack("<I", struct.pack("<f", x))[0])


@dataclass
class Inst:
    op: str
    operands: tuple = ()
    defs: tuple = ()
    uses: tuple = ()
    kind: str = VALU
    suffix: str = ""  # modifiers printed after the operands (offen offset:16, ...)
    comment: str = ""

    def text(self) -> str:
        if self.kind == LABEL:
            return f"{self.op}:"
        if self.kind == COMMENT:
            return f"  // {self.comment}"
        body = self.op
        if self.operands:
            body += " " + ", ".join([o.text if type(o) is Reg else operand_text(o) for o in self.operands])
        if self.suffix:
            body += " " + self.suffix
        if self.comment:
            body = f"{body:<56} // {self.comment}"
        return "  " + body
