"""Registers, operands and instructions as the emitter builds them.

An `Inst` knows which registers it reads (`uses`) and writes (`defs`) and its `kind`; the wait-count
and hazard passes work from those, never from parsing text.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import chain

# Instruction kinds: what the wait and hazard passes need to know.
SALU, VALU, SMEM, VMEM_LOAD, VMEM_STORE, LDS_DMA, DS_READ, DS_WRITE, MFMA, SOPP, BRANCH, LABEL, BARRIER, WAIT = (
    "salu", "valu", "smem", "vmem_load", "vmem_store", "lds_dma", "ds_read", "ds_write", "mfma", "sopp",
    "branch", "label", "barrier", "wait")
COMMENT = "comment"
DS_LANE = "ds_lane"  # a lane exchange through the LDS unit that touches no LDS memory (ds_swizzle, ds_bpermute)


class _cached:
    """functools.cached_property without its lock (Python 3.11 takes one on every first computation: a first access
    measured 2.5-3 us against ~1 us for this, on this machine): a non-data descriptor that stores the value in the
    object's __dict__, where later lookups find it first."""

    def __init__(self, compute):
        self.compute, self.name, self.__doc__ = compute, compute.__name__, compute.__doc__

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.compute(obj)
        return value


_REGS: dict = {}  # (file, index, count, virtual) -> the one Reg object with those fields


class Reg:
    """A physical register tuple, or (`virtual`) a piece of a virtual register group that the register
    allocator (regalloc.allocate) places in the file later; its index then counts in the file's virtual
    numbering, where every group owns a contiguous range, so a slice stays inside its group.

    Immutable and interned: `Reg(...)` returns the one object with those fields (a process-wide table, bounded
    by the distinct registers named), so equality and hashing are identity (in C), and what the passes derive
    from a register (its text, its units) is computed once per register and process, as cached attributes.
    Every pass asks these of every operand slot (~9000 in a 256x256 GEMM). Measured under load on this machine:
    building the frozen dataclass this replaced took ~5 us and hashing it ~1 us (field by field, in Python),
    against ~1.6 us to look up an interned Reg and ~0.25 us to hash it."""

    file: str  # "v", "s", "a" (and the special files vcc, exec, m0, scc, the waits' "lds")
    index: int
    count: int
    virtual: bool

    def __new__(cls, file: str, index: int, count: int = 1, virtual: bool = False):
        key = (file, index, count, virtual)
        reg = _REGS.get(key)
        if reg is None:
            reg = object.__new__(cls)
            fields = reg.__dict__
            fields["file"], fields["index"], fields["count"], fields["virtual"] = key
            reg = _REGS.setdefault(key, reg)  # atomic: two threads building the same key get one object
        return reg

    def __setattr__(self, name, value):
        raise AttributeError(f"Reg is immutable (cannot set {name})")

    def __delattr__(self, name):
        raise AttributeError(f"Reg is immutable (cannot delete {name})")

    def __reduce__(self):
        return Reg, (self.file, self.index, self.count, self.virtual)

    def __repr__(self):
        return f"Reg(file={self.file!r}, index={self.index!r}, count={self.count!r}, virtual={self.virtual!r})"

    def __str__(self):
        name = f"%{self.file}" if self.virtual else self.file
        if self.count == 1:
            return f"{name}{self.index}"
        return f"{name}[{self.index}:{self.index + self.count - 1}]"

    @_cached
    def text(self) -> str:
        """The operand as the assembler reads it (computed once per register: rendering asks every operand slot)."""
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

    @_cached
    def unit_ids(self) -> tuple:
        """units() numbered by unit_id, computed once per register: the scheduler, wait-count and hazard passes
        key their per-register state by these ints (cheaper dict keys than tuples)."""
        return tuple(map(unit_id, self.units()))


def regs_of(keys) -> list:
    """Reg(*key) of every (file, index, count, virtual) of `keys`, the interned ones looked up without a call each
    (what the register allocator's rewrite asks of each of a kernel's ~1500 distinct virtual operands)."""
    get = _REGS.get
    return [get(key) or Reg(*key) for key in keys]


_UNIT_IDS: dict = {}  # (file, index) -> a small int, process-wide (like the Reg table, bounded by the units named)


def unit_id(unit: tuple) -> int:
    """The int that numbers a (file, index) unit (Reg.unit_ids); negative numbers are free for pseudo-units."""
    return _UNIT_IDS.setdefault(unit, len(_UNIT_IDS))


def unit_ids_of(regs) -> tuple:
    """Reg.unit_ids of every register of `regs`, in order."""
    return tuple([u for r in regs for u in r.unit_ids])


def unit_keys(regs) -> dict:
    """{Reg: the ints standing for its units} for the dependency passes over a program whose registers are `regs`:
    a register no other register of `regs` overlaps gets one key (its first unit id), the others their unit_ids.
    Only that register ever reads or writes those units, so they have one history, and an analysis per unit would
    repeat itself for each: one key gives the same dependencies for a quarter of the work on a GEMM (its MFMA
    operands and accumulators are 4- to 16-register tuples named whole)."""
    regs = list(regs)
    covered = Counter(chain.from_iterable([r.unit_ids for r in regs]))  # unit -> registers of `regs` covering it
    times = covered.__getitem__
    return {r: r.unit_ids[:1] if max(map(times, r.unit_ids), default=0) == 1 else r.unit_ids for r in regs}


def program_unit_keys(insts) -> dict:
    """unit_keys of every register the defs and uses of `insts` name, and of the implicit VCC and EXEC (the
    scheduler's pseudo-reads of them)."""
    return unit_keys(set().union(*[i.defs for i in insts], *[i.uses for i in insts], (VCC, EXEC)))


VCC = Reg("vcc", 0, 2)
EXEC = Reg("exec", 0, 2)
M0 = Reg("m0", 0, 1)
SCC = Reg("scc", 0, 1)
_SPECIAL_NAMES = {"vcc": "vcc", "exec": "exec", "m0": "m0", "scc": "scc"}


def is_inline_int(x) -> bool:
    """Whether int `x` is an inline integer constant of the operand encoding (-16..64); others need a 32-bit literal,
    which VOP3 and MUBUF soffset on gfx9 do not take (an SGPR then)."""
    return -16 <= x <= 64


def operand_text(x) -> str:
    if isinstance(x, Reg):
        return x.text
    if isinstance(x, bool):
        raise TypeError("bool operand")
    if isinstance(x, int):
        return str(x) if is_inline_int(x) else hex(x & 0xFFFFFFFF)
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

    # The register units (Reg.unit_ids) an instruction reads and writes, computed once per Inst object (nothing
    # mutates an Inst once emitted: the passes build new ones): the wait-count and hazard passes both read them of
    # every allocated instruction, and regalloc's rewrite fills them in as it builds those (cheaper than the lazy
    # path's two calls); instructions made later (waits, nops) compute theirs on first use.
    @_cached
    def use_units(self) -> tuple:
        uses = self.uses
        return uses[0].unit_ids if len(uses) == 1 else unit_ids_of(uses)

    @_cached
    def def_units(self) -> tuple:
        defs = self.defs
        return defs[0].unit_ids if len(defs) == 1 else unit_ids_of(defs)

    def text(self) -> str:
        kind = self.kind
        if kind == LABEL:
            return f"{self.op}:"
        if kind == COMMENT:
            return f"  // {self.comment}"
        ops = self.operands
        body = f"{self.op} {', '.join([o.text if type(o) is Reg else operand_text(o) for o in ops])}" if ops \
            else self.op
        if self.suffix:
            body = f"{body} {self.suffix}"
        if self.comment:
            return f"  {body:<56} // {self.comment}"
        return "  " + body
