"""Device control flow: If, While and DeviceLoop statements (tilegcn/ops/branch.py, while_loop.py,
device_loop.py) as scalar branches.

Their conditions and bounds are uniform over the workgroup, so every wave takes the same path. Block ids, loop
variables and runtime int scalars are SGPR values: the condition sets SCC (`s_cmp_*_i32`; `and` / `or` / `not`
combine 0/1 SGPRs with `s_and_b32` / `s_or_b32` / `s_xor_b32`, which set SCC to "result != 0"). A condition on a
variable (a one-element fragment, which every thread holds alike) is compared per lane into a mask (VCC, index
parts as all-or-no lanes) and SCC = (mask & EXEC) != 0. `s_cbranch_scc0` skips the code of a branch not taken.
Barriers inside such branches are reached by every wave or by none; no branch needs an EXEC mask (the language
has no value that differs between a workgroup's threads outside T.Parallel, where an `if` is per element).

What the lowering keeps straight across the branches:
- values computed for reuse (the builder's CSE): the builder computes such a value in the outermost frame where
  its symbols exist (amdgcn/builder.py), so each statement is lowered in a frame of its own (defining no symbol):
  what its branches compute for reuse lands before its first instruction, on every path, and a later use on
  another path finds it computed (a value placed after the `s_cbranch` would be missing there);
- the LDS access state barrier placement reads (passes/gemm.py lds_barrier): after the join it is the state both
  paths agree on, else "any";
- wait counts, hazards and register lives follow the branches by themselves (cfg.py dataflow, liveness.py: a
  forward branch needs nothing, a loop is a label and a later branch back to it).
"""
from __future__ import annotations

import contextlib

from ..amdgcn import isa
from ..amdgcn.builder import Frame
from ..amdgcn.isa import EXEC, Inst, Reg
from ..errors import CompileError
from ..ir import nodes as N
from ..ir.layout import register_of
from ..ir.printer import print_expr
from .context import Context
from .elementwise import ElementEvaluator
from .pipeline import _enter_loop_lds_state, lower_pipelined_body

_SOPC = {"eq": "eq", "ne": "lg", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}


def condition_to_scc(ctx: Context, cond: N.Condition, loc=None):
    """Emit code that sets SCC to the truth of `cond` (a uniform condition)."""
    b = ctx.b
    if cond.reads_elements():  # a lane mask, the same in every lane: SCC = (mask & EXEC) != 0
        mask = _condition_mask(ctx, cond, loc)
        b.emit("s_and_b64", mask, mask, EXEC, comment=cond.text())
        b.s.free(mask)
        return
    if cond.op in _SOPC:
        left, right = (ctx.lower.sgpr(x) for x in cond.args)  # before the compare: their math writes SCC
        if isinstance(left, int) and isinstance(right, int):  # e.g. `bx - bx == 0`: SymPy left two constants
            held = b.s.alloc(what="constant compare operand")
            b.emit("s_mov_b32", held, left)
            left = held
        b.emit(f"s_cmp_{_SOPC[cond.op]}_i32", left, right, comment=cond.text())
        return
    flags = [_condition_flag(ctx, x) for x in cond.args]
    out = b.s.alloc(what=f"condition {cond.op}")
    if cond.op == "not":
        b.emit("s_xor_b32", out, flags[0], 1, comment=cond.text())
    else:
        b.emit("s_and_b32" if cond.op == "and" else "s_or_b32", out, flags[0], flags[1], comment=cond.text())
    for flag in flags:
        b.s.free(flag)
    b.s.free(out)


def _condition_mask(ctx: Context, cond: N.Condition, loc) -> Reg:
    """An SGPR pair holding the lanes where `cond` holds: variables' element conditions are compared per lane
    (VALU, into VCC); index parts are uniform (all lanes or none)."""
    b = ctx.b
    mask = b.s.alloc(2, align=2, what="condition mask")
    if cond.op == "element":
        ev = _VariableEvaluator(ctx, loc)
        value = ev.eval_value(cond.args[0], 0)[0]  # a comparison's value: a lane mask (or a folded bool)
        if isinstance(value, bool):  # folded while evaluating (a comparison of two constants)
            b.emit("s_mov_b64", mask, -1 if value else 0)
        else:
            b.emit("s_mov_b64", mask, value, uses=(value,))
        ev.free_temps()
    elif cond.op in _SOPC:
        condition_to_scc(ctx, cond)
        b.emit("s_cselect_b64", mask, -1, 0)
    elif cond.op == "not":
        inner = _condition_mask(ctx, cond.args[0], loc)
        b.emit("s_not_b64", mask, inner)
        b.s.free(inner)
    else:
        left, right = (_condition_mask(ctx, a, loc) for a in cond.args)
        b.emit(f"s_{cond.op}_b64", mask, left, right)
        b.s.free(left)
        b.s.free(right)
    return mask


class _VariableEvaluator(ElementEvaluator):
    """Element conditions outside T.Parallel: they read one-element variables, which every thread holds in one
    register of its own (their layouts replicate them), and indices, which are uniform."""

    def __init__(self, ctx: Context, loc):
        super().__init__(ctx, {})
        self.loc = loc

    def register_of(self, e: N.ElemRef, r: int) -> int:
        if e.buffer.scope != N.FRAGMENT:
            raise CompileError(f"a device test reads {e.buffer.scope} {e.buffer.name}: it tests variables held in "
                               "registers; copy the value into a T.alloc_var first", location=self.loc)
        reg = register_of(self.ctx.layouts[e.buffer].layout, tuple(e.index))
        if reg is None:
            raise CompileError(f"a device test reads {e.buffer.name}, which not every thread holds: a branch must go "
                               "the same way in every thread; test a T.alloc_var", location=self.loc)
        return reg

    def _index_value(self, e: N.IndexValue, r: int):
        """A uniform index as a 32-bit int (a constant or an SGPR); eval_as converts it where it meets a float."""
        value = self.ctx.lower.sgpr(e.expr)
        return int(value) if isinstance(value, int) else value


def _condition_flag(ctx: Context, cond: N.Condition):
    """An SGPR holding 1 where `cond` holds, else 0."""
    condition_to_scc(ctx, cond)
    flag = ctx.b.s.alloc(what="condition flag")
    ctx.b.emit("s_cselect_b32", flag, 1, 0)
    return flag


def _label(ctx: Context, name: str):
    ctx.b.frames[-1].insts.append(Inst(name, kind=isa.LABEL))


@contextlib.contextmanager
def _branch_frame(ctx: Context):
    """The code of one statement with branches, in a frame that defines no symbol: what its branches compute for
    reuse is placed in an enclosing frame, before the statement, where every path runs it."""
    b = ctx.b
    frame = Frame([])
    b.frames.append(frame)
    try:
        yield
    finally:
        b.frames.pop()
        b.frames[-1].insts.extend(frame.insts)


def _join_lds_state(a: str, b: str) -> str:
    return a if a == b else "any"


def lower_if(ctx: Context, s, lower_body):
    """`s`: an If op. `if c: T else: E` -> `SCC = c; s_cbranch_scc0 ELSE; T; s_branch END; ELSE: E; END:`, all in
    one frame of its own, so that the values the branches compute for reuse land before the branch."""
    b = ctx.b
    end = b.label("endif")
    orelse = b.label("else") if s.else_body else end
    before = ctx.lds_state
    with _branch_frame(ctx):
        condition_to_scc(ctx, s.condition, s.loc)
        b.emit("s_cbranch_scc0", orelse, comment=f"skip unless {s.condition.text()}")
        lower_body(ctx, s.then_body)
        after_then = ctx.lds_state
        if s.else_body:
            b.emit("s_branch", end)
            _label(ctx, orelse)
            ctx.lds_state = before
            lower_body(ctx, s.else_body)
            ctx.lds_state = _join_lds_state(after_then, ctx.lds_state)
        else:
            ctx.lds_state = _join_lds_state(after_then, before)
        _label(ctx, end)


def lower_device_loop(ctx: Context, s, lower_body):
    """`s`: a DeviceLoop op. `k = start; if k < stop: do { body; k += step } while k < stop` with start and stop
    evaluated once before the loop (the guard makes an empty range run nothing); the guard and the loop in one frame
    of their own, so that loop-invariant values land before the guard."""
    b = ctx.b
    start, stop = ctx.lower.sgpr(s.start), ctx.lower.sgpr(s.stop)
    if isinstance(stop, int):
        stop_reg = b.s.alloc(what=f"loop stop {s.stop}")
        b.emit("s_mov_b32", stop_reg, stop)
        stop = stop_reg
    counter = b.s.alloc(what=f"loop counter {s.var}")
    end = b.label("endloop")
    head = b.label("loop")
    before = ctx.lds_state
    with _branch_frame(ctx):
        b.emit("s_mov_b32", counter, start, comment=f"{s.var} = {s.start}")
        b.emit("s_cmp_lt_i32", counter, stop, comment=f"{s.var} < {s.stop}")
        b.emit("s_cbranch_scc0", end, comment="no trip")
        _enter_loop_lds_state(ctx, s.body)
        ctx.loop_ends.append(end)
        with b.loop_frame(s.var, counter) as frame:
            frame.insts.append(Inst(head, kind=isa.LABEL))
            lower_pipelined_body(ctx, s.body, lower_body, frame)
            b.emit("s_add_u32", counter, counter, s.step)
            b.emit("s_cmp_lt_i32", counter, stop)
            b.emit("s_cbranch_scc1", head)
        ctx.loop_ends.pop()
        b.frames[-1].insts.extend(frame.insts)
        _label(ctx, end)
    ctx.lds_state = _join_lds_state(ctx.lds_state, before)


def lower_loop_exit(ctx: Context, s):
    """`s`: a LoopExit op. `SCC = condition; s_cbranch_scc0` to the end of the innermost device loop: the trip
    leaves the loop there rather than at the back-edge, so that the wait counts at the loop head see only the
    paths that ran the whole trip (a forward branch around the rest of the trip would join them at the back-edge
    with the paths that left early, and every wait after the head would count for both)."""
    if not ctx.loop_ends:
        raise CompileError("internal: a loop exit outside any device loop; please report this kernel",
                           location=s.loc)
    condition_to_scc(ctx, s.condition, s.loc)
    ctx.b.emit("s_cbranch_scc0", ctx.loop_ends[-1], comment=f"leave the loop unless {s.condition.text()}")


def lower_while(ctx: Context, s, lower_body):
    """`s`: a While op. `HEAD: SCC = cond; s_cbranch_scc0 END; body; s_branch HEAD; END:` (the test reads the
    variables the body updates, so it is evaluated inside the loop, every trip)."""
    b = ctx.b
    head, end = b.label("while"), b.label("endwhile")
    before = ctx.lds_state
    _enter_loop_lds_state(ctx, s.body)
    with _branch_frame(ctx):
        _label(ctx, head)
        condition_to_scc(ctx, s.condition, s.loc)
        b.emit("s_cbranch_scc0", end, comment=f"until not {s.condition.text()}")
        lower_body(ctx, s.body)
        b.emit("s_branch", head)
    ctx.lds_state = _join_lds_state(ctx.lds_state, before)
    _label(ctx, end)


def lower_let_index(ctx: Context, s):
    """`s`: a LetIndex op. Its int value, the same in every lane, into an SGPR (`v_readfirstlane_b32` from the VGPR
    it is computed in) that names `s.var` from here on: the symbol belongs to the innermost open frame, so the index
    math built on it is computed there, after this read (amdgcn/builder.py frame_of)."""
    b = ctx.b
    ev = _VariableEvaluator(ctx, s.loc)
    value = ev.eval_as(s.value, 0, N.INT)
    out = b.s.alloc(what=f"variable index {s.var}")
    if isinstance(value, Reg) and value.file == "v":
        b.emit("v_readfirstlane_b32", out, value, comment=f"{s.var} = {print_expr(s.value)}")
    else:
        b.emit("s_mov_b32", out, value, comment=f"{s.var} = {print_expr(s.value)}")
    ev.free_temps()
    b.symbol_regs[s.var] = out
    b.frames[-1].symbols.add(s.var)
