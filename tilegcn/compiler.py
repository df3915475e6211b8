"""The compiler: verified tile IR -> AMDGCN assembly text plus metadata, as ONE ordered pass list (`PASSES`).

  tile IR:  verify -> pipelining (tile IR -> tile IR) -> gemm_planning -> layout_inference (may add layout
            conversions) -> reduction_scratch -> lds_allocation
  lowering: abi_prologue -> layouts -> workgroup_remap -> statements (copy, elementwise, gemm, loops; virtual registers)
  machine:  schedule -> regalloc -> mfma_priority -> waits -> hazards -> render

Everything that compiles runs this list: `lower` (tilegcn.jit, the compile workers, the CLI's export, the
benches) runs all of it; tilegcn.autotune's feasibility check runs its prefix up to `FEASIBILITY_LAST`
(`check_resources`; its sweep first runs the cheaper prefix up to `PLAN_LAST`, `plan_resources`), so the two
cannot drift; tests that start from hand-built instructions run the machine passes through `run_machine_passes`.
The machine passes (amdgcn/schedule.py, regalloc.py, priority.py, waitcnt.py, hazards.py) are one file each and
run from here only. Each pass reads and writes one `Compilation`; `CompileOptions` (tilegcn/options.py) decide
everything else.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import re
import time
from dataclasses import dataclass, field
from typing import Callable

from .amdgcn.abi import KernelAbi
from .amdgcn.arch import get_arch
from .amdgcn.builder import KernelBuilder
from .amdgcn.coalesce import coalesce_copies
from .amdgcn.emit import render
from .amdgcn.hazards import insert_hazard_nops
from .amdgcn.multikernel import merge_kernel_asm
from .amdgcn.isa import COMMENT, Inst
from .amdgcn.pressure import WINDOWS, sink_loads, split_groups, split_webs
from .amdgcn.priority import raise_mfma_priority
from .amdgcn.regalloc import allocate
from .amdgcn.schedule import INTERLEAVE, schedule
from .amdgcn.waitcnt import insert_waits
from .amdgcn.zero_srcc import fold_zeroed_accumulators
from .errors import ArgumentError, CompileError, ResourceError
from .ir import nodes as N
from .ir.ops import COMPUTE
from .ir.printer import print_kernel
from .ir.verify import verify
from .passes.dtype_convert import check_arch_dtypes
from .options import CompileOptions
from .passes.context import Context
from .passes.gemm import may_use_lds_dma, plan_gemms
from .passes.lds import allocate_shared, reuse_barrier
from .passes.layout import TID, assign_layouts, fragment_layouts
from .passes.layout_inference import infer_layouts
from .passes.memspace import stage_memory_accesses
from .passes.operand_registers import operands_to_registers
from .passes.pipelining import ROTATIONS, pipeline_loops, pipelines_carried
from .passes.reduce import reductions, scratch_buffers

__all__ = ["CompileOptions", "Compilation", "Lowered", "PASSES", "PLAN_LAST", "FEASIBILITY_LAST", "lower",
           "lower_program",
           "plan_resources", "check_resources", "run_passes", "run_machine_passes"]


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
            reuse_barrier(ctx, s)
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


# -- the pass list ----------------------------------------------------------------------------------------------
@dataclass
class Compilation:
    """One compile's state, which the passes read and write in order (`seconds` records each pass's time, for
    bench/compile_time.py and the like)."""

    options: CompileOptions
    traced: N.Kernel | None  # the kernel as traced (None for `run_machine_passes`)
    kernel: N.Kernel | None = None  # after the tile-IR passes (a pipelined K loop rewritten)
    gemm_plans: dict = field(default_factory=dict)  # accumulator Buffer -> GemmPlan
    gemm_operands: dict = field(default_factory=dict)  # shared Buffer -> (GemmPlan, "A" | "B")
    layouts: dict = field(default_factory=dict)  # fragment Buffer -> ir.layout.Layout (passes/layout_inference.py)
    by_dma: Callable | None = None  # shared Buffer -> copied by LDS DMA? (the traced kernel's gemm operands)
    shared: dict = field(default_factory=dict)  # shared Buffer -> LDS byte offset
    stage_bytes: dict = field(default_factory=dict)  # shared Buffer -> LDS bytes between its LDS buffers
    lds_buffers: dict = field(default_factory=dict)  # shared Buffer -> LDS buffers its pipeline stages rotate over
    lds_bytes: int = 0
    lds_reuse: dict = field(default_factory=dict)  # top-level statement -> shared buffers taking earlier ones' bytes
    lds_pitches: dict = field(default_factory=dict)  # shared Buffer stored with padded rows -> its RowPadding
    reduce_scratch: dict = field(default_factory=dict)  # Reduce -> the shared Buffer its partials cross waves through
    # gemm accumulators that VALU statements beside the gemm touch live in VGPRs (passes/layout.py
    # vector_accumulators); False after such a kernel ran out of VGPRs: all accumulators in AGPRs
    vgpr_accumulators: bool = True
    # loop-invariant shared A operands become fragments (passes/operand_registers.py); False after such a kernel
    # ran out of VGPRs: the operands stay in LDS
    operand_registers: bool = True
    moved_operands: bool = False  # whether that pass moved one
    # K loops that carry other statements (flash attention's softmax) are software pipelined (passes/pipelining.py
    # `_carried`); False after such a kernel ran out of LDS or registers: they run serially, as they did before
    pipeline_carried: bool = True
    carried_pipelined: bool = False  # whether the pipeliner pipelined such a loop
    # such loops at num_stages=2 run as in-wave software pipelines (pipelining.py `_pipeline_rotated`: second
    # copies of the fragments one part hands the other), split as this says (ROTATIONS, in the order tried after
    # such a kernel ran out of registers); None after the last ran out too: pipelined as before
    rotate_carried: str | None = ROTATIONS[0]
    carried_rotated: bool = False  # whether the pipeliner rotated such a loop
    builder: KernelBuilder | None = None
    abi: KernelAbi | None = None
    ctx: Context | None = None
    insts: list = field(default_factory=list)  # the machine instructions, as the last machine pass left them
    counts: dict = field(default_factory=dict)  # register counts (regalloc)
    register_note: str = ""  # how the registers fitted when the plain allocation did not (kernel.ir, kernel.s)
    lowered: Lowered | None = None  # render's result
    seconds: dict = field(default_factory=dict)  # pass name -> wall seconds it took

    @property
    def arch(self):
        return get_arch(self.options.arch)


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[Compilation], None]
    doc: str


def _verify(c: Compilation):
    c.kernel = c.traced
    verify(c.kernel)
    check_arch_dtypes(c.kernel, c.arch)


def _stage_memory(c: Compilation):
    c.kernel = stage_memory_accesses(c.kernel)


def _operand_registers(c: Compilation):
    if c.operand_registers:
        kernel = c.kernel
        c.kernel = operands_to_registers(kernel)
        c.moved_operands = c.kernel is not kernel


def _pipeline(c: Compilation):
    _, operands = plan_gemms(c.kernel, c.arch)  # the pipeliner's step order depends on which copies go by LDS DMA
    c.by_dma = functools.partial(may_use_lds_dma, c.arch, c.options.copy, operands)
    c.carried_pipelined = c.pipeline_carried and pipelines_carried(c.kernel)
    before = c.kernel
    c.kernel = pipeline_loops(c.kernel, c.arch, c.by_dma, carried=c.pipeline_carried, rotate=c.rotate_carried)
    c.carried_rotated = len(c.kernel.buffers) > len(before.buffers)  # (a rotated loop's second fragments)


def _plan_gemms(c: Compilation):
    c.gemm_plans, c.gemm_operands = plan_gemms(c.kernel, c.arch)


def _infer_layouts(c: Compilation):
    c.kernel, c.layouts = infer_layouts(c.kernel, c.gemm_plans)


def _reduction_scratch(c: Compilation):
    """The LDS scratch of cross-wave reductions becomes shared buffers of the kernel, so that the LDS allocation
    counts them against the budget and kernel.ir shows them."""
    if not reductions(c.kernel):
        return
    c.reduce_scratch = scratch_buffers(c.kernel, fragment_layouts(c.kernel, c.gemm_plans, c.layouts), c.arch)
    if c.reduce_scratch:
        c.kernel = dataclasses.replace(c.kernel, buffers=[*c.kernel.buffers, *c.reduce_scratch.values()])


def _allocate_lds(c: Compilation):
    by_dma = functools.partial(may_use_lds_dma, c.arch, c.options.copy, c.gemm_operands)
    try:
        lds = allocate_shared(c.kernel, c.arch, c.gemm_plans, by_dma=by_dma, scratch=c.reduce_scratch)
    except ResourceError:
        if c.carried_pipelined:  # the stages of a loop that ran serially before: run it serially again
            c.pipeline_carried = False
            _run(c, "verify", "lds_allocation")
            return
        _raise_lds_error_unsplit(c.traced, c.arch, c.options.copy, c.by_dma, c.pipeline_carried)
        raise
    c.shared, c.stage_bytes, c.lds_buffers, c.lds_bytes = lds.offsets, lds.stage_bytes, lds.counts, lds.total
    c.lds_reuse, c.lds_pitches = lds.reuse, lds.pitches


def _raise_lds_error_unsplit(traced: N.Kernel, arch, copy_mode: str, by_dma, carried: bool = True):
    """Raise the LDS budget error of `traced` pipelined without K phases (the same bytes), so that it names the
    user's block_K and num_stages; returns if that one fits (then the caller's error stands)."""
    kernel = pipeline_loops(traced, arch, by_dma, phases=False, carried=carried)
    plans, operands = plan_gemms(kernel, arch)
    allocate_shared(kernel, arch, plans, by_dma=functools.partial(may_use_lds_dma, arch, copy_mode, operands))


def _abi_prologue(c: Compilation):
    c.builder = KernelBuilder(c.arch, c.kernel.name)
    c.abi = KernelAbi(c.builder, c.kernel, TID)
    c.ctx = Context(c.kernel, c.builder, c.abi, copy_mode=c.options.copy, fp_contract=c.options.fp_contract)
    c.ctx.gemm_plans, c.ctx.gemm_operands = c.gemm_plans, c.gemm_operands
    c.ctx.shared, c.ctx.stage_bytes, c.ctx.lds_buffers = c.shared, c.stage_bytes, c.lds_buffers
    c.ctx.reduce_scratch = c.reduce_scratch
    c.ctx.lds_reuse, c.ctx.lds_pitches = c.lds_reuse, c.lds_pitches


def _layouts(c: Compilation):
    c.ctx.layouts = assign_layouts(c.kernel, c.builder, c.gemm_plans, c.layouts, c.vgpr_accumulators)


def _workgroup_remap(c: Compilation):
    for s in c.kernel.body:
        s.lower_prologue(c.ctx)  # the workgroup-id remap of T.use_swizzle


def _statements(c: Compilation):
    lower_statements(c.ctx, c.kernel.body)
    c.builder.emit("s_endpgm")
    c.builder.insts[:] = coalesce_copies(fold_zeroed_accumulators(c.builder.insts), c.builder.v)
    c.insts = c.builder.insts


def _schedule(c: Compilation):
    if c.options.schedule == INTERLEAVE:
        c.insts = schedule(c.builder.insts, c.arch, interleave=True)


def _allocate_registers(c: Compilation):
    """Register allocation (virtual -> physical, counts), checked against what a workgroup of the kernel's
    threads leaves each wave of the unified register file.

    The scheduler has no register-pressure limit: moving reads and loads up lengthens their values' lives. When its
    order needs more registers than the file has, the emitted order is allocated instead (it is what
    schedule="plain" gives), so the interleave never turns a kernel that fits into a ResourceError. When neither
    fits, both are tried again with lifetime holes (amdgcn/liveness.py): a pipelined loop's staging registers of one
    stage lend themselves to the other stage's while they hold nothing (gfx942's 8-wave 256x256x64 GEMM at
    num_stages=2). Holes come last so that every kernel that fit without them keeps its registers. A kernel whose VGPR
    accumulators (passes/layout.py vector_accumulators) do not fit first gets the last resort below with them (a
    few registers over: flash attention's causal gfx942 256x64 tile at HipKittens' shape needs 260 of 256, and the
    timing model rates its fragment groups split at 391 TFLOP/s against 319 with AGPR accumulators), then is
    lowered again from the layouts on with every accumulator in AGPRs, then with a moved operand back in LDS, then
    with its carried loop serial (flash attention's fallbacks, after its in-wave software pipeline's splits:
    pipelining.ROTATIONS, each with its own second fragments, then none); the last resort is
    `_relieve_pressure` (fragment groups split, loads issued closer to their use)."""
    first = None  # the error of the kernel as first lowered, which names what the registers hold
    while True:
        try:
            _allocate_scheduled(c)
            return
        except ResourceError as e:
            first = first or e
            try:
                if c.carried_rotated:  # the next split, then the loop as before
                    c.rotate_carried = _next_rotation(c.rotate_carried)
                    _run(c, "verify", "schedule")
                elif c.vgpr_accumulators and any(c.ctx.layouts[acc].regs.file == "v" for acc in c.gemm_plans):
                    try:  # a few registers over: cheaper than an accvgpr round trip per element and step
                        _relieve_pressure(c, c.kernel.threads, e)
                        return
                    except ResourceError:
                        pass
                    c.vgpr_accumulators = False
                    _run(c, "abi_prologue", "schedule")
                elif c.operand_registers and c.moved_operands:
                    c.operand_registers, c.vgpr_accumulators = False, True
                    _run(c, "verify", "schedule")  # (the operand's LDS tile back: the LDS budget may refuse it)
                elif c.carried_pipelined:
                    c.pipeline_carried = False
                    c.operand_registers, c.vgpr_accumulators = True, True
                    _run(c, "verify", "schedule")
                else:
                    _relieve_pressure(c, c.kernel.threads, e)
                    return
            except ResourceError:
                raise first from None


def _next_rotation(rotation: str):
    """The split of an in-wave software pipeline to try after `rotation` ran out of registers; None after the last.
    (Where `rotation` did not apply and the pipeliner took a later split, that one is tried once more: rare.)"""
    later = ROTATIONS[ROTATIONS.index(rotation) + 1:]
    return later[0] if later else None


def _allocate_scheduled(c: Compilation):
    """The scheduled order, then the emitted one, each without and then with lifetime holes; the last attempt's
    ResourceError when none fits."""
    threads = c.kernel.threads
    orders = [c.insts, c.builder.insts] if c.insts is not c.builder.insts else [c.insts]
    attempts = [(insts, False) for insts in orders] + [(insts, True) for insts in orders]
    for n, (insts, holes) in enumerate(attempts, 1):
        try:
            c.insts, c.counts = allocate(insts, c.builder, threads, holes=holes)  # (checks the workgroup fits)
            return
        except ResourceError:
            if n == len(attempts):
                raise


def _relieve_pressure(c: Compilation, threads: int, error: ResourceError):
    """The last resort before `error` (amdgcn/pressure.py): fragments' register groups cut into the pieces the
    instructions name, first in the emitted order, then with each block's global loads issued at most `window`
    loads ahead of their consumers, from the widest window down. The asm says which one fitted (a comment line);
    `error`, which names the values live at the peak of the emitted order, when none does."""
    insts = c.builder.insts
    for window in (None, *WINDOWS):
        order = insts if window is None else sink_loads(insts, c.arch, window)
        try:
            files = split_groups(order, c.builder)
            c.insts, c.counts = allocate(split_webs(order, files), files, threads)
        except ResourceError:
            continue
        how = "" if window is None else f", global loads issued at most {window} ahead of their first use"
        needed = re.search(r"needs \d+ \w+", str(error))
        c.register_note = (f"registers: {c.counts['vgprs']} VGPRs with fragment groups split{how} (the emitted "
                           f"order {needed.group(0) if needed else 'does not fit'})")
        c.insts.insert(0, Inst("", kind=COMMENT, comment=c.register_note))
        return
    raise error


def _mfma_priority(c: Compilation):
    level = c.arch.mixed_loop_mfma_prio
    if level and _waves_per_simd(c.kernel, c.arch) >= 2 and _mixes_mfma_and_vector_work(c.traced):
        c.insts = raise_mfma_priority(c.insts, level)


def _waves_per_simd(kernel: N.Kernel, arch) -> int:
    """The most waves of one workgroup on a SIMD."""
    return -(-kernel.threads // (arch.wave_size * arch.simds_per_cu))


def _mixes_mfma_and_vector_work(kernel: N.Kernel) -> bool:
    """Whether a loop of `kernel` holds a gemm and vector work on fragments beside it (flash attention's softmax):
    the loops whose MFMA runs amdgcn/priority.py raises."""
    for loop in N.walk(kernel.body):
        body = [x for b in loop.bodies() for x in b]
        if any(x.k_loop_role() == COMPUTE for x in body) and any(
                x.k_loop_role() is None and any(w.buffer.scope == N.FRAGMENT for w in x.writes()) for x in body):
            return True
    return False


def _insert_waits(c: Compilation):
    c.insts = insert_waits(c.insts, c.arch)


def _insert_hazard_nops(c: Compilation):
    c.insts = insert_hazard_nops(c.insts, c.arch)


def _render(c: Compilation):
    kernel, abi, counts, insts = c.kernel, c.abi, c.counts, c.insts
    asm = render(kernel, c.arch, abi, insts, c.lds_bytes, counts)
    # a grid dimension of dynamic sizes is its expression's text (jit.CompiledKernel.grid_for evaluates it)
    grid = [g if isinstance(g, int) else str(g) for g in kernel.grid]
    meta = dict(name=kernel.name, arch=c.arch.name, grid=grid, block=list(kernel.block),
                lds_bytes=c.lds_bytes, vgprs=counts["vgprs"], agprs=counts["agprs"], sgprs=counts["sgprs"],
                kernarg_size=abi.kernarg_size,
                args=[dict(name=a.param.name, kind=a.param.kind, offset=a.offset, size=a.size,
                           dtype=a.param.dtype.name) for a in abi.args],
                source=kernel.loc, instructions=sum(1 for i in insts if i.kind not in ("label", "comment")))
    ir = print_kernel(kernel, c.layouts) if c.layouts or kernel is not c.traced else None
    if ir is not None and c.register_note:
        ir += f"  // {c.register_note}\n"
    c.lowered = Lowered(asm, meta, ir)


PASSES = (
    Pass("verify", _verify, "the tile IR's own rules (ir/verify.py)"),
    Pass("memory_staging", _stage_memory, "shared / global element access and shared copies through fragments "
         "(passes/memspace.py)"),
    Pass("operand_registers", _operand_registers, "loop-invariant shared gemm A operands -> registers "
         "(passes/operand_registers.py)"),
    Pass("pipelining", _pipeline, "T.Pipelined K loops -> prologue, steady loop, epilogue (passes/pipelining.py)"),
    Pass("gemm_planning", _plan_gemms, "the MFMA plan of every T.gemm: shape, accumulators, a VGPR floor"),
    Pass("layout_inference", _infer_layouts, "a layout for every fragment from the ops' constraints; layout "
         "conversions where two uses disagree (passes/layout_inference.py)"),
    Pass("reduction_scratch", _reduction_scratch, "LDS scratch of cross-wave reductions (passes/reduce.py)"),
    Pass("lds_allocation", _allocate_lds, "LDS offsets of every shared buffer and pipeline stage; the LDS budget"),
    Pass("abi_prologue", _abi_prologue, "the machine builder, kernel arguments and ids (amdgcn/abi.py)"),
    Pass("layouts", _layouts, "the registers of every fragment's layout (passes/layout.py)"),
    Pass("workgroup_remap", _workgroup_remap, "T.use_swizzle's workgroup order (ops' lower_prologue)"),
    Pass("statements", _statements, "each statement -> machine instructions on virtual registers; a zeroed VGPR "
         "accumulator folded into its first MFMA (amdgcn/zero_srcc.py); register copies coalesced "
         "(amdgcn/coalesce.py)"),
    Pass("schedule", _schedule, "list scheduling around MFMAs, when schedule='interleave' (amdgcn/schedule.py)"),
    Pass("regalloc", _allocate_registers, "virtual -> physical registers; the register budget (amdgcn/regalloc.py)"),
    Pass("mfma_priority", _mfma_priority, "s_setprio around the MFMA runs of loops that mix them with vector work, "
         "where the arch table says it pays (amdgcn/priority.py)"),
    Pass("waits", _insert_waits, "s_waitcnt for memory counters (amdgcn/waitcnt.py)"),
    Pass("hazards", _insert_hazard_nops, "wait states the hardware does not enforce (amdgcn/hazards.py)"),
    Pass("render", _render, "assembly text, kernel descriptor and metadata (amdgcn/emit.py)"),
)
PASS_NAMES = tuple(p.name for p in PASSES)
# The compiler's resource checks are the passes up to FEASIBILITY_LAST (tilegcn.autotune.feasibility runs exactly
# those): what does not fit fails there, so a kernel that passes them compiles. The ones made before any statement
# is lowered (IR verification, pipelining, the gemm plans, the LDS budget) end at PLAN_LAST and are cheap; the
# register budget needs the lowered code, scheduled and allocated.
PLAN_LAST = "lds_allocation"
FEASIBILITY_LAST = "regalloc"


def _pass_range(first: str, last: str) -> tuple:
    for name in (first, last):
        if name not in PASS_NAMES:
            raise ArgumentError(f"tilegcn.compiler: no pass {name!r}; the passes are {', '.join(PASS_NAMES)}")
    return PASSES[PASS_NAMES.index(first):PASS_NAMES.index(last) + 1]


def _run(c: Compilation, first: str, last: str) -> Compilation:
    for p in _pass_range(first, last):
        t0 = time.perf_counter()
        p.run(c)
        c.seconds[p.name] = time.perf_counter() - t0
    return c


def run_passes(kernel: N.Kernel, options, *, last: str = "render") -> Compilation:
    """Run `PASSES` on a traced kernel from the first up to `last` (inclusive); `options`: CompileOptions, or
    an arch name for the default options."""
    options = CompileOptions.of(options)
    if options.arch is None:
        raise ArgumentError("tilegcn.compiler: CompileOptions.arch is None; name the target (options.with_arch)")
    return _run(Compilation(options, kernel), PASS_NAMES[0], last)


def run_machine_passes(insts: list, options, *, first: str = "waits", last: str = "hazards") -> list:
    """The machine passes `first`..`last` of `PASSES` over hand-built instructions whose registers are already
    physical (the default: wait counts, then hazard nops), as `lower` runs them; returns the instructions."""
    _pass_range(first, last)  # (names them all when `first` or `last` is no pass)
    if PASS_NAMES.index(first) < PASS_NAMES.index("waits"):
        raise ArgumentError(f"tilegcn.compiler.run_machine_passes starts at 'waits' or later (got {first!r}): "
                            "schedule and regalloc need the kernel's builder, run them through run_passes")
    c = Compilation(CompileOptions.of(options), None, insts=list(insts))
    return _run(c, first, last).insts


def plan_resources(kernel: N.Kernel, options) -> Compilation:
    """The compiler's resource checks made before any statement is lowered: `PASSES` up to `PLAN_LAST` (IR
    verification, software pipelining, the MFMA plan of every T.gemm and the LDS allocation of every pipeline
    stage); a CompileError (ResourceError) names what does not fit. Cheap: tilegcn.autotune's sweep runs it on
    every config before compiling any. A Program (several T.Kernel blocks): each kernel, the last one's Compilation
    returned."""
    return _each_kernel(kernel, options, PLAN_LAST)


def check_resources(kernel: N.Kernel, options) -> Compilation:
    """Every resource check of the compiler: `PASSES` up to `FEASIBILITY_LAST` (`plan_resources`, then the
    statement lowering, scheduling and register allocation, whose register budget is the last check). `lower`
    runs these very passes first, so a kernel this accepts compiles and one it refuses fails `lower` with the
    same error: tilegcn.autotune.feasibility is this. A Program: each kernel, as `plan_resources`."""
    return _each_kernel(kernel, options, FEASIBILITY_LAST)


def _each_kernel(kernel, options, last: str) -> Compilation:
    kernels = kernel.kernels if isinstance(kernel, N.Program) else [kernel]
    return [run_passes(k, options, last=last) for k in kernels][-1]


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


@_gc_paused
def lower(kernel: N.Kernel, options) -> Lowered:
    """Compile a traced kernel with every pass of `PASSES`; `options`: CompileOptions, or an arch name for the
    default options (`lower(kernel, "gfx942")`)."""
    return run_passes(kernel, options).lowered


def lower_program(program: N.Program, options) -> Lowered:
    """Compile a program of several T.Kernel blocks: each kernel through every pass of `PASSES` on its own, then
    one code object holding them all (amdgcn/multikernel.py). meta.json: the program's `name` and `args` (what a
    call passes), the first kernel's launch and resources at the top level, and `kernels`, each kernel's own meta
    with `args` the names of the program's parameters it takes, in launch order."""
    lowered = [lower(k, options) for k in program.kernels]
    meta = dict(lowered[0].meta)
    meta.update(name=program.name, args=[{"name": p.name, "kind": p.kind} for p in program.params],
                source=program.loc, kernels=[dict(m.meta) for m in lowered])
    ir = "".join(f"// kernel {k.name} (launch {i} of {len(lowered)}):\n{m.ir or print_kernel(k)}"
                 for i, (k, m) in enumerate(zip(program.kernels, lowered)))
    return Lowered(merge_kernel_asm([m.asm for m in lowered]), meta, ir)
