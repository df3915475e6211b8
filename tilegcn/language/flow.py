"""Device control flow written in Python: `if` / `elif` / `else`, `while`, `for ... in range(...)`, and `and` / `or`
/ `not` / chained comparisons whose values only the device knows (block ids, loop variables, runtime int scalars).

Run as ordinary Python, `if bx == 0:` would ask a block id for its truth while tracing, once for every block. As
Triton's code generator and TileLang's parser do, tilegcn reads the kernel function's source and rewrites these
statements (`rewritten`) into calls of the helpers below, which keep Python's meaning when the test is a Python
value (a constant, a shape, a keyword constant: decided while tracing, as TileLang and Triton decide constexprs) and
record If / DeviceLoop tile ops when it is a device value. The rewritten function keeps the user's line numbers,
so every message names the user's line.

    if TEST:                          for __tg_if1 in __tg_flow.if_(TEST, locals(), ("x",)):
        A            becomes              if __tg_if1.then:
    else:                                     A; __tg_if1.end(locals())
        B                                 else:
                                              B; __tg_if1.end(locals())

A Python test yields one pass through the branch it picks; a device test two passes, each recorded into its own
body (an If op; inside T.Parallel, stores that keep the old value where their branch is not taken). A `while` on
a variable the device updates (`v[0]` of a T.alloc_var) records a While op. A `for` whose body reads and then
rebinds a name is checked once its loop turns out to be a device loop (traced once: the name cannot carry a
value from trip to trip). Statements the rewrite leaves alone (their device tests are refused with a message
saying why): an `if` whose branches `return`, `break` or `continue`, a `while ... else`, a `for ... else`.
"""
from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import inspect
import numbers
import operator
import sys
import textwrap
import types

import sympy

from .. import ops
from ..errors import CompileError, user_location
from ..ir import nodes as N
from .proxies import DeviceCondition, IndexProxy, ScalarProxy, _device_index
from .tracer import current

FLOW = "__tg_flow"
_LOOP_NODES = (ast.For, ast.AsyncFor, ast.While)  # statements that `break` / `continue` belong to


# ---- the rewrite -----------------------------------------------------------------------------------------------
def rewritten(fn, namespace: dict | None = None):
    """`fn` with its control flow rewritten (see the module doc), or `fn` itself when its source cannot be read (a
    lambda, the REPL) or holds nothing to rewrite. `namespace`: the globals it runs in (default: its own)."""
    if not isinstance(fn, types.FunctionType):
        return fn
    maker = _rewritten_maker(fn.__code__)
    if maker is None:
        return fn if namespace is None else _with_globals(fn, namespace)
    try:
        free = [cell.cell_contents for cell in fn.__closure__ or ()]
    except ValueError:  # a closure variable not bound yet: keep Python's own reading
        return fn if namespace is None else _with_globals(fn, namespace)
    make = types.FunctionType(maker, fn.__globals__ if namespace is None else namespace, "__tg_make")
    out = make(sys.modules[__name__], *free)
    out.__defaults__, out.__kwdefaults__ = fn.__defaults__, fn.__kwdefaults__
    return out


def _with_globals(fn, namespace: dict):
    out = types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__)
    out.__kwdefaults__ = fn.__kwdefaults__
    return out


@functools.lru_cache(maxsize=256)
def _rewritten_maker(code):
    """The code object of `def __tg_make(__tg_flow, *free variables): <the rewritten function>; return it`, or None."""
    try:
        lines, first = inspect.getsourcelines(code)
    except (OSError, TypeError):
        return None
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return None
    node = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name == code.co_name), None)
    if node is None:
        return None
    ast.increment_lineno(tree, first - 1)
    rewriter = _Rewriter(node)
    node = rewriter.visit(node)
    if not rewriter.changed:
        return None
    _strip_def_time_expressions(node)
    args = [ast.arg(FLOW)] + [ast.arg(name) for name in code.co_freevars]
    maker = ast.FunctionDef("__tg_make", ast.arguments([], args, None, [], [], None, []),
                            [node, ast.Return(ast.Name(node.name, ast.Load()))], [], None)
    ast.copy_location(maker, node)
    module = ast.fix_missing_locations(ast.Module([maker], []))
    compiled = compile(module, code.co_filename, "exec")
    return next(c for c in compiled.co_consts if isinstance(c, types.CodeType))


def _strip_def_time_expressions(node):
    """Decorators, annotations and defaults are evaluated when `def` runs; the rewritten function takes the
    original's defaults and is never decorated or introspected (the tracer binds arguments on the original)."""
    node.decorator_list = []
    node.returns = None
    a = node.args
    for arg in a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x is not None]:
        arg.annotation = None
    a.defaults = [ast.Constant(None) for _ in a.defaults]
    a.kw_defaults = [None if d is None else ast.Constant(None) for d in a.kw_defaults]


def _flow(attr: str):
    return ast.Attribute(ast.Name(FLOW, ast.Load()), attr, ast.Load())


def _thunk(expr):
    return ast.Lambda(ast.arguments([], [], None, [], [], None, []), expr)


def _has(node, kinds) -> bool:
    return any(isinstance(n, kinds) for n in ast.walk(node))


def _jumps(stmts, loops_too: bool = True) -> bool:
    """Whether `stmts` leave the enclosing statement: a `return`, or (`loops_too`) a `break` / `continue` not
    inside a loop of their own; nested functions do not count."""
    for stmt in stmts:
        for n in _walk_own(stmt, into_loops=True):
            if isinstance(n, ast.Return):
                return True
        if loops_too and any(isinstance(n, (ast.Break, ast.Continue)) for n in _walk_own(stmt, into_loops=False)):
            return True
    return False


def _walk_own(node, into_loops: bool):
    """ast.walk without nested functions, classes and lambdas (nor loops, unless `into_loops`)."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        for child in ast.iter_child_nodes(n):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            if not into_loops and isinstance(child, _LOOP_NODES):
                continue
            todo.append(child)


def _assigned_names(stmts) -> set:
    names = set()
    for stmt in stmts:
        for n in _walk_own(stmt, into_loops=True):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                names.add(n.id)
    return names


def _carried_names(loop) -> tuple:
    """Names the loop's body reads before (or on the line where) it assigns them, other than the loop's own
    targets: values carried from one trip to the next."""
    targets = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    loads, stores = {}, {}
    for stmt in loop.body:
        for n in _walk_own(stmt, into_loops=True):
            if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
                loads.setdefault(n.target.id, n.lineno)
            if isinstance(n, ast.Name) and not n.id.startswith("__tg_") and hasattr(n, "lineno"):
                table = loads if isinstance(n.ctx, ast.Load) else stores
                table[n.id] = min(table.get(n.id, n.lineno), n.lineno)
    return tuple(sorted((name, line) for name, line in stores.items()
                        if name not in targets and name in loads and loads[name] <= line))


class _Rewriter(ast.NodeTransformer):
    """The statements and expressions of the module doc, each replaced at its own line."""

    def __init__(self, function):
        self.count = 0
        self.changed = False
        # TileLang's variable spellings (`v = value` stores into a T.alloc_var v): only where the program has one
        self.variables = any((isinstance(n, ast.Attribute) and n.attr == "alloc_var")
                             or (isinstance(n, ast.Name) and n.id == "alloc_var") for n in ast.walk(function))
        names = [n for n in ast.walk(function) if isinstance(n, ast.Name)]
        self.loads = [(n.id, n.lineno) for n in names if isinstance(n.ctx, ast.Load)]
        self.stores = [(n.id, n.lineno) for n in names if isinstance(n.ctx, ast.Store)]

    def _read_after(self, name: str, end: int) -> bool:
        """Whether `name` is read after line `end` before being assigned again (a later `for i in T.Parallel(...)`
        rebinds its `i` first: not a use of the branches' value)."""
        first_load = min((line for n, line in self.loads if n == name and line > end), default=None)
        if first_load is None:
            return False
        first_store = min((line for n, line in self.stores if n == name and line > end), default=None)
        return first_store is None or first_load < first_store

    def _fresh(self, base: str) -> str:
        self.count += 1
        return f"__tg_{base}{self.count}"

    def _call(self, node, attr: str, args):
        self.changed = True
        return ast.copy_location(ast.Call(_flow(attr), args, []), node)

    # -- expressions: and / or / not / chained comparisons ---------------------------------------------------------
    def visit_BoolOp(self, node):
        self.generic_visit(node)
        if _has(node, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)):
            return node
        return self._call(node, "and_" if isinstance(node.op, ast.And) else "or_",
                          [_thunk(v) for v in node.values])

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if not isinstance(node.op, ast.Not):
            return node
        return self._call(node, "not_", [node.operand])

    def visit_Compare(self, node):
        self.generic_visit(node)
        if len(node.ops) == 1 or _has(node, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)):
            return node
        ops = ast.Tuple([ast.Constant(type(op).__name__) for op in node.ops], ast.Load())
        return self._call(node, "chain", [node.left, ops] + [_thunk(c) for c in node.comparators])

    # -- statements ---------------------------------------------------------------------------------------------
    def visit_If(self, node):
        self.generic_visit(node)
        if _jumps(node.body + node.orelse):
            return node
        var = self._fresh("if")
        assigned = _assigned_names(node.body + node.orelse)
        used_after = sorted(n for n in assigned if self._read_after(n, node.end_lineno))
        end = ast.Expr(ast.Call(ast.Attribute(ast.Name(var, ast.Load()), "end", ast.Load()),
                                [ast.Call(ast.Name("locals", ast.Load()), [], [])], []))
        branch = ast.If(ast.Attribute(ast.Name(var, ast.Load()), "then", ast.Load()),
                        node.body + [end], (node.orelse or []) + [end])
        test = self._call(node.test, "if_", [node.test, ast.Call(ast.Name("locals", ast.Load()), [], []),
                                             ast.Constant(tuple(used_after))])
        out = ast.For(ast.Name(var, ast.Store()), test, [branch], [])
        return ast.fix_missing_locations(_located(out, node))

    def visit_Assign(self, node):
        self.generic_visit(node)
        if not self.variables or len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
            return node
        name = node.targets[0].id
        node.value = self._call(node.value, "assign", [ast.Call(ast.Name("locals", ast.Load()), [], []),
                                                       ast.Constant(name), node.value,
                                                       ast.Constant(isinstance(node.value, ast.Name))])
        return node

    def visit_AugAssign(self, node):
        """`v += x` on a variable's name: the store `v = v + x` (TileLang's reading), else Python's augmented
        assignment unchanged."""
        self.generic_visit(node)
        if not self.variables or not isinstance(node.target, ast.Name):
            return node
        name = node.target.id
        call = self._call(node, "augmented", [ast.Call(ast.Name("locals", ast.Load()), [], []), ast.Constant(name),
                                              ast.Constant(type(node.op).__name__), node.value])
        return ast.fix_missing_locations(_located(ast.Assign([ast.Name(name, ast.Store())], call), node))

    def visit_While(self, node):
        self.generic_visit(node)
        if node.orelse:
            return node
        var = self._fresh("while")
        jumps = _jumps(node.body)
        loop = self._call(node.test, "while_", [_thunk(node.test), ast.Constant(jumps)])
        return ast.fix_missing_locations(_located(ast.For(ast.Name(var, ast.Store()), loop, node.body, []), node))

    def visit_For(self, node):
        self.generic_visit(node)
        it = node.iter
        if node.orelse:
            return node
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range":
            node.iter = self._call(it, "range_", [ast.Constant(_jumps(node.body))] + it.args)
        carried = _carried_names(node)
        if carried:  # checked when the loop turns out to be a device loop (its body traced once)
            var = self._fresh("loop")
            loop = self._call(node.iter, "loop", [node.iter, ast.Call(ast.Name("locals", ast.Load()), [], []),
                                                  ast.Constant(carried)])
            node.iter = ast.NamedExpr(ast.Name(var, ast.Store()), loop)
            node.body = node.body + [ast.Expr(ast.Call(ast.Attribute(ast.Name(var, ast.Load()), "end", ast.Load()),
                                                       [ast.Call(ast.Name("locals", ast.Load()), [], [])], []))]
            node = ast.fix_missing_locations(_located(node, node))
        return node


def _located(new, old):
    """`new` and every node in it without a location at `old`'s line (a device test's messages name that line)."""
    for n in ast.walk(new):
        if "lineno" in n._attributes and not hasattr(n, "lineno"):
            ast.copy_location(n, old)
    return new


# ---- the helpers the rewritten function calls ------------------------------------------------------------------
def device_condition(value) -> N.Condition | None:
    """The device condition a test value stands for, or None for a Python value (decided while tracing). A device
    int itself (`if n:`, `while k:`) is tested against 0, as C and TileLang read it."""
    if isinstance(value, DeviceCondition):
        return value.condition
    if isinstance(value, N.Expr) and current().parallel is None:  # `v[0] < n` on a variable (T.alloc_var)
        return N.Condition("element", (value if N.is_condition(value) else N.apply("ne", value, 0.0),))
    if isinstance(value, (IndexProxy, ScalarProxy)):
        index = _device_index(value)
        if index is None:
            raise CompileError(f"a truth test on {value.describe()}: the device tests integer indices and int "
                               "runtime scalars; compare a float per element inside T.Parallel (T.if_then_else)")
        return N.Condition("ne", (index, sympy.Integer(0)))
    return None


def _both(op: str, a, b):
    return b if a is None else N.Condition(op, (a, b))


def and_(*thunks):
    """`a and b and ...` (each operand a thunk, evaluated in order): Python's value when every operand is a Python
    value; with device conditions among them, their conjunction (a Python operand that is true drops out, one that
    is false makes the whole false, as it would on the device)."""
    acc, value = None, None
    for thunk in thunks:
        value = thunk()
        condition = device_condition(value)
        if condition is None:
            if not value:
                return value
        else:
            acc = _both("and", acc, condition)
    return value if acc is None else DeviceCondition(acc)


def or_(*thunks):
    """`a or b or ...`: as and_, dually."""
    acc, value = None, None
    for thunk in thunks:
        value = thunk()
        condition = device_condition(value)
        if condition is None:
            if value:
                return value
        else:
            acc = _both("or", acc, condition)
    return value if acc is None else DeviceCondition(acc)


def not_(value):
    """`not x`."""
    condition = device_condition(value)
    return (not value) if condition is None else DeviceCondition(N.Condition("not", (condition,)))


_COMPARE = {"Eq": operator.eq, "NotEq": operator.ne, "Lt": operator.lt, "LtE": operator.le, "Gt": operator.gt,
            "GtE": operator.ge, "Is": operator.is_, "IsNot": operator.is_not,
            "In": lambda a, b: a in b, "NotIn": lambda a, b: a not in b}


def chain(left, ops: tuple, *thunks):
    """`a < b < c` (Python: `a < b and b < c`, b evaluated once)."""
    acc, value = None, None
    for op, thunk in zip(ops, thunks):
        right = thunk()
        value = _COMPARE[op](left, right)
        condition = device_condition(value)
        if condition is None:
            if not value:
                return value
        else:
            acc = _both("and", acc, condition)
        left = right
    return value if acc is None else DeviceCondition(acc)


_MISSING = object()


def _same(a, b) -> bool:
    if a is b:
        return True
    if isinstance(a, IndexProxy) and isinstance(b, IndexProxy):
        return a.expr == b.expr
    plain = (numbers.Number, str, type(None))
    return isinstance(a, plain) and isinstance(b, plain) and type(a) is type(b) and a == b


def _predicated(store, condition: N.Expr, loc):
    """A T.Parallel store that keeps the element's old value where `condition` does not hold."""
    if store.index is not None:
        raise CompileError(f"a store to global {store.buffer.name} under an `if` inside T.Parallel: store the value "
                           "picked with T.if_then_else(cond, value, other) instead, or stage it in a fragment",
                           location=store.loc or loc)
    old = N.ElemRef(store.buffer, tuple(store.indices))
    return dataclasses.replace(store, value=N.apply("if_then_else", condition, store.value, old))


class _If:
    """The passes of one `if` statement (see the module doc): `then` says which branch the pass runs."""

    def __init__(self, test, scope: dict, names: tuple):
        self.condition = device_condition(test)
        self.test = test
        self.names = names
        self.before = {n: scope.get(n, _MISSING) for n in names}
        self.ends: list = []
        self.then = True

    def end(self, scope: dict):
        """A branch ran to its end: what the names used after the `if` hold there."""
        self.ends.append({n: scope.get(n, _MISSING) for n in self.names})

    def __iter__(self):
        if self.condition is None and isinstance(self.test, N.Expr) and current().parallel is not None:
            yield from self._per_element()
            return
        if self.condition is None:
            self.then = bool(self.test)
            yield self
            return
        tracer = current()
        loc = user_location()
        if tracer.parallel is not None:
            raise CompileError(f"an `if` on the device condition `{self.condition.text()}` inside T.Parallel: "
                               "pick per element with T.if_then_else(cond, a, b), or put the `if` around the "
                               "T.Parallel loop", location=loc)
        bodies = yield from self._both_branches(tracer)
        self._check_rebound(loc)
        tracer.record(ops.If(self.condition, *bodies, loc=loc))

    def _both_branches(self, tracer):
        """Trace the `if` body twice, as the then and the else branch (`self.then` tells the user's code which),
        each into its own statement list; returns (then statements, else statements)."""
        bodies = ([], [])
        for then, body in zip((True, False), bodies):
            self.then = then
            tracer.bodies.append(body)
            try:
                yield self
            finally:
                tracer.bodies.pop()
        return bodies

    def _per_element(self):
        """`if x[i, j] > 0:` inside T.Parallel: each element decides. Both branches are traced; every store in them
        keeps the element's old value where its branch is not taken (`x[i, j] = T.if_then_else(cond, new, x[i, j])`),
        so later statements of either branch read what the element holds on its own path."""
        tracer = current()
        loc = user_location()
        cond = self.test if N.is_condition(self.test) else N.apply("ne", self.test, 0.0)
        bodies = yield from self._both_branches(tracer)
        self._check_rebound(loc)
        read = {e.buffer for e in N.walk_expr(cond) if isinstance(e, N.ElemRef)}
        if any(store.buffer in read for body in bodies for store in body):
            cond = self._held(tracer, cond)  # the branches change what it reads: decide once, before them
        for taken, body in zip((cond, N.apply("not", cond)), bodies):
            for store in body:
                tracer.body().append(_predicated(store, taken, loc))

    @staticmethod
    def _held(tracer, cond: N.Expr) -> N.Expr:
        """`cond` evaluated once per element into a fragment of the loop's shape (1.0 where it holds), as a
        condition on that fragment."""
        extents, indices = tracer.parallel
        held = tracer.alloc(N.FRAGMENT, tuple(extents), "float32", "cond").buffer
        tracer.body().append(ops.ParallelStore(tuple(extents), tuple(indices), held,
                                               N.apply("if_then_else", cond, 1.0, 0.0), loc=user_location()))
        return N.apply("ne", N.ElemRef(held, tuple(indices)), 0.0)

    def _text(self) -> str:
        if self.condition is not None:
            return self.condition.text()
        return N.print_condition(self.test) if N.is_condition(self.test) else str(self.test)

    def _check_rebound(self, loc):
        if len(self.ends) != 2:
            return
        for name in self.names:
            before = self.before[name]
            then, orelse = (end.get(name, before) for end in self.ends)
            if not _same(then, orelse):
                raise CompileError(
                    f"`{name}` is assigned in the device `if {self._text()}` and used after it, with a "
                    "different value on each path: a Python name holds one value while tracing, and which path "
                    "runs is decided on the device. Use the value only inside the branch that computes it, or "
                    "give both paths the same value; a value that must differ per path belongs in device memory "
                    "(a fragment or shared buffer written in each branch)", location=loc)


def if_(test, scope: dict, names: tuple):
    """The passes of `if test:` (see _If)."""
    return _If(test, scope, names)


def while_(test, jumps: bool):
    """The trips of `while test():`: Python's while its test is a Python value; a device While statement when it
    reads a variable the device updates (`while v[0] < n:` with v = T.alloc_var(...)), its body traced once."""
    value = test()
    condition = device_condition(value)
    if condition is None:
        while value:
            yield
            value = test()
            if device_condition(value) is not None:
                raise CompileError("a `while` whose test was a Python value turned into a device value on a later "
                                   "trip: test a device variable from the first trip", location=user_location())
        return
    yield from _device_while(condition, jumps)


def _device_while(condition: N.Condition, jumps: bool):
    tracer = current()
    loc = user_location()
    if not condition.reads_elements():
        raise CompileError(
            f"`while {condition.text()}` tests block ids, loop variables or runtime scalars only, which no trip "
            "changes: it would run no trip or forever. Test a variable the body updates (v = T.alloc_var(...); "
            "`while v[0] < n:` ... `v[0] = v[0] + 1`), or write a counted loop `for k in T.serial(n)`", location=loc)
    if jumps:
        raise CompileError("a device `while` cannot `break`, `continue` or `return` (its body is traced once): "
                           "fold the exit into its test, or put the rest of the body under an `if`", location=loc)
    if tracer.parallel is not None:
        raise CompileError("a device `while` inside T.Parallel: put the loop around the T.Parallel", location=loc)
    body: list = []
    tracer.bodies.append(body)
    try:
        yield
    finally:
        tracer.bodies.pop()
    tracer.record(ops.While(condition, body, loc=loc))


class _Loop:
    """A `for` loop whose body rebinds names it read first (see _carried_names): when the loop turns out to be a
    device loop (T.serial / T.Pipelined / T.Parallel / T.Persistent, `range` with a device bound: one that opens a
    body to record into, traced once), a carried name whose value the body changed is refused."""

    def __init__(self, iterable, scope: dict, names: tuple):
        self.iterable = iterable
        self.lines = dict(names)  # name -> the line of the body that assigns it
        self.before = {n: scope.get(n, _MISSING) for n in self.lines}
        self.device = False

    def __iter__(self):
        tracer = current()
        depth, parallel = len(tracer.bodies), tracer.parallel
        for item in self.iterable:  # a device loop opens a body to record into (T.Parallel: its loop)
            self.device = len(tracer.bodies) > depth or (parallel is None and tracer.parallel is not None)
            yield item

    def end(self, scope: dict):
        if not self.device:
            return
        for name, before in self.before.items():
            if before is not _MISSING and not _same(before, scope.get(name, _MISSING)):
                raise CompileError(
                    f"`{name}` is updated in the body of a device loop and read again on its next trip: the body "
                    "is traced once, so every trip would see the value before the loop. Compute it from the loop "
                    "index (`off = k * 64`), or keep it in device memory (v = T.alloc_var(dtype); "
                    "v[0] = v[0] + 64)", location=_at_line(user_location(), self.lines[name]))


def _at_line(location: str | None, line: int) -> str | None:
    return None if location is None else f"{location.rpartition(':')[0]}:{line}"


def loop(iterable, scope: dict, names: tuple):
    """The trips of a `for` loop whose body carries names from trip to trip (see _Loop)."""
    return _Loop(iterable, scope, names)


def assign(scope: dict, name: str, value, plain_name: bool):
    """`name = value` as TileLang reads it where `name` or `value` is a T.alloc_var variable: assigning to a variable's
    name stores into the variable (`bx = b_split`); binding a new name to a variable (`current = bx`, a plain name on
    the right) takes the variable's value now (a Let op: TileLang's LetStmt); anything else binds as Python does."""
    from .local import snapshot

    old = scope.get(name)
    if getattr(old, "is_var", False) and value is not old and not getattr(value, "is_var", False):
        old[0] = value
        return old
    if plain_name and getattr(value, "is_var", False) and value is not old and value.snapshots():
        return snapshot(value)
    return value


_IN_PLACE = {"Add": operator.iadd, "Sub": operator.isub, "Mult": operator.imul, "Div": operator.itruediv,
             "FloorDiv": operator.ifloordiv, "Mod": operator.imod, "Pow": operator.ipow, "LShift": operator.ilshift,
             "RShift": operator.irshift, "BitAnd": operator.iand, "BitOr": operator.ior, "BitXor": operator.ixor,
             "MatMult": operator.imatmul}


def augmented(scope: dict, name: str, op: str, value):
    """`name op= value`: where `name` is a variable, the store of `name op value` (reading the variable: TileLang's
    reading); for any other name, Python's augmented assignment."""
    old = scope[name]
    return assign(scope, name, _IN_PLACE[op](old, value), False)


def range_(jumps: bool, *args):
    """`range(...)`: Python's range (unrolled while tracing) when every bound is a Python int; a device loop
    (T.serial) when a bound is a device value."""
    if all(isinstance(a, numbers.Integral) for a in args):
        return builtins.range(*args)
    if jumps:
        raise CompileError("a `range` loop with a device bound cannot `break`, `continue` or `return` (its body is "
                           "traced once): use an `if` around the rest of the body", location=user_location())
    from .control import serial

    return serial(*args)
