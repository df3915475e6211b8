"""Kernel ABI: kernarg layout, initial registers, and buffer resource descriptors (V#).

Initial state (set by the descriptor in templates/kernel.s.tmpl): s[0:1] kernarg pointer (the only
user SGPR), s2/s3/s4 workgroup ids x/y/z, v0 the work-item id (1-d blocks: y = z = 0 in the packed v0).
Kernel arguments: every tensor as an 8-byte pointer, then every runtime scalar as 4 bytes, in the
order of the function's parameters.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..ir import nodes as N
from .addr import ExprLowering
from .builder import KernelBuilder
from .isa import Reg

KERNARG_PTR = Reg("s", 0, 2)
WORKGROUP_IDS = (Reg("s", 2), Reg("s", 3), Reg("s", 4))
WORKITEM_ID = Reg("v", 0)
FIRST_FREE_SGPR = 5
FIRST_FREE_VGPR = 1
OUT_OF_RANGE_OFFSET = 0x80000000  # a voffset no buffer reaches: masked lanes load 0, their stores drop


@dataclass(frozen=True)
class KernArg:
    param: N.Param
    offset: int
    size: int


def kernarg_layout(kernel: N.Kernel) -> tuple:
    """(list of KernArg, total size): tensors first (8 bytes), then scalars (4 bytes)."""
    args, offset = [], 0
    for p in kernel.params:
        if p.kind == "tensor":
            args.append(KernArg(p, offset, 8))
            offset += 8
    for p in kernel.params:
        if p.kind == "scalar":
            args.append(KernArg(p, offset, 4))
            offset += 4
    return args, -(-offset // 8) * 8


def metadata_args(args) -> str:
    """The `.args` list of the code object metadata (YAML, indented for the template)."""
    lines = []
    for a in args:
        if a.param.kind == "tensor":
            lines.append(f"      - {{.name: {a.param.name}, .offset: {a.offset}, .size: 8, "
                         f".value_kind: global_buffer, .address_space: global, "
                         f".type_name: '{a.param.dtype.name}*'}}")
        else:
            type_name = "float" if a.param.dtype.name == "float32" else "int"
            lines.append(f"      - {{.name: {a.param.name}, .offset: {a.offset}, .size: 4, "
                         f".value_kind: by_value, .type_name: {type_name}}}")
    return "\n".join(lines) if lines else "      []"


class KernelAbi:
    """Reserves the initial registers and loads arguments; builds V#s on demand."""

    def __init__(self, b: KernelBuilder, kernel: N.Kernel, tid_symbol):
        self.b, self.kernel = b, kernel
        self.lower = ExprLowering(b)
        b.s.alloc(FIRST_FREE_SGPR, what="kernarg pointer, workgroup ids")
        b.v.alloc(FIRST_FREE_VGPR, what="work-item id")
        b.symbol_regs[tid_symbol] = WORKITEM_ID
        b.lane_symbols.add(tid_symbol)
        for sym, reg in zip(kernel.block_ids, WORKGROUP_IDS):
            b.symbol_regs[sym] = reg
        self.args, self.kernarg_size = kernarg_layout(kernel)
        self.pointers: dict = {}  # Buffer -> Reg pair
        self.scalars: dict = {}  # Param -> Reg
        self._load_arguments()

    def _load_arguments(self):
        b = self.b
        for a in self.args:
            if a.param.kind == "tensor":
                reg = b.s.alloc(2, align=2, what=f"pointer {a.param.name}")
                b.emit("s_load_dwordx2", reg, KERNARG_PTR, a.offset, comment=f"{a.param.name}")
                self.pointers[a.param.buffer] = reg
            else:
                reg = b.s.alloc(what=f"scalar {a.param.name}")
                b.emit("s_load_dword", reg, KERNARG_PTR, a.offset, comment=f"{a.param.name}")
                self.scalars[a.param] = reg
                if a.param.symbol is not None:
                    b.symbol_regs[a.param.symbol] = reg

    def resource(self, buffer: N.Buffer, base_offset) -> Reg:
        """A V# for `buffer` whose base is moved forward by the uniform byte offset `base_offset`.

        NUM_RECORDS shrinks by the same amount (clamped at 0), so the hardware range check still
        masks exactly the bytes past the tensor's end while the per-lane voffset stays small.
        """
        b = self.b
        base_offset = sympy.sympify(base_offset)
        key = (f"srd:{buffer.name}", base_offset)
        hit = b.cse_get(*key)
        if hit is not None:
            return hit
        frame = b.frame_of(base_offset)
        srd = b.alloc_in_frame("s", frame, 4, align=4, what=f"V# {buffer.name}")
        ptr, nbytes = self.pointers[buffer], buffer.spec.nbytes
        emit = lambda *a, **k: b.emit(*a, frame=frame, **k)  # noqa: E731
        off = self.lower.sgpr(base_offset)
        if off == 0:
            emit("s_mov_b32", srd[0], ptr[0])
            emit("s_and_b32", srd[1], ptr[1], 0xFFFF, comment="base[47:32], stride 0")
            emit("s_mov_b32", srd[2], nbytes, comment="NUM_RECORDS = tensor bytes")
        else:
            emit("s_add_u32", srd[0], ptr[0], off)
            emit("s_addc_u32", srd[1], ptr[1], 0)
            emit("s_and_b32", srd[1], srd[1], 0xFFFF, comment="base[47:32], stride 0")
            emit("s_sub_u32", srd[2], nbytes, off, comment="NUM_RECORDS left past the tile origin")
            emit("s_cselect_b32", srd[2], 0, srd[2], comment="origin past the end: nothing in range")
        emit("s_mov_b32", srd[3], b.arch.raw_buffer_word3)
        b.cse_put(key[0], key[1], srd, frame)
        return srd
