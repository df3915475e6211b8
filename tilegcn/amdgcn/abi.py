"""Kernel ABI: kernarg layout, initial registers, and buffer resource descriptors (V#).

Initial state (set by the descriptor in templates/kernel.s.tmpl): s[0:1] kernarg pointer (the only
user SGPR), s2/s3/s4 workgroup ids x/y/z, v0 the work-item id (1-d blocks: y = z = 0 in the packed v0).
Kernel arguments: every tensor as an 8-byte pointer, then every runtime scalar as 4 bytes, in the
order of the function's parameters.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .addr import MASK32, ExprLowering
from .builder import KernelBuilder
from .isa import Reg
from .symcache import sym

if TYPE_CHECKING:  # the machine layer reads IR objects by duck typing; it never imports the IR
    from ..ir import nodes as N

KERNARG_PTR = Reg("s", 0, 2)
WORKGROUP_IDS = (Reg("s", 2), Reg("s", 3), Reg("s", 4))
WORKITEM_ID = Reg("v", 0)
FIRST_FREE_SGPR = 5
FIRST_FREE_VGPR = 1
# Per-lane voffsets (32 bits) address [0, BUFFER_REACH) of a V#; NUM_RECORDS never exceeds it, so
# OUT_OF_RANGE_OFFSET (and any negative voffset, which reads as >= 2^31) is out of range for every
# V#: masked lanes load 0 and their stores drop. The 12-bit `offset:` added on top cannot wrap it.
BUFFER_REACH = 0x80000000
OUT_OF_RANGE_OFFSET = BUFFER_REACH


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
        b.s.reserve(FIRST_FREE_SGPR)  # kernarg pointer, workgroup ids: physical, set up by the descriptor
        b.v.reserve(FIRST_FREE_VGPR)  # work-item id
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

        The offset is computed in 64 bits (addr.ExprLowering.sgpr64), so a tile origin more than
        4 GiB into a tensor is reached, not wrapped. NUM_RECORDS = the bytes from the moved base to
        the tensor's end, clamped to [0, BUFFER_REACH]: 0 when the origin lies past the end or before
        the start (every access then misses), and never more than the per-lane voffsets can address
        without reaching OUT_OF_RANGE_OFFSET (GlobalAccess.address refuses tiles that would need more).
        """
        b = self.b
        base_offset = sym(base_offset)
        key = (f"srd:{buffer.name}", base_offset)
        hit = b.cse_get(*key)
        if hit is not None:
            return hit
        frame = b.frame_of(base_offset)
        srd = b.alloc_in_frame("s", frame, 4, align=4, what=f"V# {buffer.name}")
        ptr, nbytes = self.pointers[buffer], buffer.spec.nbytes
        emit = lambda *a, **k: b.emit(*a, frame=frame, **k)  # noqa: E731
        off = self.lower.sgpr64(base_offset)
        if isinstance(off, int) and not isinstance(nbytes, int):
            self._constant_origin(srd, ptr, off, 0, b.arch.raw_buffer_word3, emit)
            self._dynamic_records_left(srd[2], off, nbytes, frame)  # word 2, after the constant's s_mov
        elif isinstance(off, int):
            self._constant_origin(srd, ptr, off, nbytes, b.arch.raw_buffer_word3, emit)
        else:
            self._moved_base(srd, ptr, off, nbytes, frame)
        b.cse_put(key[0], key[1], srd, frame)
        return srd

    def emptied_resource(self, srd: Reg, counter: Reg, trips: int, what: str = "") -> Reg:
        """A V# equal to `srd` while loop counter `counter` < `trips`, with NUM_RECORDS 0 from then on: every lane
        out of range whether or not the hardware counts soffset (docs/isa-notes.md: out-of-range accesses). Words 0, 1
        and 3 are copied before the loops (frame 0); word 2 is selected where this is called (s_cmp + s_cselect)."""
        b = self.b
        out = b.alloc_in_frame("s", 0, 4, align=4, what="V# emptied past the end")
        b.emit("s_mov_b64", out[0:2], srd[0:2], frame=0)
        b.emit("s_mov_b32", out[3], srd[3], frame=0)
        b.emit("s_cmp_lt_u32", counter, trips, defs=(), uses=(counter,))
        b.emit("s_cselect_b32", out[2], srd[2], 0, comment=f"NUM_RECORDS 0 from trip {trips}{what}")
        return out

    def clamped_resource(self, buffer: N.Buffer, base_offset) -> tuple:
        """(V#, SGPR) for an origin that may lie before the tensor's start (a halo read such as
        `X[bx * 64 + i - 1]`): the V# is resource() at max(origin, 0) and the SGPR holds
        min(origin, 0) (int32; the caller adds it to every voffset, so lanes before the start get a
        negative voffset, which is out of range). Requires -2^31 < origin."""
        b = self.b
        base_offset = sym(base_offset)
        keys = (f"srd0:{buffer.name}", f"below:{buffer.name}")
        hit = b.cse_get(keys[0], base_offset)
        if hit is not None:
            return hit, b.cse_get(keys[1], base_offset)
        frame = b.frame_of(base_offset)
        emit = lambda *a, **k: b.emit(*a, frame=frame, **k)  # noqa: E731
        off = self.lower.sgpr64(base_offset)
        srd = b.alloc_in_frame("s", frame, 4, align=4, what=f"V# {buffer.name}")
        below = b.alloc_in_frame("s", frame, what="origin below the start")
        clamped = b.alloc_in_frame("s", frame, 2, align=2, what="origin")
        emit("s_cmp_lt_i32", off[1], 0, comment="origin before the tensor's start?")
        emit("s_cselect_b32", below, off[0], 0, comment="then voffsets move back by it")
        emit("s_cselect_b64", clamped, 0, off, comment="and the V# starts at the tensor")
        self._moved_base(srd, self.pointers[buffer], clamped, buffer.spec.nbytes, frame)
        b.s.free(clamped)
        b.cse_put(keys[0], base_offset, srd, frame)
        b.cse_put(keys[1], base_offset, below, frame)
        return srd, below

    def _moved_base(self, srd: Reg, ptr: Reg, off: Reg, nbytes: int, frame: int):
        """srd = a raw V# at ptr + off (a 64-bit SGPR pair), NUM_RECORDS as resource() says."""
        emit = lambda *a, **k: self.b.emit(*a, frame=frame, **k)  # noqa: E731
        emit("s_add_u32", srd[0], ptr[0], off[0])
        emit("s_addc_u32", srd[1], ptr[1], off[1])
        emit("s_and_b32", srd[1], srd[1], 0xFFFF, comment="base[47:32], stride 0")
        self._records_left(srd[2], off, nbytes, frame)
        emit("s_mov_b32", srd[3], self.b.arch.raw_buffer_word3)

    @staticmethod
    def _constant_origin(srd: Reg, ptr: Reg, off: int, nbytes: int, raw_word3: int, emit):
        left = records_left(nbytes, off)
        if off == 0:
            emit("s_mov_b32", srd[0], ptr[0])
            emit("s_and_b32", srd[1], ptr[1], 0xFFFF, comment="base[47:32], stride 0")
        else:
            off %= 1 << 64
            emit("s_add_u32", srd[0], ptr[0], off & MASK32)
            emit("s_addc_u32", srd[1], ptr[1], off >> 32)
            emit("s_and_b32", srd[1], srd[1], 0xFFFF, comment="base[47:32], stride 0")
        emit("s_mov_b32", srd[2], left, comment="NUM_RECORDS from the tile origin")
        emit("s_mov_b32", srd[3], raw_word3)

    def _dynamic_records_left(self, out: Reg, off, nbytes, frame: int):
        """out = records_left(nbytes, off) for a byte count of T.dynamic sizes (a SymPy expression; the launch
        refuses a tensor of 2 GiB or more, jit._check_dynamic_spans, so 32 bits hold it) and a constant origin `off`
        or a 64-bit SGPR pair."""
        b = self.b
        emit = lambda *a, **k: b.emit(*a, frame=frame, **k)  # noqa: E731
        size = self.lower.sgpr(nbytes)
        if not isinstance(off, int):
            self._records_left(out, off, size, frame)
            return
        if off < 0 or off >= BUFFER_REACH:
            emit("s_mov_b32", out, 0, comment="NUM_RECORDS 0: the origin lies outside any tensor of a dynamic size")
            return
        emit("s_sub_u32", out, size, off, comment="NUM_RECORDS from the tile origin (a dynamic size)")
        emit("s_cselect_b32", out, 0, out, comment="origin past the end: nothing is in range")

    def _records_left(self, out: Reg, off: Reg, nbytes, frame: int):
        """out = records_left(nbytes, off) for a 64-bit SGPR pair `off`, without wrapping; `nbytes` an int, or a SymPy
        expression of T.dynamic sizes (below BUFFER_REACH, see _dynamic_records_left) or an SGPR holding it."""
        b = self.b
        emit = lambda *a, **k: b.emit(*a, frame=frame, **k)  # noqa: E731
        if not isinstance(nbytes, (int, Reg)):
            nbytes = self.lower.sgpr(nbytes)
        # the usual case (and a dynamic size's, below BUFFER_REACH): one 64-bit subtraction, its borrow says
        # "past the end"
        if isinstance(nbytes, Reg) or nbytes <= BUFFER_REACH:
            high = b.alloc_in_frame("s", frame, what="bytes left, high word")
            emit("s_sub_u32", out, nbytes, off[0])
            emit("s_subb_u32", high, 0, off[1], comment="origin past the end (or negative)?")
            emit("s_cselect_b32", out, 0, out, comment="then nothing is in range")
            b.s.free(high)
            return
        left = b.alloc_in_frame("s", frame, 2, align=2, what="bytes left")
        emit("s_sub_u32", left[0], nbytes & MASK32, off[0])
        emit("s_subb_u32", left[1], nbytes >> 32, off[1], comment="bytes left past the tile origin")
        emit("s_cmp_lt_i32", left[1], 0, comment="origin past the end?")
        emit("s_cselect_b32", left[0], 0, left[0], comment="then nothing is in range")
        emit("s_cmp_gt_i32", left[1], 0, comment="4 GiB or more left?")
        emit("s_cselect_b32", left[0], BUFFER_REACH, left[0])
        emit("s_min_u32", out, left[0], BUFFER_REACH, comment="NUM_RECORDS, at most BUFFER_REACH")
        emit("s_cmp_lt_i32", off[1], 0, comment="origin before the start (a negative scalar)?")
        emit("s_cselect_b32", out, 0, out, comment="then nothing is in range")
        b.s.free(left)


def records_left(nbytes: int, offset: int) -> int:
    """NUM_RECORDS of a V# moved `offset` bytes into a tensor of `nbytes` bytes (see resource)."""
    return min(max(nbytes - offset, 0), BUFFER_REACH) if offset >= 0 else 0
