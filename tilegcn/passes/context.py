"""What every lowering pass shares for one kernel: the builder, the ABI, layouts and register access."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..amdgcn.abi import KernelAbi
from ..amdgcn.addr import ExprLowering
from ..amdgcn.builder import KernelBuilder
from ..amdgcn.isa import EXEC, VCC, Reg
from ..amdgcn.memory import GlobalAccess, pack_f32_pair, unpack_16bit_to_f32
from ..ir import nodes as N
from ..ir.ops import TileOp


@dataclass
class Context:
    kernel: N.Kernel
    b: KernelBuilder
    abi: KernelAbi
    layouts: dict = field(default_factory=dict)  # fragment Buffer -> FragmentLayout
    shared: dict = field(default_factory=dict)  # shared Buffer -> LDS byte offset
    gemm_plans: dict = field(default_factory=dict)  # accumulator Buffer -> GemmPlan
    gemm_operands: dict = field(default_factory=dict)  # shared Buffer -> (GemmPlan, "A" | "B")
    current_parallel: TileOp | None = None  # the T.Parallel statement (a ParallelStore op) being lowered
    lds_state: str = "idle"  # last LDS access kind: "idle", "written", "read" or "any" (for barrier placement)
    stage_bytes: dict = field(default_factory=dict)  # shared Buffer -> LDS bytes between its LDS buffers
    lds_buffers: dict = field(default_factory=dict)  # shared Buffer -> LDS buffers its pipeline stages rotate over
    lds_reuse: dict = field(default_factory=dict)  # top-level statement -> buffers taking earlier ones' LDS bytes
    lds_pitches: dict = field(default_factory=dict)  # shared Buffer with padded rows -> passes/lds.RowPadding
    pipe: object = None  # gemm.PipeState while pipelined copies are in flight
    reduce_scratch: dict = field(default_factory=dict)  # Reduce -> shared Buffer of its cross-wave partials
    copy_mode: str = "auto"  # pipelined global -> LDS copies: one of arch.COPY_MODES (tilegcn.jit(copy=...))
    fp_contract: bool = True  # fp32 a * b + c in element code as one FMA (CompileOptions.fp_contract)
    # VGPR pairs reused by every statement of a kind: (fragment, factor register) -> the pair v_pk_mul_f32 reads;
    # (reduction destination, its register) -> the pair a row sum's last v_pk_add_f32 writes twice (passes/reduce.py)
    row_factor_pairs: dict = field(default_factory=dict)
    identity_filled: dict | None = None  # Reduce -> the identity T.fill before it (elementwise.identity_fills)
    fused: dict | None = None  # Reduce -> the T.Parallel it evaluates element by element (elementwise.fused_producers)
    loop_ends: list = field(default_factory=list)  # the end labels of the device loops being lowered, innermost last

    @property
    def lower(self) -> ExprLowering:
        return self.abi.lower

    @property
    def access(self) -> GlobalAccess:
        if not hasattr(self, "_access"):
            self._access = GlobalAccess(self.abi)
        return self._access

    def lds_slot(self, buf: N.Buffer, stage: int) -> tuple:
        """(buffer, LDS buffer index) holding pipeline stage `stage` of shared buffer `buf` (passes/lds.py)."""
        return buf, stage % self.lds_buffers.get(buf, 1)

    @property
    def threads(self) -> int:
        return self.kernel.threads

    # -- fragment elements as fp32 values -------------------------------------------------------
    def element_reg(self, buf: N.Buffer, r: int) -> Reg:
        """The register holding element r (for 16-bit fragments: the register of its pair)."""
        lay = self.layouts[buf]
        return lay.regs[r // 2] if lay.packed else lay.regs[r]

    def read_f32(self, buf: N.Buffer, r: int) -> tuple:
        """(VGPR with element r as fp32, whether it is a temporary the caller must free)."""
        reg = self.element_reg(buf, r)
        lay = self.layouts[buf]
        if reg.file == "a":
            tmp = self.b.v.alloc()
            self.b.valu("v_accvgpr_read_b32", tmp, reg)
            return tmp, True
        if not lay.packed:
            return reg, False
        tmp = self.b.v.alloc()
        unpack_16bit_to_f32(self.b, tmp, reg, r % 2 == 1, buf.dtype)
        return tmp, True

    def write_f32(self, buf: N.Buffer, r: int, value: Reg, pair_value: Reg | None = None):
        """Store fp32 `value` into element r (for 16-bit fragments r is even and `pair_value` is r+1)."""
        reg = self.element_reg(buf, r)
        lay = self.layouts[buf]
        if reg.file == "a":
            self.b.valu("v_accvgpr_write_b32", reg, value)
        elif not lay.packed:
            if reg != value:
                self.b.valu("v_mov_b32", reg, value)
        else:
            pack_f32_pair(self.b, reg, value, pair_value, buf.dtype)


class LaneMask:
    """A `with` block whose instructions run only in the lanes where the condition `set_vcc` writes to VCC holds:
    EXEC is saved and ANDed with VCC on entry and restored on exit; lane values computed inside are garbage in the
    switched-off lanes (the builder's lanes_masked scope). A subclass says when a mask is needed at all (`needed`)
    and how to compute the condition (`set_vcc`); `save_first` allocates the saved-EXEC pair before the condition's
    registers (the order the GEMM's copy masks have always used, so its code stays byte-identical)."""

    save_first = False

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.saved = self.scope = None

    def needed(self) -> bool:
        return True

    def set_vcc(self, b: KernelBuilder):
        raise NotImplementedError

    def __enter__(self):
        if not self.needed():
            return self
        b = self.ctx.b
        if self.save_first:
            self.saved = b.s.alloc(2, align=2, what="saved exec")
        self.set_vcc(b)
        if not self.save_first:
            self.saved = b.s.alloc(2, align=2, what="saved exec")
        b.emit("s_and_saveexec_b64", self.saved, VCC, defs=(self.saved, EXEC), uses=(VCC, EXEC))
        self.scope = b.lanes_masked()
        self.scope.__enter__()
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            self.scope.__exit__(*exc)
            self.ctx.b.emit("s_mov_b64", EXEC, self.saved, defs=(EXEC,), uses=(self.saved,))
            self.ctx.b.s.free(self.saved)
