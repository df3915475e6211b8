"""`T.gemm(A, B, C)`: C += A @ B on matrix cores, A a shared tile or a 16-bit fragment (the MFMA operand layout), B
a shared tile, C a float32 fragment that takes the MFMA accumulator layout (passes/gemm_plan.py plans it,
passes/gemm.py lowers it); with `scale_A` / `scale_B` (shared E8M0 tiles), MX-scaled on gfx950."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..ir.nodes import FRAGMENT, Buffer
from ..ir.ops import COMPUTE, MFMA_ACCUMULATOR, TileOp, register, whole
from ..ir.layout import Force
from ..passes.gemm import lower_gemm
from ..passes.layout_inference import accumulator_layout, operand_layout


@register
@dataclass(eq=False)
class Gemm(TileOp):
    """C += A @ B (A, B transposed in their shared tiles where `transpose_A` / `transpose_B`)."""

    opname: ClassVar[str] = "gemm"
    A: Buffer
    B: Buffer
    C: Buffer
    transpose_A: bool = False
    transpose_B: bool = False
    stage: int = 0  # pipeline stage of A and B read (passes/pipelining.py)
    policy: str | None = None  # T.GemmWarpPolicy FullRow / FullCol: the wave grid's shape; None: the squarest tile
    part: str | None = None  # a ping-pong K loop's half of it (passes/pipelining.py): "reads" or "mfma"; None: both
    # MX block scales (gfx950, issue 22): shared uint8 tiles of E8M0 exponents, one per 32 K of a row of A
    # (scale_A: (M, K / 32)) and of a column of B (scale_B: (N, K / 32)); v_mfma_scale_f32_* applies them
    scale_A: Buffer | None = None
    scale_B: Buffer | None = None
    # K phases one scale tile row covers (passes/pipelining.py split_k_phases keeps rows of 4 bytes whole where a
    # phase's share would be 2, so the tiles still go by LDS DMA): the gemm of stage s reads part s % scale_phases
    scale_phases: int = 1

    @property
    def scaled(self) -> bool:
        return self.scale_A is not None

    def print_to(self, out):
        scales = f" scales={self.scale_A.name},{self.scale_B.name}" if self.scaled else ""
        out.line(f"gemm {self.A.name}{'^T' if self.transpose_A else ''} @ {self.B.name}"
                 f"{'^T' if self.transpose_B else ''} += {self.C.name}" + scales
                 + (f" stage={self.stage}" if self.stage else "") + (f" policy={self.policy}" if self.policy else "")
                 + (f" part={self.part}" if self.part else ""))

    def reads(self):
        scales = (whole(self.scale_A), whole(self.scale_B)) if self.scaled else ()
        return (whole(self.A), whole(self.B), whole(self.C)) + scales

    def writes(self):
        return (whole(self.C),)

    def forced_layouts(self):
        return ((self.C, MFMA_ACCUMULATOR),)

    def layout_constraints(self, gemm_plans, threads):
        """The accumulator takes the MFMA accumulator layout of this gemm's plan; a fragment A, the MFMA operand
        layout (where it was computed in another layout, layout inference puts a conversion before: in registers
        where every thread holds its operand elements already)."""
        plan = gemm_plans.get(self.C)
        if plan is None:
            return ()
        out = (Force(self.C, accumulator_layout(plan, threads), self),)
        if self.A.scope == FRAGMENT:
            out += (Force(self.A, operand_layout(plan, threads), self),)
        return out

    def k_loop_role(self):
        return COMPUTE

    def in_pipeline(self, ctx):
        return ctx.pipe is not None  # a gemm reading a stage while pipelined copies are in flight

    def lower(self, ctx, lower_body):
        lower_gemm(ctx, self)
