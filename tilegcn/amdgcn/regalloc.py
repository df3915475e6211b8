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
        self.used: list[bool] = [True] * reserved
        self.peak = reserved
        self.owner: dict[int, str] = {}
        self.touched: list[set] = []  # per open loop: every register allocated inside it

    def alloc(self, count: int = 1, align: int = 1, what: str = "", avoid: set = frozenset(),
              depth: int | None = None) -> Reg:
        """The lowest free run of `count` registers starting at a multiple of `align`, none in `avoid`.

        `depth`: the loop depth of the code that uses the register (default: every open loop); it is
        recorded as used inside those loops only."""
        start = 0
        while True:
            start = -(-start // align) * align
            end = start + count
            if end > len(self.used):
                self.used.extend([False] * (end - len(self.used)))
            taken = [i for i in range(start, end) if self.used[i] or i in avoid]
            if not taken:
                break
            start = taken[-1] + 1
        for i in range(start, end):
            self.used[i] = True
        for s in self.touched[:depth]:
            s.update(range(start, end))
        if what:
            self.owner[start] = what
        self.peak = max(self.peak, end)
        return Reg(self.file, start, count)

    def free(self, reg: Reg):
        for i in range(reg.index, reg.index + reg.count):
            self.used[i] = False


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
