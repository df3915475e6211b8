"""The lowering pipeline: verified tile IR -> AMDGCN assembly text plus metadata.

  verify -> software pipelining (tile IR -> tile IR) -> gemm planning -> layout inference (may add layout conversions)
  -> LDS allocation -> fragment registers -> ABI prologue -> workgroup remap
  -> statement lowering (copy, elementwise, gemm, loops; virtual registers) -> instruction scheduling
  -> register allocation -> wait counts -> hazard nops -> render
"""
from __future__ import annotations

import contextlib
import functools
import gc
from dataclasses import dataclass

from .amdgcn.abi import KernelAbi
from .amdgcn.arch import get_arch
from .amdgcn.builder import KernelBuilder
from .amdgcn.emit import render
from .amdgcn.hazards import insert_hazard_nops
from .amdgcn.regalloc import allocate
from .amdgcn.schedule import INTERLEAVE, schedule
from .amdgcn.waitcnt import insert_waits
from .errors import CompileError, ResourceError
from .ir import nodes as N
from .ir.printer import print_kernel
from .ir.verify import verify
from .passes.context import Context
from .passes.gemm import may_use_lds_dma, plan_gemms
from .passes.lds import allocate_shared
from .passes.layout import TID, assign_layouts
from .passes.layout_inference import infer_layouts
from .passes.pipelining import pipeline_loops


@dataclass
class Lowered:
    asm: str
    meta: dict
    ir: str | None = None  # the tile IR after the tile-IR passes (pipelining, layout inference)


def lower_statements(ctx: Context, body: list):
    """Outside loops, each statement's values die with it, and a pipelined K loop's (prologue, steady loop,
    epilogue) with the loop's last statement."""
    if len(ctx.b.frames) > 1:
        for s in body:
            lower_statement(ctx, s)
        return
    with contextlib.ExitStack() as pipeline_scope:
        in_pipeline = False
        for s in body:
            pipelined = _pipelined(ctx, s)
            if in_pipeline and not pipelined:
                pipeline_scope.close()
            elif pipelined and not in_pipeline:
                pipeline_scope.enter_context(ctx.b.statement_scope())
            in_pipeline = pipelined
            with contextlib.nullcontext() if pipelined else ctx.b.statement_scope():
                lower_statement(ctx, s)


def _pipelined(ctx: Context, s) -> bool:
    """A statement of a pipelined K loop (passes/pipelining.py): its prologue, steady loop and epilogue share
    their address registers (copy offsets, LDS read bases), so they are not freed statement by statement."""
    return s.in_pipeline(ctx)


def lower_statement(ctx: Context, s):
    """Lower one statement (its op's `lower`, tilegcn/ops/); a CompileError raised anywhere below points at the
    statement's line, unless it came from a statement nested in this one's bodies (a loop's), which has its own."""
    try:
        s.lower(ctx, lower_statements)
    except CompileError as e:
        if e.location == s.loc or s.bodies():
            raise
        raise type(e)(e.raw_message, location=s.loc) from None


def _schedule_and_allocate(b: KernelBuilder, arch, schedule_mode: str, threads: int):
    """List scheduling (amdgcn/schedule.py), then register allocation (virtual -> physical, counts), checked
    against what a workgroup of `threads` leaves each wave of the unified register file.

    The scheduler has no register-pressure limit: moving reads and loads up lengthens their values' lives. When its
    order needs more registers than the file has, the emitted order is allocated instead (it is what
    schedule="plain" gives), so the interleave never turns a kernel that fits into a ResourceError."""
    if schedule_mode == INTERLEAVE:
        try:
            return _allocate_to_fit(schedule(b.insts, arch, interleave=True), b, threads)
        except ResourceError:
            pass
    return _allocate_to_fit(b.insts, b, threads)


def _allocate_to_fit(insts, b: KernelBuilder, threads: int):
    return allocate(insts, b, threads)  # (checks the workgroup fits before rewriting the operands)


def _gc_paused(fn):
    """Run `fn` with Python's cyclic garbage collector off. The lowering allocates many short-lived containers
    (instructions, register tuples, SymPy nodes) and creates no garbage cycles that matter; in a process holding
    torch and SymPy (~200k tracked objects) the collections they trigger, full ones included, cost a quarter of
    the GEMM lowering. Reference counting still frees everything; the collector runs again afterwards."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()

    return wrapper


def _raise_lds_error_unsplit(traced: N.Kernel, arch, copy_mode: str, by_dma):
    """Raise the LDS budget error of `traced` pipelined without K phases (the same bytes), so that it names the
    user's block_K and num_stages; returns if that one fits (then the caller's error stands)."""
    kernel = pipeline_loops(traced, arch, by_dma, phases=False)
    plans, operands = plan_gemms(kernel, arch)
    allocate_shared(kernel, arch, plans, by_dma=functools.partial(may_use_lds_dma, arch, copy_mode, operands))


@dataclass
class Resources:
    """What `plan_resources` decided: the kernel after the tile-IR passes, its gemm plans and LDS allocation."""

    kernel: N.Kernel
    gemm_plans: dict  # accumulator Buffer -> GemmPlan
    gemm_operands: dict  # shared Buffer -> (GemmPlan, "A" | "B")
    shared: dict  # shared Buffer -> LDS byte offset
    stage_bytes: dict  # shared Buffer -> LDS bytes between its LDS buffers
    lds_buffers: dict  # shared Buffer -> LDS buffers its pipeline stages rotate over
    lds_bytes: int
    layouts: dict  # fragment Buffer -> ir.layout.Layout (passes/layout_inference.py)


def plan_resources(kernel: N.Kernel, arch, copy_mode: str = "auto") -> Resources:
    """The compiler's resource checks made before any statement is lowered: IR verification, software pipelining,
    the MFMA plan of every T.gemm (shape, accumulators, a VGPR floor) and the LDS allocation of every pipeline
    stage; a CompileError (ResourceError) names what does not fit. `lower` starts with exactly this, and
    tilegcn.autotune's feasibility check runs it alone, so the two cannot disagree. (Register allocation, the
    one later check, needs the whole lowering.)"""
    arch = get_arch(arch)
    verify(kernel)
    traced = kernel
    _, operands = plan_gemms(kernel, arch)  # the pipeliner's step order depends on which copies go by LDS DMA
    by_dma = functools.partial(may_use_lds_dma, arch, copy_mode, operands)
    kernel = pipeline_loops(kernel, arch, by_dma)
    plans, operands = plan_gemms(kernel, arch)
    kernel, layouts = infer_layouts(kernel, plans)  # may add layout conversions and their LDS scratch
    try:
        shared, stage_bytes, lds_buffers, lds_bytes = allocate_shared(
            kernel, arch, plans, by_dma=functools.partial(may_use_lds_dma, arch, copy_mode, operands))
    except ResourceError:
        _raise_lds_error_unsplit(traced, arch, copy_mode, by_dma)
        raise
    return Resources(kernel, plans, operands, shared, stage_bytes, lds_buffers, lds_bytes, layouts)


@_gc_paused
def lower(kernel: N.Kernel, arch, schedule_mode: str = INTERLEAVE, copy_mode: str = "auto") -> Lowered:
    arch = get_arch(arch)
    traced = kernel
    planned = plan_resources(kernel, arch, copy_mode)
    kernel = planned.kernel
    b = KernelBuilder(arch, kernel.name)
    abi = KernelAbi(b, kernel, TID)
    ctx = Context(kernel, b, abi, copy_mode=copy_mode)
    ctx.gemm_plans, ctx.gemm_operands = planned.gemm_plans, planned.gemm_operands
    ctx.shared, ctx.stage_bytes, ctx.lds_buffers = planned.shared, planned.stage_bytes, planned.lds_buffers
    lds_bytes = planned.lds_bytes
    ctx.layouts = assign_layouts(kernel, b, ctx.gemm_plans, planned.layouts)
    for s in kernel.body:
        s.lower_prologue(ctx)  # the workgroup-id remap of T.use_swizzle
    lower_statements(ctx, kernel.body)
    b.emit("s_endpgm")
    insts, counts = _schedule_and_allocate(b, arch, schedule_mode, kernel.threads)
    insts = insert_hazard_nops(insert_waits(insts, arch), arch)
    asm = render(kernel, arch, abi, insts, lds_bytes, counts)
    meta = dict(name=kernel.name, arch=arch.name, grid=list(kernel.grid), block=list(kernel.block),
                lds_bytes=lds_bytes, vgprs=counts["vgprs"], agprs=counts["agprs"], sgprs=counts["sgprs"],
                kernarg_size=abi.kernarg_size,
                args=[dict(name=a.param.name, kind=a.param.kind, offset=a.offset, size=a.size,
                           dtype=a.param.dtype.name) for a in abi.args],
                source=kernel.loc, instructions=sum(1 for i in insts if i.kind not in ("label", "comment")))
    layouts = {buf: lay.layout for buf, lay in ctx.layouts.items()}
    return Lowered(asm, meta, print_kernel(kernel, layouts) if layouts or kernel is not traced else None)
