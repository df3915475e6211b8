"""Tile ops: the protocol every statement of a kernel body implements, and the one registry of op classes.

A tile op is one statement of tile IR: a copy, a fill, a T.Parallel store, a gemm, a loop... Its class (one file
each under `tilegcn/ops/`, registered with `@register`) owns everything the compiler asks of that statement:

- its fields (a dataclass), and `verify` (the structural rules later passes rely on, raising at the user's line);
- `print_to`: its line(s) in kernel.ir;
- access regions, `reads()` / `writes()`: the `Region`s of buffers the statement itself touches (a loop's body
  statements report their own);
- `bodies()` / `with_bodies()`: the statement lists it holds (a loop's body), for every walk over a kernel;
- layout facts: `layout_constraints(gemm_plans, threads)` (what the op needs of its fragments' layouts, as the
  constraint objects of ir/layout.py that layout inference solves: one layout shared, a slice of another, a
  forced layout, whole vectors), `converted(rule, fresh)` (the statements replacing it when one of its
  constraints disagrees with the other uses: a layout conversion, then the op on the converted fragment), and
  `forced_layouts()` (the kind of layout it imposes on a buffer, e.g. the MFMA accumulator of a gemm);
- software-pipelining facts: `k_loop_role()` (LOAD: a global -> shared tile load; COMPUTE: work that reads
  shared tiles), `pipeline_stages()` (the stages a loop asks for), `stage_writes()` (the pipeline stage an async
  copy lands in), `in_pipeline(ctx)` (whether its lowering shares the registers of a pipelined K loop);
- memory spaces: `staged(stager)` (the statements replacing it where its shared / global accesses go through
  staging fragments, passes/memspace.py);
- lowering: `lower_prologue(ctx)` (code before any statement, e.g. the workgroup remap) and `lower(ctx,
  lower_body)` (its instructions; `lower_body(ctx, stmts)` lowers nested statements).

The printer, the verifier, the pipeliner, layout inference and the lowering driver call these methods and never
branch on an op's class, so adding an op is one file (docs/internals.md, "Adding a tile op"). The shape follows
TileLang's TileOperatorNode (src/op/operator.h: Lower, InferLayout, GetAccessRegions).

This module imports nothing outside `ir/`: the op classes live in `tilegcn/ops/`, which may import the lowering
passes; a pass that must make an op (the pipeliner makes async copies) names its class through `op_class`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

from .nodes import Buffer, Region, walk

# k_loop_role(): what a statement of a T.Pipelined body is to the software pipeliner (passes/pipelining.py)
LOAD, COMPUTE = "load", "compute"
# forced_layouts(): layout kinds an op imposes on a buffer (passes/layout.py)
MFMA_ACCUMULATOR = "mfma_accumulator"

REGISTRY: dict = {}  # opname -> TileOp subclass

# the methods a registered op must define itself (the rest have a meaning by default: no access, no layout fact)
REQUIRED = ("print_to", "lower")


@dataclass(eq=False)
class TileOp:
    """Base of every tile-IR statement. Defaults say "this op has no such fact"; `REQUIRED` methods must be given."""

    opname: ClassVar[str] = ""  # the op's name in the registry (and the first word of its kernel.ir line)
    allowed_in_parallel: ClassVar[bool] = False  # may the tracer record it inside `T.Parallel`?
    loc: str | None = field(default=None, kw_only=True)  # the user's source line "file:line"

    # ---- text and checks ----
    def print_to(self, out) -> None:
        """Append this statement's line(s) to `out` (an `ir.printer.IRPrinter`)."""
        raise NotImplementedError(f"{type(self).__name__}.print_to")

    def verify(self, scope) -> None:
        """Raise a CompileError at `self.loc` where a rule later passes rely on is broken. `scope` is the
        verifier's `VerifyScope` (nesting depth, per-kernel facts)."""

    # ---- access regions (the op's own; a body's statements report theirs) ----
    def reads(self) -> tuple:
        return ()

    def writes(self) -> tuple:
        return ()

    # ---- nested statements ----
    def bodies(self) -> tuple:
        """The statement lists this op holds, in program order."""
        return ()

    def with_bodies(self, bodies: tuple) -> TileOp:
        """A copy of this op holding `bodies` instead (one list per `bodies()` list)."""
        return self

    # ---- memory spaces ----
    def staged(self, stager) -> list | None:
        """The statements replacing this op before layout inference where it touches shared or global memory in a
        way only fragments can (passes/memspace.py: element access inside T.Parallel, shared <-> global copies),
        through the staging fragments `stager.fragment(...)` makes; None keeps the op."""
        return None

    # ---- layout facts ----
    def layout_constraints(self, gemm_plans: dict, threads: int) -> tuple:
        """What the op needs of the layouts of the fragments it touches: ir/layout.py's Force, Same, SliceOf,
        Whole and Vector (`gemm_plans`: accumulator Buffer -> GemmPlan)."""
        return ()

    def converted(self, rule, fresh) -> list | None:
        """The statements that replace this op when its constraint `rule` disagrees with the layouts the other
        uses gave (a layout conversion into a new fragment, then this op reading that one), or None where no
        conversion can settle it. `fresh(buffer)` makes (a fragment like `buffer`, its LDS scratch)."""
        return None

    def forced_layouts(self) -> tuple:
        """Pairs (buffer, layout kind) the op imposes, e.g. (C, MFMA_ACCUMULATOR) for a gemm."""
        return ()

    # ---- software pipelining facts ----
    def k_loop_role(self) -> str | None:
        """LOAD, COMPUTE or None (other work: a loop holding it is software pipelined only where that work touches
        no shared memory the loop writes, passes/pipelining.py `_carried`)."""
        return None

    def pipeline_stages(self) -> int:
        """The pipeline stages the user asked for (T.Pipelined's num_stages); 1 for anything but a loop."""
        return 1

    def stage_writes(self) -> tuple:
        """Pairs (shared buffer, stage) of the pipeline stages this op writes asynchronously."""
        return ()

    def in_pipeline(self, ctx) -> bool:
        """Whether this statement belongs to a pipelined K loop (prologue, steady loop, epilogue), whose
        statements share their address registers instead of freeing them statement by statement."""
        return False

    # ---- lowering ----
    def lower_prologue(self, ctx) -> None:
        """Code emitted before any statement is lowered (only top-level statements are asked)."""

    def lower(self, ctx, lower_body) -> None:
        """Emit this statement's instructions into `ctx.b`; `lower_body(ctx, stmts)` lowers nested statements."""
        raise NotImplementedError(f"{type(self).__name__}.lower")


class OneBody:
    """Mixin for an op that holds one statement list in its `body` field (loops): its `bodies` and `with_bodies`."""

    def bodies(self) -> tuple:
        return (self.body,)

    def with_bodies(self, bodies: tuple):
        (body,) = bodies
        return dataclasses.replace(self, body=body)


def missing_methods(cls) -> list:
    """The protocol methods `cls` leaves to TileOp although they have no default meaning, and a missing opname."""
    missing = [m for m in REQUIRED if getattr(cls, m) is getattr(TileOp, m)]
    if not cls.opname:
        missing.append("opname")
    return missing


def register(cls):
    """Class decorator: enter a TileOp subclass in REGISTRY under its `opname`, after checking it implements the
    protocol. A second class under a taken name is refused (two ops would print alike)."""
    if not (isinstance(cls, type) and issubclass(cls, TileOp)):
        raise TypeError(f"register: {cls!r} is not a TileOp subclass")
    missing = missing_methods(cls)
    if missing:
        raise TypeError(f"tile op {cls.__name__} does not implement {', '.join(missing)}")
    known = REGISTRY.get(cls.opname)
    if known is not None and known.__qualname__ != cls.__qualname__:
        raise ValueError(f"tile op name {cls.opname!r} is taken by {known.__module__}.{known.__qualname__}")
    REGISTRY[cls.opname] = cls
    return cls


def op_class(opname: str):
    """The registered class of `opname` (for passes, which cannot import tilegcn.ops: it imports them)."""
    try:
        return REGISTRY[opname]
    except KeyError:
        raise LookupError(f"no tile op {opname!r} is registered (import tilegcn.ops)") from None


def statements_of(stmts, opname: str) -> list:
    """Every statement named `opname` in `stmts`, nested ones included, in program order."""
    return [s for s in walk(stmts) if s.opname == opname]


def whole(buffer: Buffer) -> Region:
    """The region covering all of `buffer`."""
    return Region(buffer, (0,) * len(buffer.shape), tuple(buffer.shape))
