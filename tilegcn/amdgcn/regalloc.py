"""Register pools for SGPRs, VGPRs and AGPRs.

Allocation never fails while emitting: the pool records its high-water mark, and `check_budget`
compares the peaks with the arch's register file afterwards, so the error can say how many registers
the kernel needs, not only that it ran out. Nothing ever spills.
"""
from __future__ import annotations

from ..errors import ResourceError
from .isa import Reg


class RegPool:
    def __init__(self, file: str, reserved: int = 0):
        self.file = file
        self.used = bytearray(b"\x01" * reserved)  # 1 = allocated; bytearray.find scans at C speed
        self.peak = reserved
        self.owner: dict[int, str] = {}
        self.touched: list[set] = []  # per open loop: every register allocated inside it

    def alloc(self, count: int = 1, align: int = 1, what: str = "", avoid: set = frozenset(),
              depth: int | None = None) -> Reg:
        """The lowest free run of `count` registers starting at a multiple of `align`, none in `avoid`.

        `depth`: the loop depth of the code that uses the register (default: every open loop); it is
        recorded as used inside those loops only."""
        free_run = bytes(count)
        self.used.extend(bytes(count + align))  # a free run always exists past the end
        start = 0
        while True:
            start = self.used.find(free_run, start)
            if start % align:
                start += align - start % align
                continue
            clash = [i for i in range(start, start + count) if i in avoid] if avoid else None
            if not clash:
                break
            start = clash[-1] + 1
        end = start + count
        self.used[start:end] = b"\x01" * count
        del self.used[max(self.peak, end):]  # keep the array no longer than the high-water mark
        if what:
            self.owner[start] = what
        self.peak = max(self.peak, end)
        for s in self.touched[:depth]:
            s.update(range(start, end))
        return Reg(self.file, start, count)

    def free(self, reg: Reg):
        self.used[reg.index:reg.index + reg.count] = bytes(reg.count)


def check_budget(arch, vgprs: int, agprs: int, sgprs: int, owners: str = ""):
    """ResourceError (needed vs available) when the kernel's registers exceed the arch's file."""
    problems = []
    if vgprs > arch.arch_vgprs:
        problems.append(f"needs {vgprs} VGPRs, {arch.name} has {arch.arch_vgprs}")
    if agprs > arch.agprs:
        problems.append(f"needs {agprs} AGPRs for accumulators, {arch.name} has {arch.agprs}")
    if sgprs > arch.addressable_sgprs:
        problems.append(f"needs {sgprs} SGPRs, {arch.name} has {arch.addressable_sgprs}")
    if problems:
        hint = f" ({owners})" if owners else ""
        raise ResourceError("register budget exceeded: " + "; ".join(problems) + hint +
                            ". tilegcn never spills: use smaller tiles or more threads")
